"""The guardian dies under running extensions: they die with it, say why, and come back."""

from __future__ import annotations

import os
import signal

import trio
from helpers.procs import alive
from helpers.supkit import CYCLE, Kit, wait_for

from sandbox._guardian import guardian
from supervisor import ExtensionCrashed, ExtensionGone, ExtensionRestarted, TextBlock


async def test_extensions_killed_with_the_guardian_name_it_and_restart(kit: Kit) -> None:
    ext = kit.chaos("orphan")
    cfg = kit.config(restart_backoff=0.2, restart_backoff_max=0.2)
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=cfg) as client:
            events = client.subscribe()
            (first,) = kit.started_pids("orphan")
            old = guardian().pid
            assert old is not None
            os.kill(old, signal.SIGKILL)
            crashed = await wait_for(events, ExtensionCrashed)
            restarted = await wait_for(events, ExtensionRestarted)
            again = await client.call_tool("chaos_echo", {"text": "back"})
            new = guardian().pid
    assert crashed.extension == "orphan"
    assert crashed.signal == "SIGKILL"
    assert "guardian" in crashed.reason, crashed.reason
    assert not alive(first)
    assert restarted.pid != first
    assert new not in (None, old)
    assert again.content == [TextBlock(text="echo: back")]
    assert "guardian process died" in kit.log_text("orphan")


async def test_a_call_pending_when_the_guardian_dies_names_it(kit: Kit) -> None:
    ext = kit.chaos("waiter", "--tool-delay", "30")
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            old = guardian().pid
            assert old is not None
            failed: list[ExtensionGone] = []

            async def call() -> None:
                try:
                    await client.call_tool("chaos_echo", {"text": "never"})
                except ExtensionGone as exc:
                    failed.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                await trio.sleep(0.2)
                os.kill(old, signal.SIGKILL)
    (gone,) = failed
    assert gone.extension == "waiter"
    assert "guardian" in str(gone), str(gone)
