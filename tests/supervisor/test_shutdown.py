"""The shutdown ladder, and nothing an extension started survives a stop."""

from __future__ import annotations

import os
import signal
from collections.abc import Awaitable, Callable

import pytest
import trio
from helpers.procs import alive, lasting, num_fds
from helpers.supkit import CYCLE, Kit, capture_logs, wait_for

from supervisor import (
    ExtensionCrashed,
    ExtensionGone,
    ExtensionRestarted,
    ExtensionStopped,
    ExtensionStopping,
    InterceptOutcome,
    SupervisorClosed,
    SupervisorError,
    SupervisorEvent,
)


def _children() -> list[int]:
    """Pids of this process's descendants (its guardian's included) that outlived the
    stop: zombies and processes the kernel is taking down are waited for."""
    return lasting()


async def test_cooperative_extensions_stop_fast(kit: Kit) -> None:
    paths = [kit.chaos(f"c{i}") for i in range(3)]
    cfg = kit.config(shutdown_grace=4.0, term_grace=4.0)
    leftovers: list[SupervisorEvent] = []
    with capture_logs() as logs, trio.fail_after(CYCLE):
        async with kit.open(*paths, config=cfg) as client:
            events = client.subscribe()
            pids = [i.pid for i in await client.list_extensions()]
            t0 = trio.current_time()
        took = trio.current_time() - t0
        async for event in events:  # closed by the supervisor once it has stopped
            leftovers.append(event)
        with pytest.raises(SupervisorClosed):
            await client.call_tool("chaos_echo", {"text": "late"})
    assert took < 4.0 / 2
    assert all(pid is not None and not alive(pid) for pid in pids)
    assert not any(e["event"] in ("extension_sigterm", "extension_sigkill") for e in logs)
    assert sorted(e.extension for e in leftovers if isinstance(e, ExtensionStopped)) == [
        "c0",
        "c1",
        "c2",
    ]
    assert _children() == []


async def test_sigterm_ignoring_extension_is_killed(kit: Kit) -> None:
    stubborn = kit.chaos("stubborn", "--ignore-sigterm")
    polite = kit.chaos("polite")
    cfg = kit.config(shutdown_grace=0.5, term_grace=0.3)
    with capture_logs() as logs, trio.fail_after(CYCLE):
        async with kit.open(stubborn, polite, config=cfg) as client:
            pid = next(i.pid for i in await client.list_extensions() if i.name == "stubborn")
            t0 = trio.current_time()
        took = trio.current_time() - t0
    assert pid is not None
    assert not alive(pid)
    assert 0.5 + 0.3 <= took < 0.5 + 0.3 + 2.0
    ladder = [
        (e["event"], e["extension"])
        for e in logs
        if e["event"] in ("extension_sigterm", "extension_sigkill")
    ]
    assert ladder == [("extension_sigterm", "stubborn"), ("extension_sigkill", "stubborn")]
    assert "chaos: ignoring shutdown" in kit.log_text("stubborn")
    assert _children() == []


@pytest.mark.parametrize("flags", [(), ("--ignore-sigterm",)], ids=["polite", "stubborn"])
async def test_children_and_daemons_do_not_survive(kit: Kit, flags: tuple[str, ...]) -> None:
    spawner = kit.chaos("spawner", "--spawn", "4", *flags)
    with trio.fail_after(CYCLE):
        async with kit.open(spawner) as client:
            out = await client.call_tool("chaos_echo", {"text": "x"})
            pids = kit.spawned_pids("spawner")
            assert len(pids) == 4
            assert all(alive(p) for p in pids)
    assert out.extension == "spawner"
    assert [p for p in pids if alive(p)] == []
    assert _children() == []


