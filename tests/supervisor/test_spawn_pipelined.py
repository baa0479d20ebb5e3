"""Spawns are pipelined to the guardian: the event loop never blocks on its answer, and
many orders in flight each get their own child."""

from __future__ import annotations

import os
import signal
import sys

import pytest
import trio

from sandbox import LaunchPlan, start_guardian
from supervisor._process import spawn_child

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guardian")


def _plan(code: str) -> LaunchPlan:
    return LaunchPlan(
        argv=[sys.executable, "-c", code], env={}, cwd="/", backend="none", sandboxed=False
    )


async def _output(code: str) -> bytes:
    proc = await spawn_child(_plan(code))
    assert proc.stdout is not None
    out = b""
    while chunk := await proc.stdout.receive_some(4096):
        out += chunk
    assert await proc.wait() == 0
    await proc.aclose()
    return out


async def test_the_event_loop_runs_while_the_guardian_has_not_answered() -> None:
    pid = start_guardian()
    assert pid is not None
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.01)
            ticks += 1

    os.kill(pid, signal.SIGSTOP)  # the guardian cannot answer until it is continued
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            spawning = trio.Event()
            got: list[bytes] = []

            async def spawn() -> None:
                got.append(await _output("print('started')"))
                spawning.set()

            nursery.start_soon(spawn)
            await trio.sleep(0.3)
            # The spawn waits for the stopped guardian; everything else kept running.
            assert not spawning.is_set()
            assert ticks >= 5
            os.kill(pid, signal.SIGCONT)
            with trio.fail_after(10):
                await spawning.wait()
            nursery.cancel_scope.cancel()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert got == [b"started\n"]


async def test_many_orders_in_flight_each_get_their_own_child() -> None:
    start_guardian()
    got: dict[int, bytes] = {}

    async def one(i: int) -> None:
        got[i] = await _output(f"print({i})")

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for i in range(30):
                nursery.start_soon(one, i)
    assert got == {i: f"{i}\n".encode() for i in range(30)}


async def test_an_exit_is_seen_before_the_guardian_reports_it() -> None:
    """A stop need not wait for the guardian's hop: the child's pidfd (from the
    guardian) says it exited while the guardian, stopped, cannot reap it."""
    pid = start_guardian()
    assert pid is not None
    fds_before = set(os.listdir("/proc/self/fd"))
    proc = await spawn_child(_plan("import sys; sys.stdin.read()"))
    os.kill(pid, signal.SIGSTOP)
    try:
        assert proc.stdin is not None
        await proc.stdin.aclose()  # it exits
        with trio.fail_after(10):
            await proc.exited()
        assert proc.gone
        assert proc.returncode is None  # the guardian has not said it
    finally:
        os.kill(pid, signal.SIGCONT)
    with trio.fail_after(10):
        assert await proc.wait() == 0
        await proc.ended()
    await proc.aclose()
    assert set(os.listdir("/proc/self/fd")) <= fds_before  # the pidfd went with it
