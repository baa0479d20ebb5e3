"""corral's sandbox: turns an extension's declared permissions into a confined launch.

The supervisor validates a manifest's ``permissions`` with
:func:`check_permissions` (which pins what it validated, see :class:`Pin`),
picks a backend once with :func:`select_sandbox`, turns each
:class:`LaunchRequest` into a :class:`LaunchPlan` with ``backend.plan(request)``
(which binds exactly the pinned files or raises :class:`GrantChanged`), starts
it with :func:`spawn` (or :func:`submit_spawn`, which does not wait for the fork,
for an event loop; through the guardian, :func:`start_guardian`, which also
makes sure nothing outlives the host), and calls ``backend.cleanup(plan)`` once the
process has exited. :func:`check_sandbox` and :func:`format_report` are
``corral sandbox check``. :func:`plan_shell` plans the agent's own confined shell
(the ``bash`` tool) with the same machinery; :class:`ProtectedPaths` is the rule
both it and the file tools follow inside the workspace (what must stay read-only
because it runs later as the user), and :func:`credential_paths` the one list of
credential stores no sandboxed child may read. :func:`host_environment` is the
allowlisted environment everything corral starts begins with. :func:`start_time`
tells a live process from a later one that took its pid.

Network grants: :func:`check_network` validates a ``permissions.network`` list of
destinations, :class:`Destinations` matches a request against it (the egress
proxy's question), and :func:`blocked_reason` / :class:`AddressPolicy` say which
addresses a guarded connection may reach (the classification every network
guard of corral uses).
"""

from __future__ import annotations

from ._address import (
    AddressPolicy,
    Allowance,
    IPAddress,
    blocked_reason,
    is_localhost_name,
    local_reason,
    parse_allowance,
    parse_host,
)
from ._environ import ALLOWED_ENV, host_environment
from ._exceptions import (
    GrantChanged,
    PermissionsError,
    PlanError,
    SandboxError,
    SandboxUnavailable,
)
from ._guardian import guardian_pids, start_guardian, sweep_orphans
from ._network import (
    EGRESS_PORT,
    Destination,
    Destinations,
    check_network,
    parse_destination,
    proxy_env,
)
from ._permissions import Limits, Permissions
from ._pin import PathKind, Pin, carry_pins, changed_pins
from ._plan import LaunchPlan, LaunchRequest, Sandbox, SandboxMode
from ._proc import start_time
from ._protected import (
    Protected,
    ProtectedPaths,
    ProtectedSnapshot,
    ProtectKind,
    installation_paths,
)
from ._regular import open_regular
from ._report import BackendStatus, Feature, SandboxReport, format_report
from ._secrets import (
    HOME_STORES,
    SYSTEM_STORES,
    credential_paths,
    existing,
    other_homes,
    stores_around,
)
from ._select import check_sandbox, select_sandbox
from ._shell import ShellRequest, plan_shell
from ._spawn import PendingSpawn, Spawned, spawn, submit_spawn
from ._validate import Checked, check_permissions, validate_permissions
from ._within import inside

__all__ = [
    "ALLOWED_ENV",
    "EGRESS_PORT",
    "HOME_STORES",
    "SYSTEM_STORES",
    "AddressPolicy",
    "Allowance",
    "BackendStatus",
    "Checked",
    "Destination",
    "Destinations",
    "Feature",
    "GrantChanged",
    "IPAddress",
    "LaunchPlan",
    "LaunchRequest",
    "Limits",
    "PathKind",
    "PendingSpawn",
    "Permissions",
    "PermissionsError",
    "Pin",
    "PlanError",
    "ProtectKind",
    "Protected",
    "ProtectedPaths",
    "ProtectedSnapshot",
    "Sandbox",
    "SandboxError",
    "SandboxMode",
    "SandboxReport",
    "SandboxUnavailable",
    "ShellRequest",
    "Spawned",
    "blocked_reason",
    "carry_pins",
    "changed_pins",
    "check_network",
    "check_permissions",
    "check_sandbox",
    "credential_paths",
    "existing",
    "format_report",
    "guardian_pids",
    "host_environment",
    "inside",
    "installation_paths",
    "is_localhost_name",
    "local_reason",
    "open_regular",
    "other_homes",
    "parse_allowance",
    "parse_destination",
    "parse_host",
    "plan_shell",
    "proxy_env",
    "select_sandbox",
    "spawn",
    "start_guardian",
    "start_time",
    "stores_around",
    "submit_spawn",
    "sweep_orphans",
    "validate_permissions",
]
