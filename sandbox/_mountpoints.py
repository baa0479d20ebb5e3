"""Where the child builds a sandbox's ``/dev`` (with its capped ``/dev/shm``) and mounts
its capped ``/tmp``: one pair of empty directories per host process, not per spawn.

The child mounts them in a mount namespace of its own (see
:mod:`sandbox._guardian_child`), so the host's directories stay empty and any number
of sandboxes can mount over the same two at once, each seeing only its own. Making
and removing a fresh pair at every spawn cost three ``mkdir`` and an ``rmtree``
on the host's event loop (about 0.5 ms a spawn here, issue 29).

The pair lives in a directory made by :func:`tempfile.mkdtemp` (mode 0700, owned
by the host's user), beside the mirrors of ``/etc`` the sandboxes bind
(:mod:`sandbox._etc`), in memory where it can be (:func:`where`): a mirror holds
hundreds of links (``/etc/alternatives``), which took the first sandboxed spawn of
every host ~250 ms to make on the ext4 ``/tmp`` of the machine this was measured
on, and 2 ms on a tmpfs. Before each use it is checked again without following
symlinks: a directory removed (a ``/tmp`` cleaner) or no longer the one made
(another owner, mode or inode, a symlink) is never used: a new pair is made. The
pair is removed when the host exits (not when a backend is collected: a plan
may still name it).

A host killed before it could remove its pair leaves it behind, /etc mirrors
included. So the pair's name says whose it is (the host's PID namespace, pid and
start time), and a host making its first pair removes, in a thread of its own,
every pair of ours whose host is gone (:func:`sweep_stale`). A pair of another
user, another PID namespace or a host that lives is never touched, nor is one
named before names said whose it is.

Between that check and bwrap's bind of the path, the pair must not be swappable:
a sandbox that may write the temporary directory itself (the agent's ``bash`` run
in ``/tmp``, an extension granted ``/tmp``) could otherwise rename the pair away
and leave a symlink to a directory of its choice, which the next sandbox would get
as its ``/tmp``. So :class:`~sandbox.ProtectedPaths` lists the pair's directory
whenever the workspace holds the temporary directory, and such a sandbox sees it
read-only and cannot rename it (see :func:`protected_base`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import threading
import weakref
from typing import final

from ._etc import own_directory, stat_identity
from ._proc import start_time

__all__ = ["MOUNT_POINTS", "MountPoints", "protected_base", "sweep_stale", "where"]

PREFIX = "corral-tmpfs-"


def _identity(path: str) -> tuple[int, ...] | None:
    """``path``'s identity if it is a directory of ours that no one else may enter."""
    st = own_directory(path)
    if st is None or st.st_mode & 0o077:
        return None
    return stat_identity(st)[:3]  # device, inode, mode: its times change with its entries


def where() -> str:
    """The directory the pair is made in: the temporary directory when ``TMPDIR``
    names it; else the user's runtime directory (``XDG_RUNTIME_DIR``: a directory of
    ours no one else may enter, in memory on systemd's machines); else ``/dev/shm``
    (in memory, open to all with the sticky bit, as ``/tmp``); else the temporary
    directory. A sandbox that may write it sees the pair read-only
    (:func:`protected_base`); ``/dev`` and ``/run`` are never granted at all."""
    if os.environ.get("TMPDIR"):
        return tempfile.gettempdir()
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime) and _identity(runtime) is not None:
        return runtime
    try:
        shm = os.lstat("/dev/shm")
    except OSError:
        return tempfile.gettempdir()
    if stat.S_ISDIR(shm.st_mode) and stat.S_IMODE(shm.st_mode) == 0o1777:
        return "/dev/shm"
    return tempfile.gettempdir()


def _remove(paths: list[str], owner: int) -> None:
    """Remove the (empty) directories ``paths``, deepest first, if made by ``owner``,
    and the /etc mirrors in the first (:mod:`sandbox._etc`)."""
    if os.getpid() != owner:
        return  # a forked child of the host: the pair is its parent's
    with contextlib.suppress(OSError), os.scandir(paths[0]) as entries:
        for entry in entries:
            if entry.name.startswith("etc-") and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
    for path in reversed(paths):
        with contextlib.suppress(OSError):
            os.rmdir(path)


