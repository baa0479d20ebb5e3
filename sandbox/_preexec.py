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

__all__ = [
    "SETUP_FAILED_EXIT",
    "SPAWN_THREAD_EXIT",
    "allow_spawning_thread",
    "preexec_for",
    "rlimits_for",
]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36

#: Exit status of a child forked from a thread that may exit before the host.
SPAWN_THREAD_EXIT = 126

_MIB = 1024 * 1024

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNS = 0x00020000
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_REC = 0x4000
_MS_SLAVE = 1 << 19

#: Exit status of a child that could not mount its private tmpfs.
SETUP_FAILED_EXIT = 125

# The running program's own symbols include libc's; find_library("c") would spawn
# ldconfig. prctl, unshare and mount are Linux-only.
_libc = ctypes.CDLL(None, use_errno=True)
_prctl = getattr(_libc, "prctl", None)
if _prctl is not None:
    _prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    _prctl.restype = ctypes.c_int
_unshare = getattr(_libc, "unshare", None)
if _unshare is not None:
    _unshare.argtypes = [ctypes.c_int]
    _unshare.restype = ctypes.c_int
_mount = getattr(_libc, "mount", None)
if _mount is not None:
    _mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    _mount.restype = ctypes.c_int

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
    plan's cgroups, applies the plan's rlimits, and mounts the plan's capped
    tmpfs (see :func:`_tmpfs_setup`). Call it in the parent, once per spawn.

    Args:
        plan: what is about to be spawned.

    Returns:
        A function for ``subprocess.Popen(preexec_fn=...)``.
    """
    mount_tmpfs = _tmpfs_setup(plan)
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
        if mount_tmpfs is not None:
            mount_tmpfs()

    return _preexec


def _tmpfs_setup(plan: LaunchPlan) -> Callable[[], None] | None:
    """The child's part of ``plan.tmpfs``: tmpfs mounts with an inode cap.

    bwrap's ``--tmpfs`` takes a size but no inode count, and inodes do not count
    towards the size: an extension could fill kernel memory with empty files. So
    the child enters a user and mount namespace of its own (mapping only its own
    ids), mounts capped tmpfs over the plan's empty directories there, and bwrap,
    run inside that namespace, binds them. Nothing changes for the host.
    """
    if not plan.tmpfs:
        return None
    uid, gid = os.getuid(), os.getgid()
    maps = (
        (b"/proc/self/setgroups", b"deny"),
        (b"/proc/self/uid_map", f"{uid} {uid} 1".encode()),
        (b"/proc/self/gid_map", f"{gid} {gid} 1".encode()),
    )
    mounts = tuple(
        (path.encode(), f"size={size},nr_inodes={inodes},mode=1777".encode())
        for path, size, inodes in plan.tmpfs
    )
    unshare, mount, get_errno = _unshare, _mount, ctypes.get_errno
    open_, write, close, exit_ = os.open, os.write, os.close, os._exit
    wronly = os.O_WRONLY

    def fail(step: bytes) -> None:
        message = b"corral sandbox: cannot mount the private /tmp (%s: errno %d)\n"
        write(2, message % (step, get_errno()))
        exit_(SETUP_FAILED_EXIT)

    def mount_tmpfs() -> None:
        if unshare is None or mount is None:
            fail(b"no unshare")
            return
        if unshare(_CLONE_NEWUSER | _CLONE_NEWNS) != 0:
            fail(b"unshare")
        for path, data in maps:
            fd = open_(path, wronly)
            try:
                write(fd, data)
            finally:
                close(fd)
        # Keep our mounts to ourselves whatever the host's propagation is.
        if mount(None, b"/", None, _MS_REC | _MS_SLAVE, None) != 0:
            fail(b"make-rslave")
        for target, options in mounts:
            if mount(b"tmpfs", target, b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
                fail(b"mount")

    return mount_tmpfs
