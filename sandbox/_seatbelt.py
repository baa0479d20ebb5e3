"""The ``sandbox-exec`` backend (macOS Seatbelt).

:func:`seatbelt_profile` generates a deny-by-default SBPL profile from an
extension's permissions: the program may run and fork, read the system, its
runtime, its own directory and the declared read-only paths, write its data
directory, a private temporary directory and the declared read-write paths, and
use the network only when granted. Paths are real paths, because Seatbelt matches
after symlinks are resolved (``/tmp`` is ``/private/tmp`` on macOS).

What Seatbelt cannot do compared to bwrap: there is no private process table, no
size limit on the private temporary directory, and ``RLIMIT_NPROC`` counts all of
the user's processes, so the process limit is not enforced (said in the notes).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import final

from ._environ import sandbox_env
from ._pin import check_pins
from ._plan import LaunchPlan, LaunchRequest
from ._preexec import rlimits_for
from ._runtime import RuntimeNeeds, find_runtime_paths

__all__ = ["MACOS_SYSTEM_READ", "SANDBOX_EXEC", "SeatbeltSandbox", "seatbelt_profile"]

SANDBOX_EXEC = "/usr/bin/sandbox-exec"

#: Read-only everywhere: the OS, its libraries and the dyld shared cache.
MACOS_SYSTEM_READ = (
    "/usr", "/bin", "/sbin", "/System", "/Library/Apple", "/private/var/db/dyld",
    "/private/var/db/timezone", "/private/var/select", "/private/etc/localtime",
    "/private/etc/ssl",
)  # fmt: skip

#: Needed for name resolution, only with network permission.
_MACOS_NETWORK_READ = (
    "/private/etc/hosts", "/private/etc/resolv.conf", "/private/var/run/resolv.conf",
    "/private/etc/services", "/private/etc/protocols",
)  # fmt: skip

#: sysctls that runtimes read at start-up (CPU count, page size, OS version).
_SYSCTLS = (
    "hw.activecpu", "hw.byteorder", "hw.cachelinesize_compat", "hw.cpufamily",
    "hw.cputype", "hw.logicalcpu", "hw.logicalcpu_max", "hw.machine", "hw.memsize",
    "hw.model", "hw.ncpu", "hw.nperflevels", "hw.pagesize", "hw.pagesize_compat",
    "hw.physicalcpu", "hw.physicalcpu_max", "hw.tbfrequency_compat", "hw.vectorunit",
    "kern.argmax", "kern.hostname", "kern.maxfilesperproc", "kern.osproductversion",
    "kern.osrelease", "kern.ostype", "kern.osvariant_status", "kern.osversion",
    "kern.secure_kernel", "kern.usrstack64", "kern.version", "sysctl.proc_cputype",
    "sysctl.proc_translated",
)  # fmt: skip
_SYSCTL_PREFIXES = ("hw.optional.", "hw.perflevel", "kern.proc.pid.")

#: Mach services for user/group lookups, notifications and logging.
_MACH_SERVICES = (
    "com.apple.system.opendirectoryd.libinfo",
    "com.apple.system.notification_center",
    "com.apple.system.logger",
)
_MACH_NETWORK_SERVICES = ("com.apple.dnssd.service", "com.apple.SystemConfiguration.configd")


def _quote(value: str) -> str:
    """An SBPL string literal: backslash and double quote escaped, no raw control chars."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "".join(c if c >= " " else f"\\x{ord(c):02x}" for c in escaped)
    return f'"{escaped}"'


def _ancestors(paths: list[str]) -> list[str]:
    out: dict[str, None] = {"/": None}
    for path in paths:
        parent = os.path.dirname(path)
        while parent not in ("/", ""):
            out[parent] = None
            parent = os.path.dirname(parent)
    return list(out)


def _filters(kind: str, values: list[str] | tuple[str, ...]) -> str:
    return " ".join(f"({kind} {_quote(v)})" for v in values)


