"""One cgroup per extension, when this process may create them.

A cgroup gives limits that per-process rlimits cannot: memory for the whole
extension (including tmpfs pages and shared memory), a process count that does
not depend on the user's other processes, and a way to find and kill every
process the extension started. It is optional hardening: without it the
backends fall back to rlimits and say so in the plan's notes.

Where the per-extension cgroups go:

* **cgroup v2** (one unified hierarchy). Corral uses the nearest ancestor of its
  own cgroup (itself included) that is delegated to it: writable, with ``memory``
  and ``pids`` enabled for its children. On a systemd desktop that is usually a
  slice under ``user@UID.service``; as root, a system slice. The per-extension
  cgroups ``corral-<pid>-<name>-<n>`` are created there. Failing that, when
  corral's own cgroup is writable and corral is alone in it (as under
  ``systemd-run --user --scope -p Delegate=yes``), corral moves itself into a
  ``corral-host`` leaf (the kernel's "no internal processes" rule forbids
  enabling controllers otherwise) and creates the extensions' cgroups beside it.
* **cgroup v1** (one hierarchy per controller, e.g. Debian's hybrid mode). There
  is no such rule: corral creates children of its own ``memory`` and ``pids``
  cgroups when it may write there (typically as root).

The directory names carry the host's pid, so cgroups left behind by a host that
was killed are found and removed by the next host (:meth:`CgroupManager.sweep`).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import signal
import threading
import time
from typing import final

import msgspec

from ._guardian import guardian
from ._permissions import Limits

__all__ = ["CgroupManager", "CgroupSupport", "detect_cgroups"]

_STALE = re.compile(r"^corral-(\d+)-")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@final
class CgroupSupport(msgspec.Struct, frozen=True, kw_only=True):
    """Where per-extension cgroups can be created on this machine."""

    #: 2 or 1 when usable, 0 when not.
    version: int
    #: Parent directory for memory cgroups (v2: for both controllers), or None.
    memory: str | None = None
    #: Parent directory for pids cgroups (v2: same as ``memory``), or None.
    pids: str | None = None
    #: v2 only: our own cgroup, which corral must first vacate into a leaf.
    vacate: str | None = None
    #: What was found, or why cgroups cannot be used.
    detail: str = ""


def _unescape(field: str) -> str:
    """Mountinfo escapes spaces and friends as ``\\ooo``."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _mounts(proc: str) -> list[tuple[str, str, str, set[str]]]:
    """(fstype, mount root, mount point, super options) of every cgroup mount."""
    out = []
    for line in _read(f"{proc}/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        rest = right.split()
        if len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        out.append((rest[0], _unescape(fields[3]), _unescape(fields[4]), set(rest[2].split(","))))
    return out


def _locate(cg_path: str, root: str, mount_point: str) -> str | None:
    """The directory of a cgroup path as seen through a mount of ``root``."""
    if root == "/":
        return os.path.normpath(mount_point + cg_path)
    if cg_path == root or cg_path.startswith(root + "/"):
        return os.path.normpath(mount_point + cg_path[len(root) :])
    return None


def _writable(path: str) -> bool:
    return os.access(path, os.W_OK | os.X_OK)


_WANTED = {"memory", "pids"}


def _delegated(directory: str) -> bool:
    """Children of ``directory`` get memory and pids, and we may move processes there."""
    try:
        enabled = set(_read(f"{directory}/cgroup.subtree_control").split())
    except OSError:
        return False
    return (
        enabled >= _WANTED
        and _writable(directory)
        and os.access(f"{directory}/cgroup.procs", os.W_OK)
    )


def _detect_v2(own: str, top: str) -> CgroupSupport:
    try:
        available = set(_read(f"{own}/cgroup.controllers").split())
        members = _read(f"{own}/cgroup.procs").split()
    except OSError as exc:
        return CgroupSupport(version=0, detail=f"cannot read {own}: {exc.strerror}")
    if not available >= _WANTED:
        return CgroupSupport(
            version=0, detail=f"cgroup v2 at {own} lacks the memory and pids controllers"
        )
    # The nearest ancestor delegated to us (systemd's user@UID.service and the
    # slices below it, for a desktop session): a child forked in our cgroup may
    # move into a new child of that ancestor, because the kernel then checks write
    # access to the ancestor's cgroup.procs, the common ancestor of both.
    directory = own
    while True:
        if _delegated(directory):
            return CgroupSupport(
                version=2, memory=directory, pids=directory, detail=f"v2, delegated {directory}"
            )
        if directory == top or directory in ("/", ""):
            break
        directory = os.path.dirname(directory)
    if _writable(own) and members == [str(os.getpid())]:
        return CgroupSupport(
            version=2, memory=own, pids=own, vacate=own, detail=f"v2, own scope {own}"
        )
    return CgroupSupport(
        version=0,
        detail=f"no delegated cgroup v2 subtree above {own}; run corral in a scope of its "
        "own: `systemd-run --user --scope -p Delegate=yes corral ...`",
    )


def detect_cgroups(proc: str = "/proc") -> CgroupSupport:
    """Find where per-extension cgroups can be created. Never raises.

    Args:
        proc: where procfs is mounted (tests point this at a fake tree).
    """
    try:
        membership = _read(f"{proc}/self/cgroup").splitlines()
        mounts = _mounts(proc)
    except OSError as exc:
        return CgroupSupport(version=0, detail=f"cannot read cgroup membership: {exc.strerror}")
    v1: dict[str, str] = {}
    v2_path: str | None = None
    for line in membership:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            v2_path = path
        for controller in controllers.split(","):
            v1[controller] = path
    reasons: list[str] = []
    if v2_path is not None:
        for fstype, root, point, _ in mounts:
            own = _locate(v2_path, root, point) if fstype == "cgroup2" else None
            if own is not None:
                found = _detect_v2(own, point)
                if found.version:
                    return found
                reasons.append(found.detail)
    parents: dict[str, str] = {}
    for controller in ("memory", "pids"):
        for fstype, root, point, options in mounts:
            if fstype != "cgroup" or controller not in options or controller not in v1:
                continue
            own = _locate(v1[controller], root, point)
            if own is not None and _writable(own):
                parents[controller] = own
            elif own is not None:
                reasons.append(f"cgroup v1 {own} is not writable by this user")
    if parents:
        where = ", ".join(f"{c} under {p}" for c, p in parents.items())
        return CgroupSupport(
            version=1, memory=parents.get("memory"), pids=parents.get("pids"), detail=f"v1: {where}"
        )
    return CgroupSupport(version=0, detail="; ".join(reasons) or "no cgroup hierarchy found")


def _write(path: str, value: str) -> None:
    # O_CREAT only matters for the plain directory trees tests use: cgroupfs
    # refuses to create files, so a missing control file is still an error.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _pids(directory: str) -> list[int]:
    try:
        return [int(p) for p in _read(f"{directory}/cgroup.procs").split()]
    except OSError:
        return []


def _kill_all(directory: str) -> None:
    """SIGKILL everything in a cgroup (atomically with v2's ``cgroup.kill``)."""
    kill_file = f"{directory}/cgroup.kill"
    if os.path.exists(kill_file):
        try:
            _write(kill_file, "1")
            return
        except OSError:
            pass
    # v1: processes may fork while we kill; the pids limit bounds how long that
    # lasts. Killed processes leave the cgroup as they exit, a matter of
    # microseconds, so a short bounded retry is enough here.
    for _ in range(200):
        pids = _pids(directory)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.001)


