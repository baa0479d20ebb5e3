"""Crash isolation, restart policies, backoff and quarantine."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import trio
from helpers.procs import alive
from helpers.supkit import CYCLE, Kit, wait_for

from supervisor import (
    ExtensionCrashed,
    ExtensionGone,
    ExtensionInfo,
    ExtensionRestarted,
    ExtensionStarted,
    Quarantined,
    SupervisorClient,
    SupervisorEvent,
    TextBlock,
    ToolsChanged,
    UnknownExtension,
    UnknownTool,
)

PING = """\
emit({"type": "hello", "name": NAME})
emit({"type": "register_command", "name": "ping-" + NAME})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "command_invoked":
        emit({"type": "command_response", "id": msg["id"], "action": "display",
              "display": "pong"})
    elif msg["type"] == "shutdown":
        break
"""

# Exits 5 right after ready while $CORRAL_EXT_DIR/crash exists; /bye-<name> exits 0,
# /die-<name> exits 5.
FLAKY = """\
emit({"type": "hello", "name": NAME})
emit({"type": "register_tool", "name": NAME + "_tool", "schema": {"type": "object"}})
emit({"type": "register_command", "name": "bye-" + NAME})
emit({"type": "register_command", "name": "die-" + NAME})
emit({"type": "ready"})
if os.path.exists(os.path.join(os.environ["CORRAL_EXT_DIR"], "crash")):
    sys.stderr.write("flaky: crash file present\\n")
    sys.stderr.flush()
    os._exit(5)
for msg in frames():
    if msg["type"] == "tool_call":
        emit({"type": "tool_result", "id": msg["id"],
              "content": [{"type": "text", "text": "fine"}]})
    elif msg["type"] == "command_invoked":
        if msg["name"].startswith("bye-"):
            emit({"type": "command_response", "id": msg["id"], "action": "noop"})
            sys.exit(0)
        os._exit(5)
    elif msg["type"] == "shutdown":
        break
