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
from helpers.sandbox_harness import code_request

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
from sandbox._guardian_main import pool

POOL_MAX = pool.POOL_MAX

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")


def _request(tmp_path: Path, code: str, permissions: Permissions | None = None) -> LaunchRequest:
    request: LaunchRequest = code_request(tmp_path, code, name="pool", permissions=permissions)
    return request


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
    _wait_for_spares(1, set())
    _burst(tmp_path, POOL_MAX + 4)
    time.sleep(0.5)  # quiet: the pool is parked (more than this would be a bug)
    assert len(_wait_for_spares(POOL_MAX, set())) == POOL_MAX
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
    n = POOL_MAX + 2
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


def test_a_parked_spare_leaves_every_signal_to_the_kernels_default() -> None:
    # The guardian's handlers run only between two steps of Python: a SIGTERM that came
    # while a child's execve converted its arguments would be lost when the program
    # replaced it. A spare sets the defaults when forked, long before its order.
    spares = _wait_for_spares(1, set())
    for pid in spares:
        try:
            status = Path(f"/proc/{pid}/status").read_text().split("\n")
        except OSError:
            continue  # it took an order meanwhile
        fields = dict(line.split(":\t", 1) for line in status if ":\t" in line)
        assert fields["SigCgt"] == "0" * 16, pid
        assert fields["SigIgn"] == "0" * 16, pid


_CAPS = (
    "import os; t, s = os.statvfs('/tmp'), os.statvfs('/dev/shm'); "
    "print(t.f_files, t.f_blocks * t.f_frsize, s.f_files, s.f_blocks * s.f_frsize)"
)


def _guardian() -> int:
    guardian = start_guardian()
    assert guardian is not None
    return guardian


def _capped_backend() -> BwrapSandbox:
    backend = select_sandbox("required", cgroups=False)
    if not isinstance(backend, BwrapSandbox) or not backend.config.private_tmpfs:
        pytest.skip("no capped tmpfs made by corral's child here")
    return backend


def _run_capped(backend: BwrapSandbox, tmp_path: Path, tmp_mb: int) -> tuple[int, list[int]]:
    """A sandboxed spawn with /tmp and /dev/shm capped at ``tmp_mb``: its pid, and the
    inodes and bytes of both as it saw them."""
    plan = backend.plan(_request(tmp_path, _CAPS, Permissions(limits=Limits(tmp_mb=tmp_mb))))
    try:
        child = spawn(plan, stdin=subprocess.DEVNULL)
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
    finally:
        backend.cleanup(plan)
    return child.pid, [int(n) for n in out.split()]


def _prepared_for(guardian: int, spares: set[int], tmp_mb: int | None) -> set[int]:
    """Which of ``spares`` (the guardian's) made, before any order, a user namespace of
    their own with /tmp and /dev/shm capped at ``tmp_mb`` mounted (None: made nothing)."""
    own = os.readlink(f"/proc/{guardian}/ns/user")
    cap = f"size={(tmp_mb or 0) * 1024}k,nr_inodes={(tmp_mb or 0) * 1024}"
    found = set()
    for pid in spares:
        try:
            if os.readlink(f"/proc/{pid}/ns/user") == own:
                if tmp_mb is None:
                    found.add(pid)
            elif tmp_mb and Path(f"/proc/{pid}/mountinfo").read_text().count(cap) == 2:
                found.add(pid)
        except OSError:
            continue  # gone
    return found


def _spares_for(guardian: int, tmp_mb: int | None, old: frozenset[int] = frozenset()) -> set[int]:
    """The pool's spares prepared for ``tmp_mb`` (see :func:`_prepared_for`), once there
    is one not in ``old``; bounded."""
    deadline = time.monotonic() + 30
    while not (found := _prepared_for(guardian, _spares(set(old)), tmp_mb)):
        assert time.monotonic() < deadline, f"no spare parked for {tmp_mb} MiB"
        time.sleep(0.01)
    return found