def _remove(directory: str) -> None:
    _kill_all(directory)
    # rmdir fails with EBUSY until the last killed process has left the cgroup.
    for _ in range(500):
        try:
            os.rmdir(directory)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return
        time.sleep(0.002)


@final
class CgroupManager:
    """Creates, limits and removes per-extension cgroups under one :class:`CgroupSupport`."""

    def __init__(self, support: CgroupSupport, *, spares: bool = False) -> None:
        """Manage cgroups under ``support``; with ``spares``, keep one parked ahead
        (see :meth:`park_spare`)."""
        self.support = support
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self._vacated = support.vacate is None
        self._spares = spares
        #: Cgroups a spare child of the guardian has joined ([]: being made).
        self._spare: list[str] | None = None

    def __repr__(self) -> str:
        return f"<CgroupManager {self.support.detail}>"

    def _vacate(self) -> None:
        """v2: move this process into a leaf so its cgroup may have children."""
        own = self.support.vacate
        if self._vacated or own is None:
            return
        leaf = f"{own}/corral-host"
        os.makedirs(leaf, exist_ok=True)
        _write(f"{leaf}/cgroup.procs", str(os.getpid()))
        _write(f"{own}/cgroup.subtree_control", "+memory +pids")
        self._vacated = True

    def sweep(self) -> None:
        """Remove cgroups left by hosts that died (their pid in the name is gone)."""
        for parent in {self.support.memory, self.support.pids} - {None}:
            assert parent is not None
            try:
                names = os.listdir(parent)
            except OSError:
                continue
            for name in names:
                match = _STALE.match(name)
                if match is None or int(match.group(1)) == os.getpid():
                    continue
                try:
                    os.kill(int(match.group(1)), 0)
                except ProcessLookupError:
                    _remove(f"{parent}/{name}")
                except PermissionError:
                    pass

    def create(self, name: str, limits: Limits, *, memory: bool = True) -> list[str]:
        """Create the cgroup(s) of one extension run, limits applied.

        Args:
            name: extension name (part of the directory name).
            limits: the extension's limits (memory and processes are used).
            memory: also limit memory (False leaves memory to rlimits).

        Returns:
            The directories the child must join, memory's first. Empty if none.

        Raises:
            OSError: creating or configuring a cgroup failed; nothing is left behind.
        """
        spare = self._take_spare() if memory else None
        created = spare or self._make(name, memory)
        try:
            self._limit(created, limits, memory)
        except OSError:
            self.destroy(created)
            raise
        return created

    def _make(self, name: str, memory: bool) -> list[str]:
        """New, empty cgroup directories (memory's first)."""
        base = f"corral-{os.getpid()}-{_NAME_UNSAFE.sub('_', name)[:40]}-{next(self._counter)}"
        created: list[str] = []
        try:
            with self._lock:
                self._vacate()
            parents = [self.support.memory]
            if self.support.version == 1:
                parents = [self.support.memory if memory else None, self.support.pids]
            for parent in parents:
                if parent is not None:
                    os.mkdir(f"{parent}/{base}")
                    created.append(f"{parent}/{base}")
        except OSError:
            self.destroy(created)
            raise
        return created

    def _limit(self, created: list[str], limits: Limits, memory: bool) -> None:
        memory_bytes = str(limits.memory_mb * 1024 * 1024)
        for directory in created:
            if self.support.version == 2 or directory.startswith(f"{self.support.memory}/"):
                if memory and self.support.version == 2:
                    _write(f"{directory}/memory.max", memory_bytes)
                    if os.path.exists(f"{directory}/memory.swap.max"):
                        _write(f"{directory}/memory.swap.max", "0")
                elif memory:
                    _write(f"{directory}/memory.limit_in_bytes", memory_bytes)
                    if os.path.exists(f"{directory}/memory.memsw.limit_in_bytes"):
                        _write(f"{directory}/memory.memsw.limit_in_bytes", memory_bytes)
            if self.support.version == 2 or directory.startswith(f"{self.support.pids}/"):
                _write(f"{directory}/pids.max", str(limits.processes))

    def park_spare(self) -> None:
        """Have the guardian park a spare child in new cgroups, unless one is parked.

        Joining a cgroup costs the joining process a kernel RCU grace period (10-20
        ms on cgroup v1, or v2 without ``favordynmods``) when no other process
        joined one just before. A spare child of the guardian pays it now, while
        nothing waits; the next :meth:`create` hands out its cgroups, and the spawn
        into them (see :func:`sandbox.spawn`) takes that child instead of forking
        one. The spare's cgroups are named ``ext`` (the name is not known yet).
        Never raises: without a spare, a spawn joins its cgroups itself.
        """
        with self._lock:
            if self._spare is not None:
                return
            self._spare = []  # claimed while it is made
        try:
            dirs = self._make("ext", memory=True)
        except OSError:
            dirs = []
        try:
            if dirs:
                guardian().park(dirs)
        except OSError:
            self.destroy(dirs)
            dirs = []
        with self._lock:
            self._spare = dirs or None

    def _take_spare(self) -> list[str] | None:
        with self._lock:
            spare = self._spare
            if not spare:  # none, or still being made
                return None
            self._spare = None
            return spare

    def limits_memory(self) -> bool:
        """True when :meth:`create` limits memory."""
        return self.support.memory is not None

    def limits_processes(self) -> bool:
        """True when :meth:`create` limits the number of processes."""
        return self.support.pids is not None

    def destroy(self, directories: list[str]) -> None:
        """Kill whatever is left in the cgroups and remove them. Idempotent.

        With spares, the next spare is parked now: while an extension stops, not
        while the next one starts (a spare joining its cgroups slows every fork
        on the machine for a moment).
        """
        for directory in directories:
            _remove(directory)
        if self._spares and directories:
            self.park_spare()

    def probe(self) -> str | None:
        """Create and remove a throw-away cgroup; None if that works, else why not."""
        if self.support.vacate is not None:
            # Vacating moves this process; leave that to the first real launch.
            return None
        try:
            self.destroy(self.create("probe", Limits()))
        except OSError as exc:
            return f"cannot create a cgroup: {exc.strerror}"
        return None