"""


async def _info(client: SupervisorClient, name: str) -> ExtensionInfo:
    return next(i for i in await client.list_extensions() if i.name == name)


async def _pong(client: SupervisorClient, name: str) -> None:
    out = await client.invoke_command(f"ping-{name}")
    assert out.display == "pong"


async def test_crash_fails_pending_call_at_once_and_restarts(kit: Kit) -> None:
    crashy = kit.chaos("crashy", "--crash-after", "2", "--stderr-lines", "3")
    other = kit.inline("other", PING)
    cfg = kit.config(tool_timeout=6.0, restart_backoff=0.3, restart_backoff_max=0.3)
    seen: list[SupervisorEvent] = []
    with trio.fail_after(CYCLE):
        async with kit.open(crashy, other, config=cfg) as client:
            events = client.subscribe()
            (first_pid,) = kit.started_pids("crashy")
            ok = await client.call_tool("chaos_echo", {"text": "one"})
            assert ok.content == [TextBlock(text="echo: one")]
            t0 = trio.current_time()
            with pytest.raises(ExtensionGone) as gone:
                await client.call_tool("chaos_echo", {"text": "two"})
            took = trio.current_time() - t0
            await _pong(client, "other")  # untouched
            crashed = await wait_for(events, ExtensionCrashed, seen=seen)
            # During the restart delay calls fail at once, and say why.
            with pytest.raises(ExtensionGone) as during:
                await client.call_tool("chaos_echo", {"text": "too soon"})
            restarted = await wait_for(events, ExtensionRestarted, seen=seen)
            again = await client.call_tool("chaos_echo", {"text": "three"})
            await _pong(client, "other")
            info = await _info(client, "crashy")
    assert took < 6.0 / 2
    assert gone.value.extension == "crashy"
    assert gone.value.returncode == 3
    assert "exit status 3" in str(gone.value)
    assert not isinstance(gone.value, UnknownTool)
    assert crashed.extension == "crashy"
    assert crashed.returncode == 3
    assert crashed.signal is None
    assert crashed.restart_in is not None
    assert 0.3 * 0.8 <= crashed.restart_in <= 0.3 * 1.2
    assert crashed.stderr_tail[:3] == [f"chaos: stderr line {i}" for i in (1, 2, 3)]
    assert crashed.stderr_tail[-1] == "chaos: crashing on tool call 2"
    assert "exit status 3" in crashed.reason
    assert "restarting" in str(during.value)
    assert restarted.extension == "crashy"
    assert restarted.restarts == 1
    assert restarted.pid != first_pid
    assert not alive(first_pid)
    # The subscription opens with what was already running, then the crash story.
    assert [type(e) for e in seen if e.extension == "crashy"] == [
        ExtensionStarted,
        ExtensionCrashed,
        ExtensionRestarted,
    ]
    assert again.content == [TextBlock(text="echo: three")]
    assert info.state == "running"
    assert info.pid == restarted.pid
    assert info.stats.restarts == 1
    assert "exited: exit status 3" in kit.log_text("crashy")


async def test_pending_call_carries_exit_status_when_stdout_closes_first(kit: Kit) -> None:
    """Deterministic form of the race above: EOF on stdout arrives before the exit."""
    ext = kit.inline(
        "closer",
        """\
        import time
        emit({"type": "hello", "name": NAME})
        emit({"type": "register_tool", "name": "close_tool", "schema": {"type": "object"}})
        emit({"type": "ready"})
        for msg in frames():
            if msg["type"] == "tool_call":
                sys.stderr.write("closer: going away\\n")
                sys.stderr.flush()
                os.close(1)
                time.sleep(0.3)
                os._exit(3)
        """,
    )
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=kit.config(tool_timeout=6.0)) as client:
            t0 = trio.current_time()
            with pytest.raises(ExtensionGone) as gone:
                await client.call_tool("close_tool", {})
            took = trio.current_time() - t0
    assert took < 6.0 / 2
    assert gone.value.returncode == 3
    assert "exit status 3" in str(gone.value)


async def test_killed_by_signal_is_reported(kit: Kit) -> None:
    victim = kit.chaos("victim", "--stderr-lines", "30")
    with trio.fail_after(CYCLE):
        async with kit.open(victim) as client:
            events = client.subscribe()
            pid = (await _info(client, "victim")).pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            crashed = await wait_for(events, ExtensionCrashed)
            restarted = await wait_for(events, ExtensionRestarted)
            out = await client.call_tool("chaos_echo", {"text": "back"})
    assert crashed.returncode == -signal.SIGKILL
    assert crashed.signal == "SIGKILL"
    assert "SIGKILL" in crashed.reason
    # Only the configured number of lines is kept, the newest ones.
    assert crashed.stderr_tail == [f"chaos: stderr line {i}" for i in range(11, 31)]
    assert restarted.pid != pid
    assert out.content == [TextBlock(text="echo: back")]


async def test_restart_never_stays_stopped(kit: Kit) -> None:
    ext = kit.chaos("once", "--crash-after", "1", restart="never")
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            events = client.subscribe()
            with pytest.raises(ExtensionGone):
                await client.call_tool("chaos_echo", {"text": "x"})
            crashed = await wait_for(events, ExtensionCrashed)
            changed = await wait_for(events, ToolsChanged)
            info = await _info(client, "once")
            with pytest.raises(UnknownTool):
                await client.call_tool("chaos_echo", {"text": "x"})
    assert crashed.restart_in is None
    assert changed.tools == []
    assert info.state == "stopped"
    assert info.pid is None
    assert "exit status 3" in info.problem
    assert len(kit.started_pids("once")) == 1


async def test_restart_always_restarts_after_clean_exit(kit: Kit) -> None:
    ext = kit.inline("always", FLAKY, restart="always")
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            events = client.subscribe()
            await client.invoke_command("bye-always")
            crashed = await wait_for(events, ExtensionCrashed)
            restarted = await wait_for(events, ExtensionRestarted)
            out = await client.call_tool("always_tool", {})
    assert crashed.returncode == 0
    assert crashed.restart_in is not None
    assert restarted.restarts == 1
    assert out.content == [TextBlock(text="fine")]
    assert len(kit.started_pids("always")) == 2


async def test_restart_on_failure_does_not_restart_clean_exit(kit: Kit) -> None:
    ext = kit.inline("polite", FLAKY)  # the default policy is on-failure
    other = kit.inline("other", PING)
    with trio.fail_after(CYCLE):
        async with kit.open(ext, other) as client:
            events = client.subscribe()
            await client.invoke_command("bye-polite")
            crashed = await wait_for(events, ExtensionCrashed)
            await wait_for(events, ToolsChanged, lambda e: not e.tools)
            info = await _info(client, "polite")
            await _pong(client, "other")
            enabled = await client.enable("polite")  # starts a stopped one again
            out = await client.call_tool("polite_tool", {})
    assert enabled.state == "running"
    assert out.content == [TextBlock(text="fine")]
    assert crashed.returncode == 0
    assert crashed.restart_in is None
    assert info.state == "stopped"
    assert info.problem == ""
    assert len(kit.started_pids("polite")) == 2


async def _until_quarantined(
    client: SupervisorClient, events: trio.MemoryReceiveChannel[SupervisorEvent], name: str
) -> Quarantined:
    """Wait for ``name``'s Quarantined event; fail fast if it settles in another state."""
    with trio.fail_after(10):
        while True:
            info = await _info(client, name)
            if info.state == "quarantined":  # got there before we subscribed
                return Quarantined(extension=name, reason=info.problem, crashes=3)
            if info.state in ("failed", "stopped"):
                raise AssertionError(f"{name} is {info.state}, not quarantined: {info.problem}")
            event = await events.receive()
            if isinstance(event, Quarantined) and event.extension == name:
                return event


