"""Reload as a swap: the new generation starts beside the old one, and only a new
version that started replaces its old one; the rest keep running."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.procs import alive
from helpers.supkit import CYCLE, Kit, wait_for

from supervisor import (
    ExtensionKept,
    ExtensionState,
    ExtensionStopping,
    SupervisorClient,
    TextBlock,
    UnknownTool,
)
from supervisor._swap import plan_swap

S = ExtensionState

# Answers "<tool> from <pid>"; what it does at start depends on its argv (its manifest).
VERSIONED = """\
import time
mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
if mode == "crash":
    sys.exit(3)
if mode == "silent":
    time.sleep(60)
emit({"type": "hello", "name": NAME})
emit({"type": "register_tool", "name": "ping", "schema": {"type": "object"}})
if mode != "no-ready":
    emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "tool_call":
        emit({"type": "tool_result", "id": msg["id"],
              "content": [{"type": "text", "text": f"ping from {os.getpid()}"}]})
    elif msg["type"] == "shutdown":
        emit({"type": "shutdown_ack"})
        break
"""


def _edit(d: Path, **changes: Any) -> None:
    path = d / "extension.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


async def _pid_of_ping(client: SupervisorClient) -> int:
    out = await client.call_tool("ping", {})
    block = out.content[0]
    assert isinstance(block, TextBlock)
    return int(block.text.split()[-1])


@pytest.mark.parametrize(
    ("new_version", "why"),
    [
        ("crash", "exited before sending hello"),
        ("silent", "no hello within"),
    ],
)
async def test_a_new_version_that_does_not_start_keeps_the_old_one(
    kit: Kit, new_version: str, why: str
) -> None:
    d = kit.inline("svc", VERSIONED)
    config = kit.config(handshake_timeout=0.5)
    with trio.fail_after(CYCLE):
        async with kit.open(d, config=config) as client:
            before = await _pid_of_ping(client)
            _edit(d, args=[new_version])
            with client.subscribe() as events:
                stats = await client.reload()
                kept = await wait_for(events, ExtensionKept)
            after = await _pid_of_ping(client)
            (info,) = await client.list_extensions()
            tools = [t.name for t in client.tools()]
    assert after == before
    assert stats.kept_old == ["svc"]
    assert (stats.stopped, stats.loaded, stats.ready) == (0, 1, 0)
    assert len(stats.errors) == 1
    assert stats.errors[0].startswith("svc: ")
    assert why in stats.errors[0]
    assert (kept.extension, kept.pid) == ("svc", before)
    assert why in kept.reason
    assert (info.state, info.pid) == (S.RUNNING, before)
    assert tools == ["ping"]
    # The new version was stopped, not left restarting beside the old one.
    pids = kit.started_pids("svc")
    assert len(pids) >= 2
    assert pids[0] == before
    assert not any(alive(p) for p in pids[1:])


async def test_a_broken_manifest_keeps_the_running_version(kit: Kit) -> None:
    d = kit.inline("svc", VERSIONED)
    with trio.fail_after(CYCLE):
        async with kit.open(d) as client:
            before = await _pid_of_ping(client)
            (d / "extension.json").write_text('{"name": "svc", "exec": ')
            stats = await client.reload()
            after = await _pid_of_ping(client)
            infos = await client.list_extensions()
            (d / "extension.json").write_text(json.dumps({"name": "svc", "exec": "./ext.py"}))
            fixed = await client.reload()
            again = await _pid_of_ping(client)
    assert after == before
    assert stats.kept_old == ["svc"]
    assert (stats.stopped, stats.loaded, stats.ready) == (0, 0, 0)
    assert any("extension.json" in e and "JSON" in e for e in stats.errors)
    assert [(i.name, i.state) for i in infos] == [("svc", S.RUNNING), ("svc", S.INVALID)]
    assert (fixed.stopped, fixed.ready, fixed.kept_old, fixed.errors) == (1, 1, [], [])
    assert again != before


async def test_a_new_version_without_ready_is_ready_after_the_quiet_period(kit: Kit) -> None:
    d = kit.inline("svc", VERSIONED)
    with trio.fail_after(CYCLE):
        async with kit.open(d) as client:
            before = await _pid_of_ping(client)
            _edit(d, args=["no-ready"])
            stats = await client.reload()
            after = await _pid_of_ping(client)
    assert (stats.stopped, stats.ready, stats.kept_old) == (1, 1, [])
    assert after != before
    assert not alive(before)


async def test_calls_during_a_reload_always_find_one_generation(kit: Kit) -> None:
    d = kit.inline("svc", VERSIONED)
    outcomes: list[str] = []

    async def hammer(client: SupervisorClient, done: trio.Event) -> None:
        while not done.is_set():
            try:
                outcomes.append(f"pid {await _pid_of_ping(client)}")
            except ExtensionStopping:
                outcomes.append("stopping")
            except UnknownTool:
                outcomes.append("unknown tool")

    with trio.fail_after(CYCLE):
        async with kit.open(d) as client:
            before = await _pid_of_ping(client)
            done = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(hammer, client, done)
                stats = await client.reload()
                after = await _pid_of_ping(client)
                done.set()
    assert stats.ready == 1
    assert after != before
    assert "unknown tool" not in outcomes
    assert set(outcomes) <= {f"pid {before}", f"pid {after}", "stopping"}
    assert f"pid {before}" in outcomes


@dataclass
class _Member:
    name: str
    state: ExtensionState
    listed: bool = True
    source: str = "global"

    @property
    def spec(self) -> Any:
        return _Spec(self.name, self.source)


@dataclass(frozen=True)
class _Spec:
    name: str
    source: str

    @property
    def identity(self) -> str:
        return f"{self.name}-id"

    @property
    def manifest_path(self) -> str:
        return f"/exts/{self.name}/extension.json"


def test_plan_swap_keeps_only_running_old_versions_of_new_ones_that_failed() -> None:
    old = [
        _Member("up", S.RUNNING),  # new version ready: replaced
        _Member("flaky", S.RUNNING),  # new version crashed: kept
        _Member("broken", S.RUNNING),  # manifest no longer loads: kept
        _Member("gone", S.RUNNING),  # directory removed: retired
        _Member("dead", S.FAILED, listed=False),  # nothing to keep
        _Member("off", S.RUNNING),  # disabled now: retired
        _Member("moved", S.RUNNING),  # its grants changed: quarantined, retired
        _Member("mcp-fx", S.RUNNING, source="mcp"),  # started at run time: not the reload's
    ]
    new = [
        _Member("up", S.RUNNING),
        _Member("flaky", S.BACKOFF),
        _Member("dead", S.FAILED, listed=False),
        _Member("fresh", S.UNTRUSTED, listed=False),
        _Member("off", S.DISABLED, listed=False),
        _Member("moved", S.QUARANTINED, listed=False),
    ]
    swap = plan_swap(old, new, ["/exts/broken/extension.json"])
    names = [(m.name, m.state) for m in swap.exts]
    assert names == [
        ("up", S.RUNNING),
        ("flaky", S.RUNNING),
        ("dead", S.FAILED),
        ("fresh", S.UNTRUSTED),
        ("off", S.DISABLED),
        ("moved", S.QUARANTINED),
        ("broken", S.RUNNING),
        ("mcp-fx", S.RUNNING),
    ]
    assert swap.staying == [old[7]]
    assert [m.name for m in swap.kept] == ["flaky", "broken"]
    assert swap.kept[0] is old[1]
    assert [m.name for m in swap.discarded] == ["flaky"]
    assert swap.discarded[0] is new[1]
    assert sorted(m.name for m in swap.retired) == ["dead", "gone", "moved", "off", "up"]
    assert all(m in old for m in swap.retired)
