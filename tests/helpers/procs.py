"""Looking at processes: descendants, liveness, argv, environment, open fds."""

from __future__ import annotations

import contextlib
import itertools
import os
import typing

import psutil

from sandbox import guardian_pids, start_guardian


def descendants() -> list[psutil.Process]:
    """Descendants of this test process, zombies included, but not its guardian, which
    lives as long as the test process, nor the guardian's spares (see
    ``CgroupManager.park_spare``); everything else of the guardian's is listed."""
    start_guardian()
    # Listed before the guardian is asked: a spare it parks in between (its idle
    # timer runs on its own) is then either not listed yet or already reported.
    listed = psutil.Process().children(recursive=True)
    own = guardian_pids()
    return [p for p in listed if p.pid not in own]


def spawned_by(host: psutil.Process) -> list[psutil.Process]:
    """The descendants of a corral process (a CLI, an RPC server, this one) but its
    guardian and the guardian's spares (forks of it, waiting: same command line)."""
    out = []
    for proc in host.children(recursive=True):
        try:
            if not any(a.endswith("_guardian_main.py") for a in proc.cmdline()):
                out.append(proc)
        except psutil.NoSuchProcess:
            pass
    return out


def lasting(known: set[int] | frozenset[int] = frozenset(), limit: float = 10.0) -> list[int]:
    """Pids of descendants still there once those already dying are gone.

    Every child is the guardian's, and the guardian reaps what it adopted (the
    orphans of an extension it just killed, bwrap's inner process after the outer
    one exited) a moment after they died: waiting for them (bounded) tells a
    process that outlived its stop from one the kernel is still taking down.
    Processes in ``known`` (running before) are not waited for, nor returned.
    """
    _, alive = psutil.wait_procs([p for p in descendants() if p.pid not in known], timeout=limit)
    return [p.pid for p in alive]


def children() -> list[psutil.Process]:
    """Live (not zombie) descendants of this test process (see :func:`descendants`)."""
    found = []
    for proc in descendants():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.NoSuchProcess:
            pass
    return found


def alive(pid: int) -> bool:
    """True if ``pid`` names a live (not zombie) process."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def cmdline(pid: int) -> list[str]:
    """argv of a live process, from ``/proc``."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0") if a]


def environ(pid: int) -> dict[str, str]:
    """Environment of a live process, from ``/proc``."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    return dict(item.split("=", 1) for item in items if "=" in item)


def num_fds() -> int:
    """Open file descriptors of this (test) process."""
    return typing.cast(int, psutil.Process(os.getpid()).num_fds())


def open_fds() -> dict[str, str]:
    """This process's open descriptors and what each names (``/proc/self/fd``)."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the directory's own descriptor, closed by now
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return out


def sleep_marker() -> str:
    """A ``sleep`` argument no other run on this machine uses (a number of seconds).

    A leftover is found by its command line, machine-wide: a fixed marker would
    find another worktree's run of the same test, still inside its own timeout.
    """
    return f"{os.getpid()}{next(_MARKERS):04d}"


def with_marker(marker: str) -> list[psutil.Process]:
    """Live processes whose command line holds ``marker`` (see :func:`sleep_marker`)."""
    return [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]


_MARKERS = itertools.count(1)