@pytest.mark.slow
async def test_crashed_incarnation_leaves_nothing_behind(kit: Kit) -> None:
    spawner = kit.chaos("spawner", "--spawn", "2", "--crash-after", "1")
    with trio.fail_after(CYCLE):
        async with kit.open(spawner) as client:
            events = client.subscribe()
            first = kit.spawned_pids("spawner")
            assert len(first) == 2
            with pytest.raises(ExtensionGone):
                await client.call_tool("chaos_echo", {"text": "x"})
            await wait_for(events, ExtensionCrashed)
            await wait_for(events, ExtensionRestarted)
            # The first incarnation's children and daemons are gone while we still run.
            assert [p for p in first if alive(p)] == []
            second = [p for p in kit.spawned_pids("spawner") if p not in first]
            assert len(second) == 2
            assert all(alive(p) for p in second)
    assert [p for p in second if alive(p)] == []


@pytest.mark.slow
async def test_no_zombies_and_no_leaked_fds(kit: Kit) -> None:
    paths = [
        kit.chaos("crashy", "--crash-after", "1"),  # loaded first: owns chaos_echo
        kit.chaos("spawner", "--spawn", "2"),
        kit.chaos("stubborn", "--ignore-sigterm"),
        kit.chaos("silent", "--no-hello"),
    ]
    cfg = kit.config(handshake_timeout=1.0)

    async def cycle() -> None:
        with trio.fail_after(CYCLE):
            async with kit.open(*paths, config=cfg) as client:
                with pytest.raises(ExtensionGone):
                    await client.call_tool("chaos_echo", {"text": "x"})
                await client.list_extensions()

    await cycle()  # warm-up: threads and caches the first cycle creates are not leaks
    baseline = num_fds()
    await cycle()
    assert num_fds() == baseline
    assert _children() == []


async def test_cancelling_the_enclosing_scope_reaps_everything(kit: Kit) -> None:
    paths = [kit.chaos("spawner", "--spawn", "4"), kit.chaos("stubborn", "--ignore-sigterm")]
    cfg = kit.config(shutdown_grace=0.3, term_grace=0.2)
    with trio.fail_after(CYCLE):
        # A move_on_after around the whole block, expiring once everything runs.
        with trio.CancelScope() as scope:
            async with kit.open(*paths, config=cfg) as client:
                pids = [i.pid for i in await client.list_extensions()]
                scope.deadline = trio.current_time() + 0.2
                await trio.sleep_forever()
    assert scope.cancelled_caught
    spawned = kit.spawned_pids("spawner")
    assert len(spawned) == 4
    assert [p for p in [*pids, *spawned] if p is not None and alive(p)] == []
    assert _children() == []


@pytest.mark.slow
async def test_cancelled_during_startup_reaps_everything(kit: Kit) -> None:
    paths = [kit.chaos("slow", "--hello-delay", "5", "--spawn", "2")]
    with trio.fail_after(CYCLE):
        with trio.move_on_after(0.5) as scope:
            async with kit.open(*paths, config=kit.config(handshake_timeout=10.0)):
                raise AssertionError("start-up should not have finished")
    assert scope.cancelled_caught
    started = kit.started_pids("slow")
    spawned = kit.spawned_pids("slow")
    assert len(started) == 1
    assert len(spawned) <= 2
    assert [p for p in [*started, *spawned] if alive(p)] == []
    assert _children() == []


ESCAPEE = """\
import subprocess
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    # A clean environment: nothing inherited from the extension to recognise it by.
    p = subprocess.Popen(["/bin/sleep", "1000"], env={}, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.write(w, str(p.pid).encode())
    os._exit(0)
os.close(w)
sys.stderr.write(f"chaos: spawned pid {int(os.read(r, 100))}\\n")
sys.stderr.flush()
emit({"type": "hello", "name": NAME})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "shutdown":
        break
"""


async def test_daemon_with_a_clean_environment_does_not_survive(kit: Kit) -> None:
    ext = kit.inline("escapee", ESCAPEE)
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            await client.list_extensions()
            (pid,) = kit.spawned_pids("escapee")
            assert alive(pid)
    survivor = alive(pid)
    if survivor:
        os.kill(pid, signal.SIGKILL)
    assert not survivor


