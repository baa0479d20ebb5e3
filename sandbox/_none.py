"""The ``none`` backend: no isolation, per-process limits only.

Used for ``--sandbox off`` and, with ``--sandbox auto``, when no real backend
works here. The plan says ``sandboxed=False`` and carries the reason in its
notes, so the host can flag the extension loudly. The per-process rlimits still
apply. There is no cgroup: "no isolation" should cost nothing, and joining a
cgroup costs a kernel RCU grace period per spawn (10-20 ms on cgroup v1, or v2
without ``favordynmods``); so memory is limited per process and the number of
processes is not limited (the notes say so). Whatever the extension leaves
running is still found and killed: by the supervisor's sweeps, and, if the host
dies, by the guardian (:mod:`sandbox._guardian`).
"""

from __future__ import annotations

import os
from typing import final

from ._plan import LaunchPlan, LaunchRequest
from ._preexec import rlimits_for

__all__ = ["NoneSandbox"]


@final
class NoneSandbox:
    """Runs extensions as they are, with limits but without isolation."""

    def __init__(self, reason: str) -> None:
        """Create the backend.

        Args:
            reason: why nothing better is used (``--sandbox off``, or the probe's finding
                and its fix); copied into every plan's notes.
        """
        self.reason = reason

    def __repr__(self) -> str:
        return f"<NoneSandbox reason={self.reason!r}>"

    @property
    def backend(self) -> str:
        """``"none"``."""
        return "none"

    def plan(self, request: LaunchRequest) -> LaunchPlan:
        """Run ``request`` unchanged, in the extension's directory, with limits."""
        if request.data_dir:
            os.makedirs(request.data_dir, mode=0o700, exist_ok=True)
        return LaunchPlan(
            argv=list(request.argv),
            env=dict(request.env),
            cwd=request.ext_dir,
            backend="none",
            sandboxed=False,
            rlimits=rlimits_for(request.permissions.limits, memory=True, processes=False),
            # Without a user namespace RLIMIT_NPROC would count all of the user's
            # processes, so it is not set at all.
            notes=[
                f"not sandboxed: {self.reason}",
                "process limit not enforced",
                *(
                    ["network list not enforced: the host's whole network"]
                    if request.permissions.destinations
                    else []
                ),
                *(
                    ["private network not enforced: the host's whole network"]
                    if request.private_network
                    else []
                ),
            ],
            pass_fds=list(request.pass_fds),
        )

    def cleanup(self, plan: LaunchPlan) -> None:
        """Nothing to release."""