async def test_crash_loop_is_quarantined_persisted_and_lifted(kit: Kit) -> None:
    ext = kit.inline("flaky", FLAKY)
    crash_file = ext / "crash"
    crash_file.touch()
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            events = client.subscribe()
            q = await _until_quarantined(client, events, "flaky")
            info = await _info(client, "flaky")
            with pytest.raises(UnknownTool):
                await client.call_tool("flaky_tool", {})
    assert q.crashes == 3
    assert "exit status 5" in q.reason
    assert info.state == "quarantined"
    assert "exit status 5" in info.problem
    assert info.pid is None
    assert len(kit.started_pids("flaky")) == 3
    assert "flaky: crash file present" in kit.log_text("flaky")

    crash_file.unlink()  # it would work now, but the quarantine persists
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            info = await _info(client, "flaky")
            assert len(kit.started_pids("flaky")) == 3  # not even started
            assert info.state == "quarantined"
            assert "exit status 5" in info.problem
            # enable lifts it.
            enabled = await client.enable("flaky")
            assert enabled.state == "running"
            assert enabled.problem == ""
            out = await client.call_tool("flaky_tool", {})
            assert out.content == [TextBlock(text="fine")]
            # Quarantine again, then a reload lifts it too.
            events = client.subscribe()
            crash_file.touch()
            with pytest.raises(ExtensionGone):
                await client.invoke_command("die-flaky")
            await wait_for(events, Quarantined)
            assert (await _info(client, "flaky")).state == "quarantined"
            crash_file.unlink()
            stats = await client.reload()
            assert stats.ready == 1
            info = await _info(client, "flaky")
            assert info.state == "running"
            out = await client.call_tool("flaky_tool", {})
            assert out.content == [TextBlock(text="fine")]
    quarantine_dir = Path(kit.home) / "state" / "quarantine"
    assert not any(quarantine_dir.glob("flaky*"))


async def test_exit_on_start_is_quarantined(kit: Kit) -> None:
    ext = kit.chaos("doomed", "--exit-on-start", "7")
    other = kit.inline("other", PING)
    with trio.fail_after(CYCLE):
        async with kit.open(ext, other) as client:
            events = client.subscribe()
            await _pong(client, "other")
            q = await _until_quarantined(client, events, "doomed")
            info = await _info(client, "doomed")
            await _pong(client, "other")
        async with kit.open(ext, other) as client:
            again = await _info(client, "doomed")
            started_again = len(kit.started_pids("doomed"))
            enabled = await client.enable("doomed")  # still broken: crashes again
    assert q.crashes == 3
    assert info.state == "quarantined"
    assert "exit status 7" in info.problem
    assert "chaos: exiting on start" in kit.log_text("doomed")
    assert again.state == "quarantined"
    assert started_again == 3  # the quarantine persisted: not even started
    assert enabled.state != "running"
    assert len(kit.started_pids("doomed")) > 3


