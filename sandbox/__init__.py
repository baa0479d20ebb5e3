"""corral's sandbox: turns an extension's declared permissions into a confined launch.

The supervisor validates a manifest's ``permissions`` with
:func:`validate_permissions`, picks a backend once with :func:`select_sandbox`,
turns each :class:`LaunchRequest` into a :class:`LaunchPlan` with
``backend.plan(request)``, starts it with :func:`spawn` (or ``Popen`` on the main
thread with ``preexec_fn=preexec_for(plan)``), and calls ``backend.cleanup(plan)``
once the process is reaped. :func:`check_sandbox` and :func:`format_report` are
``corral sandbox check``. :func:`plan_shell` plans the agent's own confined shell
(the ``bash`` tool) with the same machinery.
"""

from __future__ import annotations

from ._exceptions import PermissionsError, PlanError, SandboxError, SandboxUnavailable
from ._permissions import Limits, Permissions
from ._plan import LaunchPlan, LaunchRequest, Sandbox, SandboxMode
from ._preexec import preexec_for
from ._report import BackendStatus, Feature, SandboxReport, format_report
from ._select import check_sandbox, select_sandbox
from ._shell import ShellRequest, plan_shell
from ._spawn import spawn
from ._validate import validate_permissions

__all__ = [
    "BackendStatus",
    "Feature",
    "LaunchPlan",
    "LaunchRequest",
    "Limits",
    "Permissions",
    "PermissionsError",
    "PlanError",
    "Sandbox",
    "SandboxError",
    "SandboxMode",
    "SandboxReport",
    "SandboxUnavailable",
    "ShellRequest",
    "check_sandbox",
    "format_report",
    "plan_shell",
    "preexec_for",
    "select_sandbox",
    "spawn",
    "validate_permissions",
]