def _whose() -> str:
    """This process's part of a pair's name: ``<PID namespace>-<pid>-<start time>-``."""
    try:
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        ns = 0
    return f"{ns}-{os.getpid()}-{start_time('self') or 0}-"


def sweep_stale(directory: str) -> list[str]:
    """Remove the pairs in ``directory`` that hosts now gone left behind; their paths.

    Only directories of ours (not links), mode 0700, named by a host of this PID
    namespace (see :func:`_whose`) that no longer runs: its pid is free, or taken
    by a process started at another time. Removal goes by descriptor and never
    follows a link (:func:`shutil.rmtree` here), so an entry swapped meanwhile is
    not followed out of the pair. Blocking: call it off the event loop.
    """
    mine = _whose().split("-")[0]
    gone: list[str] = []
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries if e.name.startswith(PREFIX)]
    except OSError:
        return gone
    for name in names:
        parts = name[len(PREFIX) :].split("-")
        if len(parts) != 4 or parts[0] != mine or not (parts[1] + parts[2]).isdigit():
            continue  # another namespace's, or named before names said whose
        if mine == "0" or parts[2] == "0":
            continue  # named without /proc: whether its host runs cannot be told
        if int(parts[1]) == os.getpid() or start_time(parts[1]) == int(parts[2]):
            continue  # its host runs
        path = os.path.join(directory, name)
        st = own_directory(path)
        if st is None or st.st_mode & 0o077:
            continue
        try:
            shutil.rmtree(path)
        except OSError:
            continue
        gone.append(path)
    return gone


@final
class MountPoints:
    """The two empty directories the child builds ``/dev`` and mounts ``/tmp`` over.
    Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: The base, dev and tmp directories with their identities when made.
        self._made: list[tuple[str, tuple[int, ...] | None]] = []
        self._remover: weakref.finalize[[list[str], int], MountPoints] | None = None
        #: Whether this process looked for pairs that dead hosts left (once).
        self._swept = False

    def _intact(self) -> bool:
        return bool(self._made) and all(
            ident is not None and _identity(p) == ident for p, ident in self._made
        )

    def base(self) -> str:
        """The directory holding the pair, made (again) when needed.

        Raises:
            OSError: it cannot be made.
        """
        return os.path.dirname(self.get()[0])

    def get(self) -> tuple[str, str]:
        """The ``/dev`` and ``/tmp`` mount points, made (again) when needed.

        Raises:
            OSError: they cannot be made.
        """
        with self._lock:
            if not self._intact():
                try:
                    base = tempfile.mkdtemp(prefix=PREFIX + _whose(), dir=where())
                except OSError:  # (a full /dev/shm, one mounted read-only)
                    base = tempfile.mkdtemp(prefix=PREFIX + _whose())
                if not self._swept:  # off the spawn's path: a /tmp may hold thousands
                    self._swept = True
                    directory = os.path.dirname(base)
                    threading.Thread(target=sweep_stale, args=(directory,), daemon=True).start()
                paths = [base, os.path.join(base, "dev"), os.path.join(base, "tmp")]
                for path in paths[1:]:
                    os.mkdir(path, 0o700)
                if self._remover is not None:
                    self._remover.detach()  # what is there now may not be ours
                self._made = [(p, _identity(p)) for p in paths]
                self._remover = weakref.finalize(self, _remove, paths, os.getpid())
            return self._made[1][0], self._made[2][0]


#: This process's pair, shared by every bwrap backend.
MOUNT_POINTS = MountPoints()


def protected_base(workspace: str) -> str | None:
    """The pair's directory when the writable ``workspace`` holds the directory it is
    made in (made now, so that it is protected from the first command on), else None."""
    if not any(_holds(workspace, d) for d in (where(), tempfile.gettempdir())):
        return None
    try:
        base = MOUNT_POINTS.base()
    except OSError:
        return None  # none can be made: no sandbox will mount over one either
    return base if _holds(workspace, os.path.dirname(base)) else None


def _holds(workspace: str, directory: str) -> bool:
    return os.path.commonpath([os.path.realpath(directory), workspace]) == workspace