async def test_callers_outside_the_block_are_answered_when_it_exits(kit: Kit) -> None:
    hang = kit.chaos("hang", "--hang", "--intercept", "hang")
    cfg = kit.config(tool_timeout=30.0, intercept_timeout=30.0)
    results: dict[str, object] = {}

    async def ask(name: str, fn: Callable[[], Awaitable[object]]) -> None:
        try:
            results[name] = await fn()
        except SupervisorError as exc:
            results[name] = exc

    with trio.fail_after(CYCLE):
        async with trio.open_nursery() as outer, kit.open(hang, config=cfg) as client:
            outer.start_soon(ask, "tool", lambda: client.call_tool("chaos_echo", {}))
            outer.start_soon(ask, "intercept", lambda: client.intercept_tool_call("t", "bash", {}))
            outer.start_soon(ask, "command", lambda: client.invoke_command("chaos"))
            await trio.sleep(0.3)
            t0 = trio.current_time()
        took = trio.current_time() - t0
    assert took < 0.5 + 0.3 + 2.0
    assert isinstance(results["tool"], ExtensionStopping)
    assert isinstance(results["command"], ExtensionStopping)
    intercept = results["intercept"]
    assert isinstance(intercept, InterceptOutcome | SupervisorError)
    if isinstance(intercept, InterceptOutcome):
        assert intercept.block is False


async def test_leaving_during_a_reload_answers_it_and_leaves_nothing_behind(kit: Kit) -> None:
    spawner = kit.chaos("spawner", "--spawn", "2", "--hello-delay", "0.2")
    answers: list[object] = []
    with trio.fail_after(CYCLE):
        async with trio.open_nursery() as outer, kit.open(spawner) as client:

            async def reload() -> None:
                # Every request is answered exactly once, even when the supervisor
                # goes away under it; 3 s is far beyond the whole stop.
                with trio.move_on_after(3.0) as waited:
                    try:
                        answers.append(await client.reload())
                    except SupervisorError as exc:
                        answers.append(exc)
                if waited.cancelled_caught:
                    answers.append("never answered")

            outer.start_soon(reload)
            await trio.sleep(0.05)
    pids = kit.started_pids("spawner") + kit.spawned_pids("spawner")
    assert len(pids) >= 3
    assert [p for p in pids if alive(p)] == []
    assert _children() == []
    assert answers != ["never answered"]


async def test_acked_extension_that_lingers_is_cut_without_sigterm(kit: Kit) -> None:
    lingerer = kit.inline(
        "lingerer",
        """\
        import time
        emit({"type": "hello", "name": NAME})
        emit({"type": "ready"})
        for msg in frames():
            if msg["type"] == "shutdown":
                emit({"type": "shutdown_ack"})
                time.sleep(30)  # "done", but slow to tear down
        """,
    )
    cfg = kit.config(shutdown_grace=4.0, term_grace=4.0, ack_grace=0.1)
    with capture_logs() as logs, trio.fail_after(CYCLE):
        async with kit.open(lingerer, config=cfg) as client:
            (info,) = await client.list_extensions()
            t0 = trio.current_time()
        took = trio.current_time() - t0
    assert info.pid is not None
    assert not alive(info.pid)
    assert took < 4.0 / 2
    assert not any(e["event"] == "extension_sigterm" for e in logs)
    assert _children() == []


@pytest.mark.slow
async def test_extensions_are_stopped_in_parallel(kit: Kit) -> None:
    paths = [kit.chaos(f"stubborn{i}", "--ignore-sigterm") for i in range(4)]
    cfg = kit.config(shutdown_grace=1.0, term_grace=0.5)
    with trio.fail_after(CYCLE):
        async with kit.open(*paths, config=cfg) as client:
            pids = [i.pid for i in await client.list_extensions()]
            t0 = trio.current_time()
        took = trio.current_time() - t0
    # One ladder takes 1.5 s; four in a row would take 6 s.
    assert 1.5 <= took < 1.5 * 2
    assert [p for p in pids if p is not None and alive(p)] == []
