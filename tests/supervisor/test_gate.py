"""The reload gate as pure trio logic: chains share it, a reload has it alone."""

from __future__ import annotations

import trio
import trio.testing

from supervisor._gate import ReloadGate


async def _chain(
    gate: ReloadGate, log: list[str], name: str, release: trio.Event | None = None
) -> None:
    async with gate.chain():
        log.append(f"{name} in")
        if release is not None:
            await release.wait()
        log.append(f"{name} out")


async def _reload(gate: ReloadGate, log: list[str], release: trio.Event) -> None:
    async with gate.reload():
        log.append("reload in")
        await release.wait()
        log.append("reload out")


async def test_chains_run_together_and_a_reload_waits_for_them() -> None:
    gate = ReloadGate()
    log: list[str] = []
    first, second, reload_done = trio.Event(), trio.Event(), trio.Event()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_chain, gate, log, "a", first)
            nursery.start_soon(_chain, gate, log, "b", second)
            await trio.testing.wait_all_tasks_blocked()
            assert sorted(log) == ["a in", "b in"]
            nursery.start_soon(_reload, gate, log, reload_done)
            await trio.testing.wait_all_tasks_blocked()
            assert not gate.is_open
            assert len(log) == 2  # the reload waits for both chains
            first.set()
            await trio.testing.wait_all_tasks_blocked()
            assert log[-1] == "a out"
            second.set()
            await trio.testing.wait_all_tasks_blocked()
            assert log[-2:] == ["b out", "reload in"]
            reload_done.set()
    assert gate.is_open


async def test_a_chain_arriving_during_reloads_runs_after_them() -> None:
    gate = ReloadGate()
    log: list[str] = []
    first = trio.Event()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_reload, gate, log, first)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(_chain, gate, log, "c")
            await trio.testing.wait_all_tasks_blocked()
            assert log == ["reload in"]
            # The first reload ends and a second starts before the chain gets to run.
            first.set()
            async with gate.reload():
                log.append("second in")
                await trio.testing.wait_all_tasks_blocked()
                log.append("second out")
    # (The first reload's exit and the second's entry may come in either order.)
    assert "reload out" in log
    assert log[-3:] == ["second out", "c in", "c out"]


async def test_cancelled_waiters_leave_the_gate_usable() -> None:
    gate = ReloadGate()
    log: list[str] = []
    held = trio.Event()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_chain, gate, log, "held", held)
            await trio.testing.wait_all_tasks_blocked()
            # A reload that gives up while waiting for the chain opens the gate again.
            with trio.move_on_after(0):
                async with gate.reload():
                    log.append("never")
            assert gate.is_open
            held.set()
        # A chain cancelled while waiting for a reload never held the gate.
        reload_done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_reload, gate, log, reload_done)
            await trio.testing.wait_all_tasks_blocked()
            with trio.move_on_after(0):
                async with gate.chain():
                    log.append("never")
            reload_done.set()
        await _chain(gate, log, "after")
    assert "never" not in log
    assert log[-2:] == ["after in", "after out"]
