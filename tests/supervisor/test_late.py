"""``SupervisorConfig.late_after``: start-up leaves an extension that has not said hello behind.

The late one goes on starting in the background: it joins (``ExtensionStarted``, its
tools appear) or fails (``ExtensionCrashed``) after ``open_supervisor`` returned.
"""

from __future__ import annotations

import pytest
import trio
from helpers.supkit import CYCLE, Kit

from supervisor import ExtensionCrashed, ExtensionStarted, SupervisorEvent


async def _next(
    events: trio.MemoryReceiveChannel[SupervisorEvent], kind: type, name: str
) -> object:
    async for event in events:
        if isinstance(event, kind) and getattr(event, "extension", None) == name:
            return event
    raise AssertionError(f"no {kind.__name__} for {name}")


@pytest.mark.slow  # waits out a real late extension's handshake window
async def test_a_late_extension_joins_after_start_up(kit: Kit) -> None:
    late = kit.chaos("late", "--hello-delay", "6")
    healthy = kit.chaos("healthy")
    cfg = kit.config(handshake_timeout=30.0, late_after=3.0)
    with trio.fail_after(CYCLE):
        async with kit.open(healthy, late, config=cfg) as client:
            infos = {i.name: i for i in await client.list_extensions()}
            assert infos["healthy"].state == "running"
            assert infos["late"].state == "starting"
            assert {t.extension for t in client.tools()} == {"healthy"}
            with client.subscribe() as events:
                await _next(events, ExtensionStarted, "late")
            infos = {i.name: i for i in await client.list_extensions()}
            assert infos["late"].state == "running"
            # Its tool is registered; "healthy", loaded first, holds the name.
            assert (infos["late"].tools, infos["late"].shadowed_tools) == ([], ["chaos_echo"])


async def test_a_late_extension_that_never_says_hello_fails_on_its_own(kit: Kit) -> None:
    silent = kit.chaos("silent", "--no-hello")
    cfg = kit.config(handshake_timeout=3.0, late_after=0.5)
    with trio.fail_after(CYCLE):
        async with kit.open(silent, config=cfg) as client:
            infos = await client.list_extensions()
            assert infos[0].state == "starting"
            with client.subscribe() as events:
                crashed = await _next(events, ExtensionCrashed, "silent")
            assert isinstance(crashed, ExtensionCrashed)
            assert "no hello within 3 s" in crashed.reason
            assert (await client.list_extensions())[0].state == "failed"


async def test_without_late_after_start_up_waits_for_everyone(kit: Kit) -> None:
    slow = kit.chaos("slow", "--hello-delay", "1")
    with trio.fail_after(CYCLE):
        async with kit.open(slow, config=kit.config(handshake_timeout=10.0)) as client:
            assert (await client.list_extensions())[0].state == "running"
