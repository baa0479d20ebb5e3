"""What the child does between ``fork`` and ``exec``: limits, cgroup, parent-death signal.

:func:`preexec_for` returns the ``preexec_fn`` for ``subprocess.Popen``. It runs
in the forked child of a multi-threaded host, where only async-signal-safe work
is really safe: everything it needs (paths as bytes, bound functions, the libc
``prctl``) is prepared in the parent, and the child only makes system calls.

**Spawn from a long-lived thread.** ``PR_SET_PDEATHSIG`` (and bwrap's
``--die-with-parent``, which uses it too) fires when the *thread* that forked the
child exits, not when the host process does. A child forked from a short-lived
worker thread, such as the cached threads behind ``trio.to_thread`` and
``trio.lowlevel.open_process`` that exit after 10 s idle, is SIGKILLed when that
thread goes away. So the child checks which thread forked it: the main thread
and :func:`sandbox.spawn`'s dedicated spawner thread are fine; any other thread
makes it exit at once with status 126 and an explanation on its stderr, rather
than die mysteriously some seconds later.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import threading
from collections.abc import Callable

from ._permissions import Limits
from ._plan import LaunchPlan

__all__ = ["SPAWN_THREAD_EXIT", "allow_spawning_thread", "preexec_for", "rlimits_for"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36

#: Exit status of a child forked from a thread that may exit before the host.
SPAWN_THREAD_EXIT = 126

_MIB = 1024 * 1024

# The running program's own symbols include libc's; find_library("c") would spawn
# ldconfig. prctl is Linux-only: macOS has no parent-death signal.
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
if _prctl is not None:
    _prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    _prctl.restype = ctypes.c_int

#: Thread identifiers (``threading.get_ident()``) allowed to fork sandboxed children.
_spawning_threads: set[int] = set()

_BAD_THREAD_MESSAGE = (
    b"corral sandbox: this process was forked from a short-lived thread; "
    b"PR_SET_PDEATHSIG would kill it when that thread exits. Spawn from the main "
    b"thread or with sandbox.spawn().\n"
)


def allow_spawning_thread(ident: int) -> None:
    """Declare a thread that lives as long as the host (e.g. a dedicated spawner)."""
    _spawning_threads.add(ident)


def rlimits_for(limits: Limits, *, memory: bool, processes: bool) -> list[tuple[int, int, int]]:
    """The ``setrlimit`` triples for an extension's limits.

    Args:
        limits: the declared limits.
        memory: also limit memory per process with ``RLIMIT_DATA`` (when no memory
            cgroup does it for the whole extension). ``RLIMIT_AS`` is never used: V8
            reserves far more address space than it touches and would not start.
        processes: also set ``RLIMIT_NPROC``. Only safe where the count is per
            sandbox (inside a user namespace); otherwise it counts all of the user's
            processes.
    """
    out = [
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_FSIZE, limits.file_mb * _MIB, limits.file_mb * _MIB),
        # Core dumps write the process's memory to disk: a way around both the
        # disk limit and (for a crash in the host's libraries) confidentiality.
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if memory:
        out.append((resource.RLIMIT_DATA, limits.memory_mb * _MIB, limits.memory_mb * _MIB))
    if processes:
        out.append((resource.RLIMIT_NPROC, limits.processes, limits.processes))
    return out


def preexec_for(plan: LaunchPlan) -> Callable[[], None]:
    """The ``preexec_fn`` that prepares the child for ``plan``.

    In the child, before ``exec``, it: checks it was forked from a thread that
    outlives it (see the module docstring), sets ``PR_SET_PDEATHSIG=SIGKILL`` so
    it dies with the host, makes itself a child subreaper, moves itself into the
    plan's cgroups, and applies the plan's rlimits. Call it in the parent, once
    per spawn.

    Args:
        plan: what is about to be spawned.

    Returns:
        A function for ``subprocess.Popen(preexec_fn=...)``.
    """
    rlimits = tuple(plan.rlimits)
    procs_files = tuple(
        os.path.join(d, "cgroup.procs").encode()
        for d in ([plan.cgroup] if plan.cgroup else []) + list(plan.extra_cgroups)
    )
    host_pid = os.getpid()
    allowed = frozenset({threading.main_thread().ident, *_spawning_threads})
    get_ident = threading.get_ident
    getppid = os.getppid
    open_ = os.open
    write = os.write
    close = os.close
    exit_ = os._exit
    kill = os.kill
    getpid = os.getpid
    setrlimit = resource.setrlimit
    prctl = _prctl
    wronly = os.O_WRONLY
    sigkill = signal.SIGKILL

    def _preexec() -> None:
        if get_ident() not in allowed:
            write(2, _BAD_THREAD_MESSAGE)
            exit_(SPAWN_THREAD_EXIT)
        if prctl is not None:
            if prctl(_PR_SET_PDEATHSIG, sigkill, 0, 0, 0) != 0:
                exit_(SPAWN_THREAD_EXIT)
            # The host may have died between fork and prctl: nobody would signal us.
            if getppid() != host_pid:
                kill(getpid(), sigkill)
            # Orphans of the extension's children stay its descendants (instead of
            # going to init), so the supervisor can find a daemon that cleared its
            # environment. Matters without a sandbox; under bwrap, the PID
            # namespace's init already adopts them.
            prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        for path in procs_files:
            # "0" means "the writing process" in both cgroup versions.
            fd = open_(path, wronly)
            try:
                write(fd, b"0")
            finally:
                close(fd)
        for which, soft, hard in rlimits:
            setrlimit(which, (soft, hard))

    return _preexec
