"""A stop of many: every child is told at once, the cooperative ones leave by
themselves without waiting on a stubborn one, and the stubborn one gets the ladder."""

from __future__ import annotations

import os

import pytest
import trio
from helpers.procs import alive, lasting
from helpers.supkit import CYCLE, Kit, capture_logs

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfds")

#: Leaves at once on ``shutdown`` (after acknowledging it) or at the end of stdin.
COOPERATIVE = """\
import sys
emit({"type": "hello", "name": NAME})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "shutdown":
        emit({"type": "shutdown_ack"})
        sys.exit(0)
"""

#: Ignores ``shutdown``, the end of stdin and SIGTERM: only SIGKILL ends it.
STUBBORN = """\
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
emit({"type": "hello", "name": NAME})
emit({"type": "ready"})
for msg in frames():
    pass
time.sleep(60)
"""


async def _exits(pidfds: dict[int, int], when: dict[int, float]) -> None:
    """Record the trio time at which each pid exits (its pidfd, opened while it ran,
    becomes readable); closes the pidfds."""

    async def one(pid: int, fd: int) -> None:
        try:
            await trio.lowlevel.wait_readable(fd)
        finally:
            os.close(fd)
        when[pid] = trio.current_time()

    async with trio.open_nursery() as nursery:
        for pid, fd in pidfds.items():
            nursery.start_soon(one, pid, fd)


def _reaped(logs: list[dict[str, object]]) -> dict[object, object]:
    return {e["pid"]: e["returncode"] for e in logs if e["event"] == "incarnation_reaped"}


@pytest.mark.slow
async def test_many_cooperative_extensions_stop_with_every_status_recorded(kit: Kit) -> None:
    paths = [kit.inline(f"coop{i:02d}", COOPERATIVE) for i in range(30)]
    cfg = kit.config(shutdown_grace=4.0, term_grace=4.0)
    with capture_logs() as logs, trio.fail_after(CYCLE * 2):
        async with kit.open(*paths, config=cfg) as client:
            pids = [i.pid for i in await client.list_extensions() if i.pid is not None]
            t0 = trio.current_time()
        took = trio.current_time() - t0
    assert len(pids) == 30
    assert took < 4.0 / 2  # nobody waited out a grace period
    assert _reaped(logs) == dict.fromkeys(pids, 0)  # each left by itself, status 0
    assert not any(e["event"] in ("extension_sigterm", "extension_sigkill") for e in logs)
    assert [p for p in pids if alive(p)] == []
    assert lasting() == []


@pytest.mark.slow
async def test_a_stubborn_extension_gets_the_ladder_without_delaying_the_others(
    kit: Kit,
) -> None:
    paths = [kit.inline(f"coop{i:02d}", COOPERATIVE) for i in range(20)]
    paths.append(kit.inline("stubborn", STUBBORN))
    cfg = kit.config(shutdown_grace=2.0, term_grace=0.5)
    when: dict[int, float] = {}
    with capture_logs() as logs, trio.fail_after(CYCLE * 2):
        async with trio.open_nursery() as watch:
            async with kit.open(*paths, config=cfg) as client:
                infos = await client.list_extensions()
                pids = {i.name: i.pid for i in infos if i.pid is not None}
                pidfds = {pid: os.pidfd_open(pid) for pid in pids.values()}
                watch.start_soon(_exits, pidfds, when)
                t0 = trio.current_time()
            took = trio.current_time() - t0
    stubborn = pids.pop("stubborn")
    assert len(pids) == 20
    # The stubborn one waited out the whole ladder: the window, SIGTERM, SIGKILL.
    assert 2.0 + 0.5 <= took < 2.0 + 0.5 + 3.0
    assert when[stubborn] - t0 >= 2.0 + 0.5
    ladder = [
        (e["event"], e["extension"])
        for e in logs
        if e["event"] in ("extension_sigterm", "extension_sigkill")
    ]
    assert ladder == [("extension_sigterm", "stubborn"), ("extension_sigkill", "stubborn")]
    # The others left by themselves, inside the window, not after the stubborn one.
    assert all(when[pid] - t0 < 2.0 for pid in pids.values())
    reaped = _reaped(logs)
    assert {reaped[pid] for pid in pids.values()} == {0}
    assert reaped[stubborn] == -9
    assert [p for p in [*pids.values(), stubborn] if alive(p)] == []
    assert lasting() == []


@pytest.fixture
def sweeps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the host's sweeps of the guardian's orphans (each one goes through)."""
    import supervisor._reap as reap

    found: list[int] = []
    real = reap.sweep_orphans

    def counted() -> list[tuple[int, int]]:
        got = real()
        found.append(len(got))
        return got

    monkeypatch.setattr(reap, "sweep_orphans", counted)
    return found


async def test_a_stop_that_leaves_nothing_asks_the_guardian_for_no_sweep(
    kit: Kit, sweeps: list[int]
) -> None:
    # The guardian says, with each exit, whether the child left a process behind:
    # three that leave nothing cost no round trip to it and no pass over /proc.
    paths = [kit.inline(f"coop{i}", COOPERATIVE) for i in range(3)]
    with trio.fail_after(CYCLE):
        async with kit.open(*paths) as client:
            pids = [i.pid for i in await client.list_extensions() if i.pid is not None]
    assert len(pids) == 3
    assert [p for p in pids if alive(p)] == []
    assert sweeps == []
    assert lasting() == []


#: Leaves a double-forked daemon in a session of its own when it goes.
LEAVER = """\
import subprocess, sys
emit({"type": "hello", "name": NAME})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "shutdown":
        p = subprocess.Popen(["/bin/sleep", "1000"], start_new_session=True, env={},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sys.stderr.write(f"chaos: spawned pid {p.pid}\\n")
        sys.stderr.flush()
        sys.exit(0)
"""


async def test_a_stop_that_leaves_a_process_sweeps_it(kit: Kit, sweeps: list[int]) -> None:
    paths = [kit.inline("coop", COOPERATIVE), kit.inline("leaver", LEAVER)]
    with trio.fail_after(CYCLE):
        async with kit.open(*paths):
            pass
    (left,) = kit.spawned_pids("leaver")
    survivor = alive(left)
    if survivor:
        os.kill(left, 9)
    assert not survivor
    assert sweeps == [1]  # one sweep for both, which found the leftover
    assert lasting() == []
