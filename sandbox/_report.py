"""What ``corral sandbox check`` reports, and how it reads to a human."""

from __future__ import annotations

from typing import final

import msgspec

__all__ = ["BackendStatus", "Feature", "SandboxReport", "format_report"]


@final
class BackendStatus(msgspec.Struct, frozen=True, kw_only=True):
    """Whether one backend works on this machine."""

    #: ``"bwrap"``, ``"sandbox-exec"`` or ``"none"``.
    name: str
    ok: bool
    #: Version, path and similar facts.
    detail: str = ""
    #: When not ok: the cause, e.g. "unprivileged user namespaces are disabled".
    why: str = ""
    #: When not ok: what to do about it.
    fix: str = ""


@final
class Feature(msgspec.Struct, frozen=True, kw_only=True):
    """One hardening feature or runtime, found or not."""

    name: str
    ok: bool
    detail: str = ""


@final
class SandboxReport(msgspec.Struct, frozen=True, kw_only=True):
    """The result of probing this machine once with the real sandbox flags."""

    #: ``sys.platform``.
    platform: str
    #: User the probe ran as.
    uid: int
    #: The backend ``--sandbox auto`` uses (``"none"`` when nothing works).
    chosen: str
    backends: list[BackendStatus]
    #: Optional hardening: seccomp, cgroups, namespaces...
    hardening: list[Feature] = []
    #: Interpreters tried inside the chosen backend (Python always, Node when installed).
    runtimes: list[Feature] = []

    def status(self, backend: str) -> BackendStatus | None:
        """The entry of ``backend``, if it was considered."""
        return next((b for b in self.backends if b.name == backend), None)


def _mark(ok: bool) -> str:
    return "ok " if ok else "NO "


def format_report(report: SandboxReport) -> str:
    """Render a report for a terminal, e.g. the output of ``corral sandbox check``."""
    lines = [f"corral sandbox check ({report.platform}, uid {report.uid})", "", "backends:"]
    width = max(len(b.name) for b in report.backends)
    for b in report.backends:
        lines.append(f"  {_mark(b.ok)} {b.name:<{width}}  {b.detail}".rstrip())
        if not b.ok:
            if b.why:
                lines.append(f"      why: {b.why}")
            if b.fix:
                lines.append(f"      fix: {b.fix}")
    lines.append("")
    if report.chosen == "none":
        lines.append(
            "chosen: none. Extensions run UNSANDBOXED with --sandbox auto, and "
            "--sandbox required refuses to start them."
        )
    else:
        lines.append(f"chosen: {report.chosen} (used by --sandbox auto and --sandbox required)")
    for title, features in (("hardening", report.hardening), ("runtimes", report.runtimes)):
        if features:
            lines += ["", f"{title}:"]
            width = max(len(f.name) for f in features)
            lines += [f"  {_mark(f.ok)} {f.name:<{width}}  {f.detail}".rstrip() for f in features]
    return "\n".join(lines) + "\n"