def test_the_pool_makes_the_namespaces_of_a_sandboxed_spawn_before_its_order(
    tmp_path: Path,
) -> None:
    # A sandboxed spawn's user and mount namespace with its capped /tmp and /dev/shm
    # costs it about 0.4 ms: the pool's spares make them, for the caps of such a
    # spawn, before their order comes. Only a spawn with exactly those caps is
    # handed such a spare; the caps are always the spawn's own.
    backend, guardian = _capped_backend(), _guardian()
    _run_capped(backend, tmp_path, 3)  # from now on the pool has spares made for 3 MiB
    spares = _spares_for(guardian, 3)
    pid, caps = _run_capped(backend, tmp_path, 3)
    assert pid in spares
    assert caps == [3072, 3 << 20] * 2
    others = _spares_for(guardian, 3, frozenset(spares))
    pid, caps = _run_capped(backend, tmp_path, 5)  # other caps: not those, and its own caps
    assert pid not in others
    assert caps == [5120, 5 << 20] * 2


def test_spawns_of_alternating_shapes_each_take_a_spare_prepared_for_theirs(
    tmp_path: Path,
) -> None:
    # A host mixing sandboxed extensions (capped tmpfs) with unsandboxed prepared
    # children, or two caps: the pool keeps spares for each of the last shapes, so a
    # spawn of one no longer lets the other's spares go, and each order is handed a
    # spare prepared for its own shape (or for none), never another's.
    backend, guardian = _capped_backend(), _guardian()
    plain = _plan(tmp_path, "pass")

    def run_plain() -> int:
        child = spawn(msgspec.structs.replace(plain), stdin=subprocess.DEVNULL)
        child.communicate(timeout=60)
        assert child.returncode == 0
        return child.pid

    _run_capped(backend, tmp_path, 3)
    _run_capped(backend, tmp_path, 5)
    run_plain()
    for _ in range(3):
        for tmp_mb in (3, None, 5):
            parked = {mb: _spares_for(guardian, mb) for mb in (3, 5, None)}
            if tmp_mb is None:
                assert run_plain() in parked[None]
            else:
                pid, caps = _run_capped(backend, tmp_path, tmp_mb)
                assert pid in parked[tmp_mb], parked
                assert caps == [tmp_mb << 10, tmp_mb << 20] * 2


_HOST = """
import subprocess, sys, time
from pathlib import Path
from sandbox import LaunchRequest, Limits, Permissions, select_sandbox, spawn, start_guardian

ext = Path(sys.argv[1])
backend = select_sandbox("required", cgroups=False)
for tmp_mb in (3, None):
    request = LaunchRequest(
        name="pool", argv=[sys.executable, "-c", "pass"], env={"PATH": "/usr/bin:/bin"},
        ext_dir=str(ext), data_dir=None, interpreter=sys.executable,
        permissions=Permissions(limits=Limits(tmp_mb=tmp_mb or 1)),
    )
    sandbox = backend if tmp_mb else select_sandbox("off")
    plan = sandbox.plan(request)
    child = spawn(plan, stdin=subprocess.DEVNULL)
    child.communicate(timeout=60)
    sandbox.cleanup(plan)
print(start_guardian(), flush=True)
sys.stdin.read()
"""


def test_no_spare_of_any_shape_outlives_the_host(tmp_path: Path) -> None:
    # A host that made spares of two shapes parked (one in namespaces of its own)
    # exits: its guardian ends, and every spare with it.
    _capped_backend()
    ext = tmp_path / "ext"
    ext.mkdir()
    host = subprocess.Popen(
        [sys.executable, "-c", _HOST, str(ext)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert host.stdout is not None
        guardian = psutil.Process(int(host.stdout.readline()))
        deadline = time.monotonic() + 30
        while True:  # spares of both shapes parked: one capped at 3 MiB, one bare
            spares = {p.pid: p for p in guardian.children()}
            capped = _prepared_for(guardian.pid, set(spares), 3)
            if capped and _prepared_for(guardian.pid, set(spares), None):
                break
            assert time.monotonic() < deadline, "no spares of both shapes parked"
            time.sleep(0.01)
    finally:
        host.communicate(b"", timeout=60)
    _, alive = psutil.wait_procs([guardian, *spares.values()], timeout=10)
    assert not alive