def seatbelt_profile(
    *,
    name: str,
    read_only: list[str],
    read_write: list[str],
    network: bool,
    system_read: tuple[str, ...] = MACOS_SYSTEM_READ,
) -> str:
    """Generate the deny-by-default SBPL profile for one extension.

    Args:
        name: the extension's name (a comment in the profile).
        read_only: real paths readable (runtime, extension directory, declared).
        read_write: real paths readable and writable (data dir, private tmp, declared).
        network: allow network access, including unix sockets.
        system_read: OS paths every extension may read.

    Returns:
        The profile text for ``sandbox-exec -p``.
    """
    readable = [*system_read, *read_only]
    if network:
        readable += _MACOS_NETWORK_READ
    lines = [
        "(version 1)",
        f"; corral: profile of extension {_quote(name)}, generated from its permissions.",
        "; Everything not allowed below is denied.",
        "(deny default)",
        "",
        "; Processes: run and fork; signal and inspect only this sandbox's processes.",
        "(allow process-fork)",
        f"(allow process-exec {_filters('subpath', [*readable, *read_write])})",
        "(allow signal (target same-sandbox))",
        "(allow process-info* (target same-sandbox))",
        "",
        "; What interpreters need at start-up.",
        f"(allow sysctl-read {_filters('sysctl-name', _SYSCTLS)}"
        f" {_filters('sysctl-name-prefix', _SYSCTL_PREFIXES)})",
        f"(allow mach-lookup {_filters('global-name', _MACH_SERVICES)})",
        "(allow ipc-posix-sem)",
        '(allow file-read* file-write-data (literal "/dev/null") (literal "/dev/zero"))',
        '(allow file-read* (literal "/dev/random") (literal "/dev/urandom"))',
        "",
        "; Metadata of the directories leading to allowed paths (realpath walks them).",
        f"(allow file-read-metadata {_filters('literal', _ancestors([*readable, *read_write]))}"
        ' (literal "/etc") (literal "/tmp") (literal "/var"))',
        "",
        "; Read-only: the system, the runtime, the extension, declared read-only paths.",
        f"(allow file-read* file-map-executable {_filters('subpath', readable)})",
    ]
    if read_write:
        lines += [
            "",
            "; Read-write: the data directory, the private tmp, declared read-write paths.",
            f"(allow file-read* file-write* file-map-executable {_filters('subpath', read_write)})",
        ]
    if network:
        lines += [
            "",
            "; Network granted: sockets of every kind, and DNS through mDNSResponder.",
            "(allow network*)",
            "(allow system-socket)",
            f"(allow mach-lookup {_filters('global-name', _MACH_NETWORK_SERVICES)})",
        ]
    else:
        lines += ["", "; No network: TCP, UDP and unix sockets fall under (deny default)."]
    return "\n".join(lines) + "\n"


@final
class SeatbeltSandbox:
    """Plans ``sandbox-exec`` launches (macOS)."""

    def __init__(self, sandbox_exec: str = SANDBOX_EXEC) -> None:
        self.sandbox_exec = sandbox_exec

    def __repr__(self) -> str:
        return f"<SeatbeltSandbox {self.sandbox_exec}>"

    @property
    def backend(self) -> str:
        """``"sandbox-exec"``."""
        return "sandbox-exec"

    def plan(self, request: LaunchRequest) -> LaunchPlan:
        """Wrap the request in ``sandbox-exec -p <profile>``; creates a private tmp dir.

        Raises:
            GrantChanged: a pinned path is no longer what was validated.
            PlanError: the interpreter cannot run in a sandbox (relative, missing, a shim).
        """
        perms = request.permissions
        # The profile names real paths, which the kernel matches after resolving
        # symlinks: a swapped grant is denied rather than followed. Still, a change
        # since validation quarantines the extension as under bwrap.
        check_pins(request.name, request.pins)
        if request.data_dir:
            os.makedirs(request.data_dir, mode=0o700, exist_ok=True)
        runtime = RuntimeNeeds(paths=[], notes=[])
        if request.interpreter:
            runtime = find_runtime_paths(
                request.name,
                request.interpreter,
                system=MACOS_SYSTEM_READ,
                home=os.path.expanduser("~"),
                hidden=(os.getcwd(), request.ext_dir, request.data_dir or ""),
                private=tuple(request.hidden),
            )
        tmp = os.path.realpath(tempfile.mkdtemp(prefix=f"corral-{request.name}-"))
        read_only = [
            *runtime.paths,
            *(os.path.realpath(p) for p in [request.ext_dir, *request.runtime_paths]),
            *perms.read_only,
        ]
        read_write = [tmp, *perms.read_write]
        if request.data_dir:
            read_write.append(os.path.realpath(request.data_dir))
        profile = seatbelt_profile(
            name=request.name,
            read_only=read_only,
            read_write=read_write,
            network=perms.network is True and not request.private_network,
        )
        notes = [
            *runtime.notes,
            *(
                ["sandbox-exec: a network list is not supported yet: no network"]
                if perms.destinations
                else []
            ),
            "sandbox-exec: the private tmp has no size limit",
            "sandbox-exec: process limit not enforced (RLIMIT_NPROC is per user on macOS)",
            "sandbox-exec: memory is limited per process (RLIMIT_DATA)",
        ]
        return LaunchPlan(
            argv=[self.sandbox_exec, "-p", profile, *request.argv],
            env=sandbox_env(request.env, home=request.data_dir or tmp, tmp=tmp),
            cwd=request.ext_dir,
            backend="sandbox-exec",
            sandboxed=True,
            rlimits=rlimits_for(perms.limits, memory=True, processes=False),
            notes=notes,
            run_dirs=[tmp],
            pins=list(request.pins),
            pass_fds=list(request.pass_fds),
        )

    def cleanup(self, plan: LaunchPlan) -> None:
        """Remove the private tmp directory. Idempotent."""
        for directory in plan.run_dirs:
            shutil.rmtree(directory, ignore_errors=True)
