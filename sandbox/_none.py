"""The ``none`` backend: no isolation, limits only.

Used for ``--sandbox off`` and, with ``--sandbox auto``, when no real backend
works here. The plan says ``sandboxed=False`` and carries the reason in its
notes, so the host can flag the extension loudly. Resource limits still apply:
the per-process rlimits always, and a cgroup when this process may create one
(which also lets :meth:`NoneSandbox.cleanup` kill whatever the extension left
running).
"""

from __future__ import annotations

import os
from typing import final

from ._cgroup import CgroupManager
from ._plan import LaunchPlan, LaunchRequest
from ._preexec import rlimits_for

__all__ = ["NoneSandbox"]


@final
class NoneSandbox:
    """Runs extensions as they are, with limits but without isolation."""

    def __init__(self, reason: str, cgroups: CgroupManager | None = None) -> None:
        """Create the backend.

        Args:
            reason: why nothing better is used (``--sandbox off``, or the probe's finding
                and its fix); copied into every plan's notes.
            cgroups: where to put each run's cgroup, if anywhere.
        """
        self.reason = reason
        self.cgroups = cgroups

    def __repr__(self) -> str:
        return f"<NoneSandbox reason={self.reason!r}>"

    @property
    def backend(self) -> str:
        """``"none"``."""
        return "none"

    def plan(self, request: LaunchRequest) -> LaunchPlan:
        """Run ``request`` unchanged, in the extension's directory, with limits."""
        notes = [f"not sandboxed: {self.reason}"]
        if request.data_dir:
            os.makedirs(request.data_dir, mode=0o700, exist_ok=True)
        cgroups: list[str] = []
        if self.cgroups is not None:
            try:
                cgroups = self.cgroups.create(request.name, request.permissions.limits)
            except OSError as exc:
                notes.append(f"no cgroup for this run ({exc.strerror})")
        by_memory = bool(cgroups) and self.cgroups is not None and self.cgroups.limits_memory()
        if not (cgroups and self.cgroups is not None and self.cgroups.limits_processes()):
            # Without a user namespace RLIMIT_NPROC would count all of the user's
            # processes, so it is not set at all.
            notes.append("process limit not enforced")
        return LaunchPlan(
            argv=list(request.argv),
            env=dict(request.env),
            cwd=request.ext_dir,
            backend="none",
            sandboxed=False,
            rlimits=rlimits_for(request.permissions.limits, memory=not by_memory, processes=False),
            cgroup=cgroups[0] if cgroups else None,
            extra_cgroups=cgroups[1:],
            notes=notes,
        )

    def cleanup(self, plan: LaunchPlan) -> None:
        """Remove the run's cgroups, killing anything left in them. Idempotent."""
        if self.cgroups is not None:
            self.cgroups.destroy([d for d in [plan.cgroup, *plan.extra_cgroups] if d])