async def test_enable_unknown_extension(kit: Kit) -> None:
    with trio.fail_after(CYCLE):
        async with kit.open(kit.inline("other", PING)) as client:
            with pytest.raises(UnknownExtension):
                await client.enable("nobody")


# Fine on its first start; every later start says hello under the wrong name.
TURNCOAT = """\
marker = os.path.join(os.environ["CORRAL_DATA_DIR"], "started-once")
name = NAME + "-changed" if os.path.exists(marker) else NAME
open(marker, "w").close()
emit({"type": "hello", "name": name})
emit({"type": "register_tool", "name": "turncoat_tool", "schema": {"type": "object"}})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "tool_call":
        os._exit(9)
"""


async def test_refused_restart_unregisters_tools(kit: Kit) -> None:
    ext = kit.inline("turncoat", TURNCOAT)
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            events = client.subscribe()
            assert [t.name for t in client.tools()] == ["turncoat_tool"]
            with pytest.raises(ExtensionGone):
                await client.call_tool("turncoat_tool", {})
            refused = await wait_for(events, ExtensionCrashed, lambda e: e.restart_in is None)
            info = await _info(client, "turncoat")
            tools = client.tools()
            with pytest.raises(UnknownTool):
                await client.call_tool("turncoat_tool", {})
    assert "turncoat-changed" in refused.reason
    assert info.state == "failed"
    assert "turncoat-changed" in info.problem
    # A refused extension serves nothing: the agent must not keep offering its tools.
    assert tools == []


async def test_backoff_doubles_up_to_its_ceiling(kit: Kit) -> None:
    ext = kit.inline("flaky", FLAKY)
    cfg = kit.config(restart_backoff=0.1, restart_backoff_max=0.15, quarantine_crashes=4)
    crashes: list[ExtensionCrashed] = []
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=cfg) as client:
            events = client.subscribe()
            (ext / "crash").touch()  # from now on every start crashes
            with pytest.raises(ExtensionGone):
                await client.invoke_command("die-flaky")
            seen: list[SupervisorEvent] = []
            q = await wait_for(events, Quarantined, seen=seen)
            crashes = [e for e in seen if isinstance(e, ExtensionCrashed)]
            restarted = [e for e in seen if isinstance(e, ExtensionRestarted)]
    assert q.crashes == 4
    delays = [c.restart_in for c in crashes]
    assert len(delays) == 3
    assert all(d is not None for d in delays)
    bases = [0.1, 0.15, 0.15]  # doubled, then held at the ceiling
    for d, base in zip(delays, bases, strict=True):
        assert d is not None
        assert base * 0.8 <= d <= base * 1.2
    # They crash right after ready, so each restart is announced before the next crash.
    assert [r.restarts for r in restarted] == [1, 2, 3]


@pytest.mark.slow
async def test_crashes_outside_the_window_do_not_quarantine(kit: Kit) -> None:
    ext = kit.inline("flaky", FLAKY)
    # Restarts are at least 0.24 s apart, the window is 0.2 s: never 2 crashes in it.
    cfg = kit.config(
        restart_backoff=0.3, restart_backoff_max=0.3, quarantine_crashes=2, quarantine_window=0.2
    )
    seen: list[SupervisorEvent] = []
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=cfg) as client:
            events = client.subscribe()
            (ext / "crash").touch()
            with pytest.raises(ExtensionGone):
                await client.invoke_command("die-flaky")
            await wait_for(events, ExtensionRestarted, lambda e: e.restarts == 3, seen=seen)
            (ext / "crash").unlink()
            info = await _info(client, "flaky")
    assert not any(isinstance(e, Quarantined) for e in seen)
    assert info.state != "quarantined"
