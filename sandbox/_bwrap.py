"""The bubblewrap backend (Linux).

The extension runs in fresh namespaces (user, mount, pid, ipc, uts, cgroup, and
network unless granted) on an empty root that holds only what it needs:

* ``/usr`` and the ``/lib*``, ``/bin``, ``/sbin`` links, read-only;
* a curated subset of ``/etc`` (dynamic linker, time zone, certificates, name
  service config) and never ``passwd``, ``shadow``, ``ssh`` or ``ssl/private``;
* its interpreter's installation (see :mod:`sandbox._runtime`), read-only;
* its own directory read-only, its data directory read-write, and the declared
  paths exactly as declared, deeper paths mounted last so they win;
* a fresh ``/proc`` showing only its own processes, a minimal ``/dev``, and private
  size-limited tmpfs on ``/tmp`` and ``/dev/shm``; the root and ``/dev`` themselves
  are remounted read-only, since an unlimited tmpfs is a way to eat memory.

Every capability is dropped (``--cap-drop ALL``): when the host runs as root, the
sandboxed process is root of its user namespace and, with capabilities, could
remount the read-only binds read-write. Nested user namespaces are disabled
(``--disable-userns``, bwrap 0.8+) and a seccomp filter (:mod:`sandbox._seccomp`)
refuses what only an attacker needs. ``--new-session`` detaches it from any
terminal; ``--die-with-parent`` and the pid namespace take every process down
with the host.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import final

import msgspec

from ._cgroup import CgroupManager
from ._environ import sandbox_env
from ._permissions import Limits
from ._plan import LaunchPlan, LaunchRequest
from ._preexec import rlimits_for
from ._runtime import LINUX_SYSTEM_DIRS, find_runtime_paths
from ._seccomp import build_filter, filter_fd

__all__ = ["BwrapConfig", "BwrapSandbox"]

_MIB = 1024 * 1024

#: /etc entries every sandbox sees (when present). Deliberately not: passwd, group,
#: shadow, gshadow, sudoers, ssh/, ssl/private/, pki/tls/private/, machine-id.
#: Each is a bind mount, which costs start-up time, so the list is short.
_ETC = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf",
    "hosts", "alternatives", "os-release", "locale.alias", "default/locale", "mime.types",
)  # fmt: skip

#: /etc entries only an extension with network permission needs (name resolution,
#: TLS trust stores).
_ETC_NETWORK = (
    "resolv.conf", "host.conf", "gai.conf", "services", "protocols", "ssl/certs",
    "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf", "pki/tls/certs",
    "pki/tls/cert.pem", "pki/tls/openssl.cnf", "pki/ca-trust", "crypto-policies",
)  # fmt: skip


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


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


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


@functools.cache
def _etc_args(network: bool) -> tuple[str, ...]:
    args: list[str] = []
    for name in _ETC + (_ETC_NETWORK if network else ()):
        path = f"/etc/{name}"
        if not os.path.lexists(path):
            continue
        real = os.path.realpath(path)
        if os.path.islink(path) and any(_inside(real, d) for d in LINUX_SYSTEM_DIRS):
            # e.g. /etc/localtime -> /usr/share/zoneinfo/...: the target is visible.
            args += ["--symlink", os.readlink(path), path]
        elif os.path.exists(real):
            # e.g. /etc/resolv.conf -> /run/systemd/resolve/...: bind the content.
            args += ["--ro-bind-try", real, path]
    return tuple(args)


def _filesystem_args(network: bool, tmp_mb: int, grants: list[tuple[str, bool]]) -> list[str]:
    """The sandbox's mounts, in the order bwrap must create them."""
    size = str(tmp_mb * _MIB)
    args = ["--hostname", "corral", "--proc", "/proc"]
    # Sysctl permissions are checked against the effective uid alone: a host running
    # as root maps uid 0 into the sandbox, which could then write global sysctls
    # (kernel.core_pattern: a program the kernel runs as root) without any
    # capability. Likewise for pressure-stall triggers.
    args += ["--ro-bind", "/proc/sys", "/proc/sys"]
    args += ["--ro-bind-try", "/proc/pressure", "/proc/pressure"]
    args += ["--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    args += ["--size", size, "--tmpfs", "/tmp"]
    args += [*_system_args(), *_etc_args(network), *_binds(grants)]
    return [*args, "--remount-ro", "/"]


def _binds(entries: list[tuple[str, bool]]) -> list[str]:
    """``--bind``/``--ro-bind`` arguments, outer paths first so inner ones win.

    Python's sort is stable: at equal depth the later entry (the more specific
    grant: read-write after read-only, data dir last) is mounted on top.
    """
    seen: dict[str, bool] = {}
    for path, writable in entries:
        seen.pop(path, None)
        seen[path] = writable
    args: list[str] = []
    for path, writable in sorted(seen.items(), key=lambda item: item[0].count("/")):
        args += ["--bind" if writable else "--ro-bind", path, path]
    return args


@final
class BwrapSandbox:
    """Plans bubblewrap launches. Thread-safe; one instance per host process."""

    def __init__(self, config: BwrapConfig, cgroups: CgroupManager | None = None) -> None:
        self.config = config
        self.cgroups = cgroups
        self._lock = threading.Lock()
        self._owned_fds: set[int] = set()

    def __repr__(self) -> str:
        return f"<BwrapSandbox {self.config.bwrap} {self.config.version} cgroups={self.cgroups}>"

    @property
    def backend(self) -> str:
        """``"bwrap"``."""
        return "bwrap"

    def plan(self, request: LaunchRequest) -> LaunchPlan:
        """Turn a request into a bwrap command line, limits and environment.

        Creates the data directory if missing, the extension's cgroups when
        available, and an anonymous file holding the seccomp filter (in
        ``pass_fds``); :meth:`cleanup` releases them.

        Raises:
            PlanError: ``argv[0]`` cannot run in a sandbox (relative, missing, a shim).
        """
        perms = request.permissions
        if request.data_dir:
            os.makedirs(request.data_dir, mode=0o700, exist_ok=True)
        grants: list[tuple[str, bool]] = [(request.ext_dir, False)]
        grants += [(p, False) for p in request.runtime_paths]
        grants += [(p, False) for p in perms.read_only]
        grants += [(p, True) for p in perms.read_write]
        if request.data_dir:
            grants.append((request.data_dir, True))
        runtime = find_runtime_paths(
            request.name,
            request.argv[0],
            system=(*LINUX_SYSTEM_DIRS, *(p for p, _ in grants)),
            avoid=(os.path.expanduser("~"), request.ext_dir, request.data_dir or ""),
        )
        grants = [(p, False) for p in runtime.paths] + grants
        notes = list(runtime.notes)
        args = [
            self.config.bwrap,
            *self._namespace_args(perms.network),
            *_filesystem_args(perms.network, perms.limits.tmp_mb, grants),
            "--chdir",
            request.ext_dir,
        ]
        visible = [*LINUX_SYSTEM_DIRS, *(p for p, _ in grants)]
        env = sandbox_env(request.env, home=request.data_dir or "/tmp", tmp="/tmp", visible=visible)

        # Resources last, released if anything after them fails.
        cgroups = self._cgroups(request, notes)
        try:
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
            command = self._process_limit(list(request.argv), perms.limits, pids_done, notes)
            pass_fds: list[int] = []
            if self.config.seccomp:
                fd = filter_fd(build_filter(network=perms.network))
                with self._lock:
                    self._owned_fds.add(fd)
                pass_fds.append(fd)
                args += ["--seccomp", str(fd)]
            else:
                notes.append(f"no seccomp filter: {self.config.seccomp_why or 'unavailable'}")
        except BaseException:
            if self.cgroups is not None:
                self.cgroups.destroy(cgroups)
            raise
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
        )

    def _namespace_args(self, network: bool) -> list[str]:
        args = ["--unshare-user"]
        if self.config.disable_userns:
            args.append("--disable-userns")
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

    def _process_limit(
        self, command: list[str], limits: Limits, pids_done: bool, notes: list[str]
    ) -> list[str]:
        """The command, prefixed to set RLIMIT_NPROC inside when no pids cgroup does."""
        if pids_done:
            return command
        if self.config.prlimit:
            # RLIMIT_NPROC counts per (user namespace, uid): set inside the sandbox's
            # namespace it counts only the extension's own processes. Set by the host
            # before bwrap creates that namespace, it would also cap the user's
            # processes host-wide.
            n = limits.processes
            command = [self.config.prlimit, f"--nproc={n}:{n}", "--", *command]
        if os.geteuid() == 0:
            # The kernel exempts uid 0 (the host's root, mapped into the sandbox) from
            # RLIMIT_NPROC in every user namespace.
            notes.append("process limit not enforced: a root host needs a pids cgroup")
        elif not self.config.prlimit:
            notes.append("process limit not enforced: no pids cgroup and no prlimit")
        return command

    def cleanup(self, plan: LaunchPlan) -> None:
        """Close the plan's descriptors and remove its cgroups (killing leftovers).

        Idempotent: a descriptor is closed only while this backend still owns it, so
        a second call cannot close an unrelated file that reused the number.
        """
        for fd in plan.pass_fds:
            with self._lock:
                owned = fd in self._owned_fds
                self._owned_fds.discard(fd)
            if owned:
                os.close(fd)
        if self.cgroups is not None:
            self.cgroups.destroy([d for d in [plan.cgroup, *plan.extra_cgroups] if d])
