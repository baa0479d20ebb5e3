"""Choosing a backend for ``--sandbox auto|required|off``.

The machine is probed once per process (:func:`check_sandbox`), on first use,
and the backends built from that probe are reused: each one owns state (open
seccomp descriptors, a cgroup counter) that must outlive a single launch.

``auto`` never downgrades silently: when nothing works it returns the ``none``
backend whose every plan says ``sandboxed=False`` with the cause and the fix in
its notes, and logs one warning. ``required`` raises :class:`SandboxUnavailable`
with the same cause and fix.
"""

from __future__ import annotations

import threading

from ._bwrap import BwrapSandbox
from ._exceptions import SandboxUnavailable
from ._none import NoneSandbox
from ._plan import Sandbox, SandboxMode
from ._probe import Probe, probe_machine, probe_runtimes
from ._report import SandboxReport
from ._seatbelt import SeatbeltSandbox
from .log import get_logger

__all__ = ["check_sandbox", "select_sandbox"]

log = get_logger(__name__)

_lock = threading.Lock()
_probe: Probe | None = None
#: The report with every runtime tried (see :func:`probe_runtimes`), once asked for.
_report: SandboxReport | None = None
_backends: dict[str, Sandbox] = {}


def _probed() -> Probe:
    global _probe
    with _lock:
        if _probe is None:
            _probe = probe_machine()
        return _probe


def check_sandbox(*, refresh: bool = False) -> SandboxReport:
    """Probe this machine (once per process) and report what works and why not.

    Args:
        refresh: probe again instead of returning the cached report. Backends
            already handed out by :func:`select_sandbox` are kept.

    Returns:
        The report; :func:`sandbox.format_report` renders it.
    """
    global _probe, _report
    if refresh:
        with _lock:
            _probe = _report = None
    probe = _probed()
    with _lock:
        if _report is None:
            _report = probe_runtimes(probe).report
        return _report


def _expected_backend(report: SandboxReport) -> str:
    return "sandbox-exec" if report.platform == "darwin" else "bwrap"


def select_sandbox(mode: SandboxMode | str, *, cgroups: bool = True) -> Sandbox:
    """The backend to run extensions with.

    Args:
        mode: ``"off"``: the ``none`` backend (limits only, plans flagged unsandboxed).
            ``"auto"``: the best backend that works here, else ``none`` with the cause
            and fix in every plan's notes. ``"required"``: the best backend that works,
            else :class:`SandboxUnavailable`.
        cgroups: put each sandboxed extension in a cgroup of its own when the
            machine allows it. Joining a cgroup costs one RCU grace period in the
            kernel (10-20 ms per spawn on cgroup v1, or v2 without
            ``favordynmods``); without it, limits are per process (memory) or per
            user namespace (processes). The ``none`` backend never uses one.

    Returns:
        A backend, shared by every caller in this process.

    Raises:
        SandboxUnavailable: ``mode`` is ``"required"`` and no backend works; its
            message names the cause and the fix.
        ValueError: ``mode`` is not one of the three.
    """
    try:
        mode = SandboxMode(mode)
    except ValueError:
        *most, last = SandboxMode
        raise ValueError(f"--sandbox must be {', '.join(most)} or {last}, not {mode!r}") from None
    if mode is SandboxMode.OFF:
        with _lock:
            return _backends.setdefault("off", NoneSandbox("--sandbox off"))
    probe = _probed()
    report = probe.report
    manager = probe.cgroups if cgroups else None
    with _lock:
        if report.chosen == "bwrap" and probe.bwrap is not None:
            key = f"bwrap:{cgroups}"
            if key not in _backends:
                _backends[key] = BwrapSandbox(probe.bwrap, manager)
            return _backends[key]
        if report.chosen == "sandbox-exec" and probe.seatbelt:
            return _backends.setdefault("sandbox-exec", SeatbeltSandbox())
    expected = _expected_backend(report)
    status = report.status(expected)
    why = status.why if status and status.why else f"no sandbox backend for {report.platform}"
    fix = status.fix if status and status.fix else "run on Linux with bubblewrap, or on macOS"
    if mode is SandboxMode.REQUIRED:
        raise SandboxUnavailable(expected, why, fix)
    with _lock:
        if "fallback" not in _backends:
            log.warning("sandbox_unavailable", backend=expected, cause=why, fix=fix)
            _backends["fallback"] = NoneSandbox(f"{expected} unavailable: {why} (fix: {fix})")
        return _backends["fallback"]
