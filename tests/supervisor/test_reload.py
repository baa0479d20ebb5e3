"""Reload: honest stats, re-read manifests, re-registered tools, no hung calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.supkit import CYCLE, Kit, wait_for

from supervisor import (
    ExtensionGone,
    ExtensionStarted,
    SupervisorClient,
    SupervisorEvent,
    TextBlock,
    ToolsChanged,
    UnknownTool,
)

# Registers one tool per name given in argv; each answers "<tool> from <pid>".
TOOLS_FROM_ARGV = """\
emit({"type": "hello", "name": NAME})
for t in sys.argv[1:]:
    emit({"type": "register_tool", "name": t, "schema": {"type": "object"}})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "tool_call":
        emit({"type": "tool_result", "id": msg["id"],
              "content": [{"type": "text", "text": f"{msg['name']} from {os.getpid()}"}]})
    elif msg["type"] == "shutdown":
        emit({"type": "shutdown_ack"})
        break
"""


def _set_manifest(d: Path, **changes: Any) -> None:
    path = d / "extension.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


async def test_reload_stats_are_honest(kit: Kit) -> None:
    glob = kit.home / "extensions"
    kit.trust(
        kit.inline("good1", TOOLS_FROM_ARGV, args=["one"], where=glob),
        kit.inline("good2", TOOLS_FROM_ARGV, args=["two"], where=glob),
        kit.chaos("impostor", "--wrong-name", where=glob),
    )
    kit.chaos("off", where=glob, enabled=False)
    broken = glob / "broken"
    broken.mkdir()
    (broken / "extension.json").write_text('{"name": "broken"}')
    with trio.fail_after(CYCLE):
        async with kit.open(discover=True) as client:
            stats = await client.reload()
            again = await client.reload()
            out = await client.call_tool("two", {})
    assert stats.stopped == 2
    assert stats.loaded == 3  # good1, good2, impostor (off is disabled)
    assert stats.ready == 2
    assert len(stats.errors) == 2
    assert any("impostor" in e and "impostor-impostor" in e for e in stats.errors)
    assert any(str(broken / "extension.json") in e and "exec" in e for e in stats.errors)
    assert again == stats
    block = out.content[0]
    assert isinstance(block, TextBlock)
    assert block.text.startswith("two from ")


async def test_reload_respawns_and_rereads_manifests(kit: Kit) -> None:
    ext = kit.inline("shape", TOOLS_FROM_ARGV, args=["alpha"])
    seen: list[SupervisorEvent] = []
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            before = await client.call_tool("alpha", {})
            events = client.subscribe()
            opening = await wait_for(events, ExtensionStarted)  # what was already running
            _set_manifest(ext, args=["beta", "gamma"], description="edited")
            stats = await client.reload()
            changed = await wait_for(events, ToolsChanged, seen=seen)
            started = [e for e in seen if isinstance(e, ExtensionStarted)]
            if not started:
                started = [await wait_for(events, ExtensionStarted)]
            after = await client.call_tool("beta", {})
            try:
                await client.call_tool("alpha", {})
                alpha_gone = False
            except UnknownTool:
                alpha_gone = True
            info = (await client.list_extensions())[0]
    assert opening.tools == ["alpha"]
    assert stats.ready == 1
    assert sorted(t.name for t in changed.tools) == ["beta", "gamma"]
    assert started[0].extension == "shape"
    assert started[0].tools == ["beta", "gamma"]
    assert alpha_gone
    old_pid = before.content[0].text.split()[-1]  # type: ignore[union-attr]
    new_pid = after.content[0].text.split()[-1]  # type: ignore[union-attr]
    assert old_pid != new_pid
    assert info.pid == int(new_pid)
    assert info.version == "1.0.0"


async def test_reload_picks_up_disable_and_fix(kit: Kit) -> None:
    ext = kit.inline("toggle", TOOLS_FROM_ARGV, args=["t"])
    broken = kit.chaos("later", "--wrong-name")
    with trio.fail_after(CYCLE):
        async with kit.open(ext, broken) as client:
            _set_manifest(ext, enabled=False)
            _set_manifest(broken, args=["--name", "later"])
            stats = await client.reload()
            infos = {i.name: i for i in await client.list_extensions()}
            tools = {t.name: t.extension for t in client.tools()}
    assert (stats.stopped, stats.loaded, stats.ready, stats.errors) == (1, 1, 1, [])
    assert infos["toggle"].state == "disabled"
    assert infos["later"].state == "running"
    assert tools == {"chaos_echo": "later"}


async def _call_outcome(client: SupervisorClient, out: list[str]) -> None:
    try:
        result = await client.call_tool("chaos_echo", {"text": "in flight"})
    except ExtensionGone as exc:  # ExtensionStopping is a subclass
        out.append(type(exc).__name__)
    except UnknownTool:
        out.append("UnknownTool")
    else:
        block = result.content[0]
        assert isinstance(block, TextBlock)
        out.append(block.text)


@pytest.mark.slow
async def test_calls_in_flight_during_reload_fail_cleanly_or_complete(kit: Kit) -> None:
    slow = kit.chaos("slow", "--tool-delay", "1")
    outcomes: list[str] = []
    with trio.fail_after(CYCLE):
        async with (
            kit.open(slow, config=kit.config(tool_timeout=8.0)) as client,
            trio.open_nursery() as nursery,
        ):
            for _ in range(3):
                nursery.start_soon(_call_outcome, client, outcomes)
            await trio.sleep(0.2)  # the calls are now waiting on the extension
            stats = await client.reload()
            # A call made right after the reload reaches the new process.
            nursery.start_soon(_call_outcome, client, outcomes)
    assert stats.ready == 1
    assert len(outcomes) == 4
    assert all(o in ("ExtensionStopping", "echo: in flight") for o in outcomes[:3]), outcomes
    assert outcomes[:3].count("ExtensionStopping") >= 1
    assert outcomes[3] == "echo: in flight"


async def test_calls_racing_a_reload_never_hang(kit: Kit) -> None:
    ext = kit.chaos("racer")
    outcomes: list[str] = []
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client, trio.open_nursery() as nursery:
            nursery.start_soon(client.reload)
            for _ in range(20):
                nursery.start_soon(_call_outcome, client, outcomes)
                await trio.sleep(0.01)
    assert len(outcomes) == 20
    assert set(outcomes) <= {"echo: in flight", "ExtensionStopping", "ExtensionGone", "UnknownTool"}
