"""The guardian's word on what a child left behind, and its pool of parked spares."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import psutil
import pytest

from sandbox import (
    LaunchPlan,
    LaunchRequest,
    Limits,
    Permissions,
    Spawned,
    guardian_pids,
    select_sandbox,
    spawn,
    start_guardian,
    submit_spawn,
    sweep_orphans,
)
from sandbox._bwrap import BwrapSandbox

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")


def _request(tmp_path: Path, code: str, permissions: Permissions | None = None) -> LaunchRequest:
    ext = tmp_path / "ext"
    ext.mkdir(exist_ok=True)
    return LaunchRequest(
        name="pool",
        argv=[sys.executable, "-c", code],
        env={"PATH": "/usr/bin:/bin"},
        ext_dir=str(ext),
        data_dir=None,
        interpreter=sys.executable,
        permissions=permissions or Permissions(),
    )


def _plan(tmp_path: Path, code: str) -> LaunchPlan:
    return select_sandbox("off").plan(_request(tmp_path, code))


def _no_orphans() -> None:
    """Kill and wait for whatever earlier tests left to the guardian (none, normally)."""
    for _, fd in sweep_orphans():
        select.select([fd], [], [], 10)
        os.close(fd)


def _ended(child: Spawned) -> None:
    """Read the status pipe to its end: the exit status, then the word on leftovers."""
    status = child.status
    while not status.closed:
        select.select([status.fileno()], [], [], 10)
        status.read()


def test_a_child_that_leaves_nothing_is_reported_clean(tmp_path: Path) -> None:
    _no_orphans()
    child = spawn(_plan(tmp_path, "pass"), stdin=subprocess.DEVNULL)
    child.communicate(timeout=60)
    assert child.returncode == 0
    _ended(child)
    assert child.status.left_nothing


def test_the_exit_status_and_the_word_on_leftovers_come_in_one_write(tmp_path: Path) -> None:
    # The host wakes once for both: whatever read first brings the exit status brings
    # the clean record with it.
    _no_orphans()
    for _ in range(20):
        child = spawn(_plan(tmp_path, "pass"), stdin=subprocess.DEVNULL)
        child.communicate(timeout=60)
        status = child.status
        while status.returncode is None:
            select.select([status.fileno()], [], [], 10)
            status.read()
        assert status.left_nothing
        assert status.said_all


def test_a_child_that_leaves_a_process_is_not(tmp_path: Path) -> None:
    # It exits with a child of its own still running (in a session of its own): the
    # guardian adopted that orphan, so the exit says the host must sweep.
    code = (
        "import subprocess, sys; "
        "p = subprocess.Popen(['sleep', '60'], start_new_session=True, "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)"
    )
    _no_orphans()
    child = spawn(_plan(tmp_path, code), stdin=subprocess.DEVNULL)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    left = int(out)
    try:
        _ended(child)
        assert not child.status.left_nothing
        swept = sweep_orphans()
        for _, fd in swept:
            select.select([fd], [], [], 10)
            os.close(fd)
        assert left in {pid for pid, _ in swept}  # killed, and its pidfd said it exited
    finally:
        if psutil.pid_exists(left):
            os.kill(left, 9)


def _cgroup(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return "gone"


def _spares(exclude: set[int]) -> set[int]:
    """The guardian's spares in no cgroup of their own (those the pool keeps): a spare
    parked in cgroups (an earlier test's) is in other cgroups than the guardian."""
    guardian = start_guardian()
    assert guardian is not None
    own = _cgroup(guardian)
    return {p for p in guardian_pids() - {guardian} - exclude if _cgroup(p) == own}


def _wait_for_spares(count: int, exclude: set[int]) -> set[int]:
    """The guardian's spares (parked in no cgroup), once there are ``count``; bounded."""
    deadline = time.monotonic() + 30
    while len(spares := _spares(exclude)) != count:
        assert time.monotonic() < deadline, f"{len(spares)} spares parked, not {count}"
        time.sleep(0.01)
    return spares


def _burst(tmp_path: Path, n: int) -> list[int]:
    """``n`` prepared spawns at once (every order sent before the first reply is
    read, as a host starting many does), each waited for."""
    plan = _plan(tmp_path, "pass")
    orders = [
        submit_spawn(msgspec.structs.replace(plan), stdin=subprocess.DEVNULL) for _ in range(n)
    ]
    children = [order.finish() for order in orders]
    for child in children:
        child.communicate(timeout=60)
        assert child.returncode == 0
    return [c.pid for c in children]


def test_a_burst_of_spawns_leaves_as_many_spares_then_idle_leaves_one(tmp_path: Path) -> None:
    # Four prepared spawns at once: once the host is quiet the guardian parks four
    # spares (the next burst takes them instead of forking), and after a while
    # without spawns it lets all but one go.
    _wait_for_spares(1, set())  # the guardian parks one as soon as it is quiet
    before = _spares(set())
    _burst(tmp_path, 4)
    parked = _wait_for_spares(4, set())
    assert not parked & before or len(parked - before) >= 3  # new ones, not only the old
    again = _burst(tmp_path, 4)
    assert set(again) == parked  # each spawn of the burst took a spare: no fork
    _wait_for_spares(4, set())
    kept = _wait_for_spares(1, set())  # idle: back to one (the others exited)
    assert len(kept) == 1


def test_the_pool_is_bounded(tmp_path: Path) -> None:
    from sandbox import _guardian_main

    _wait_for_spares(1, set())
    _burst(tmp_path, _guardian_main.POOL_MAX + 4)
    time.sleep(0.5)  # quiet: the pool is parked (more than this would be a bug)
    assert len(_wait_for_spares(_guardian_main.POOL_MAX, set())) == _guardian_main.POOL_MAX
    _wait_for_spares(1, set())  # and back to one, as the next test expects


_PRCTL = (
    "import ctypes; libc = ctypes.CDLL(None); out = ctypes.c_int(); "
    "libc.prctl(2, ctypes.byref(out), 0, 0, 0); death = out.value; "  # PR_GET_PDEATHSIG
    "libc.prctl(37, ctypes.byref(out), 0, 0, 0); "  # PR_GET_CHILD_SUBREAPER
    "print(death, out.value, end=' ')"
)


def test_every_child_starts_with_default_signals_and_dies_with_the_guardian(
    tmp_path: Path,
) -> None:
    # The guardian catches the signals it handles and ignores none, so exec gives each
    # child the default dispositions without a call of its own; a spare is prepared
    # (death with the guardian, subreaper) before its order. Whether forked for its
    # order or taken from the pool, a child starts the same: nothing ignored or
    # blocked, SIGKILL when the guardian dies, a subreaper.
    spares = _wait_for_spares(1, set())
    # What it has, read by the shell (which blocks and ignores nothing; exec resets
    # whatever is caught), before Python ignores SIGPIPE and SIGXFSZ.
    script = (
        "while read -r name value; do case $name in SigBlk:|SigIgn:) "
        f'echo $name $value;; esac; done </proc/self/status; exec {sys.executable} -c "$0"'
    )
    plan = msgspec.structs.replace(_plan(tmp_path, ""), argv=["/bin/sh", "-c", script, _PRCTL])
    n = __import__("sandbox._guardian_main", fromlist=["POOL_MAX"]).POOL_MAX + 2
    orders = [
        submit_spawn(msgspec.structs.replace(plan), stdin=subprocess.DEVNULL) for _ in range(n)
    ]
    children = [order.finish() for order in orders]
    outputs = []
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        outputs.append(out.decode().split())
    assert spares & {c.pid for c in children}  # some took a spare ...
    assert {c.pid for c in children} - spares  # ... and some were forked for their order
    for out in outputs:
        assert out == ["SigBlk:", "0" * 16, "SigIgn:", "0" * 16, "9", "1"]


def test_the_pool_makes_the_namespaces_of_the_last_sandboxed_spawn_before_its_order(
    tmp_path: Path,
) -> None:
    # A sandboxed spawn's user and mount namespace with its capped /tmp and /dev/shm
    # costs it about 0.4 ms: the pool's spares make them, for the caps of the last
    # such spawn, before their order comes. Only a spawn with exactly those caps is
    # handed such a spare; the caps are always the spawn's own.
    backend = select_sandbox("required", cgroups=False)
    if not isinstance(backend, BwrapSandbox) or not backend.config.private_tmpfs:
        pytest.skip("no capped tmpfs made by corral's child here")
    code = (
        "import os; t, s = os.statvfs('/tmp'), os.statvfs('/dev/shm'); "
        "print(t.f_files, t.f_blocks * t.f_frsize, s.f_files, s.f_blocks * s.f_frsize)"
    )

    def run(tmp_mb: int) -> tuple[int, list[int]]:
        plan = backend.plan(_request(tmp_path, code, Permissions(limits=Limits(tmp_mb=tmp_mb))))
        try:
            child = spawn(plan, stdin=subprocess.DEVNULL)
            out, err = child.communicate(timeout=60)
            assert child.returncode == 0, err
        finally:
            backend.cleanup(plan)
        return child.pid, [int(n) for n in out.split()]

    def new_spare(old: set[int]) -> int:
        deadline = time.monotonic() + 30
        while not (new := _spares(old)):
            assert time.monotonic() < deadline, "no spare parked"
            time.sleep(0.01)
        return min(new)

    guardian = start_guardian()
    own = os.readlink(f"/proc/{guardian}/ns/user")
    run(3)  # from now on the pool's spares are made for 3 MiB
    spare = new_spare(set())
    # Made before any order: a user namespace of its own, the capped tmpfs mounted.
    assert os.readlink(f"/proc/{spare}/ns/user") != own
    mounts = Path(f"/proc/{spare}/mountinfo").read_text()
    assert mounts.count("size=3072k,nr_inodes=3072") == 2, mounts
    pid, caps = run(3)
    assert pid == spare
    assert caps == [3072, 3 << 20] * 2
    other = new_spare({spare})
    pid, caps = run(5)  # other caps: not that spare, and its own caps
    assert pid != other
    assert caps == [5120, 5 << 20] * 2
