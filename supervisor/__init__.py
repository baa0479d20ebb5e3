"""corral's supervisor: runs extensions and tool hosts as supervised subprocesses.

Open one with :func:`open_supervisor`; talk to it through the
:class:`SupervisorClient` it yields. This facade is what an embedder needs; the
plumbing corral's agent builds on (lines, child processes, the egress proxy,
digests, relays) is in :mod:`supervisor.lowlevel`, and the typed tool builder in
:mod:`supervisor.toolkit`; both are imported on first use (an embedder that runs
extensions needs neither).
"""

from __future__ import annotations

import typing

from ._api import (
    CommandInfo,
    CommandOutcome,
    Displayed,
    EgressRefused,
    ExtensionCrashed,
    ExtensionInfo,
    ExtensionKept,
    ExtensionRestarted,
    ExtensionStarted,
    ExtensionStats,
    ExtensionStopped,
    InterceptKind,
    InterceptOutcome,
    Intervention,
    InterventionKind,
    NativeResult,
    Notified,
    Panel,
    PanelClosed,
    PanelOpened,
    PanelRendered,
    Quarantined,
    ReloadStats,
    SupervisorEvent,
    ToolInfo,
    ToolOutcome,
    ToolsChanged,
)
from ._client import SupervisorClient
from ._config import (
    HostInfo,
    RestartPolicy,
    SupervisorConfig,
    corral_home,
    data_dir,
    identity_of,
    log_file,
    quarantine_file,
)
from ._egress import EgressReport
from ._exceptions import (
    CallFailed,
    CallTimeout,
    DirectoryUnhashable,
    ExtensionGone,
    ExtensionStopping,
    IllegalTransition,
    ManifestError,
    NetRefused,
    NetUnresolved,
    ProtocolViolation,
    SupervisorClosed,
    SupervisorError,
    TrustError,
    TrustStoreError,
    UnknownCommand,
    UnknownExtension,
    UnknownPanel,
    UnknownTool,
)
from ._frames import PROTOCOL_VERSION, ImageBlock, TextBlock
from ._hostwire import NativeFormat
from ._lifecycle import ExtensionState
from ._manifest import (
    MANIFEST_NAME,
    ChildKind,
    Discovery,
    ExtensionSpec,
    Manifest,
    Runtime,
    Source,
    discover,
    load_manifest,
)
from ._netguard import NetGuard, Resolver, system_resolver
from ._requests import EmitEvent
from ._supervisor import open_supervisor
from ._trust import (
    TrustPin,
    TrustState,
    TrustStore,
    TrustVerdict,
    describe_permissions,
    describe_program,
    trust_command,
)
from ._version import VERSION

__all__ = [
    "MANIFEST_NAME",
    "PROTOCOL_VERSION",
    "VERSION",
    "CallFailed",
    "CallTimeout",
    "ChildKind",
    "CommandInfo",
    "CommandOutcome",
    "DirectoryUnhashable",
    "Discovery",
    "Displayed",
    "EgressRefused",
    "EgressReport",
    "EmitEvent",
    "ExtensionCrashed",
    "ExtensionGone",
    "ExtensionInfo",
    "ExtensionKept",
    "ExtensionRestarted",
    "ExtensionSpec",
    "ExtensionStarted",
    "ExtensionState",
    "ExtensionStats",
    "ExtensionStopped",
    "ExtensionStopping",
    "HostInfo",
    "IllegalTransition",
    "ImageBlock",
    "InterceptKind",
    "InterceptOutcome",
    "Intervention",
    "InterventionKind",
    "Manifest",
    "ManifestError",
    "NativeFormat",
    "NativeResult",
    "NetGuard",
    "NetRefused",
    "NetUnresolved",
    "Notified",
    "Panel",
    "PanelClosed",
    "PanelOpened",
    "PanelRendered",
    "ProtocolViolation",
    "Quarantined",
    "ReloadStats",
    "Resolver",
    "RestartPolicy",
    "Runtime",
    "Source",
    "SupervisorClient",
    "SupervisorClosed",
    "SupervisorConfig",
    "SupervisorError",
    "SupervisorEvent",
    "TextBlock",
    "ToolInfo",
    "ToolOutcome",
    "ToolsChanged",
    "TrustError",
    "TrustPin",
    "TrustState",
    "TrustStore",
    "TrustStoreError",
    "TrustVerdict",
    "UnknownCommand",
    "UnknownExtension",
    "UnknownPanel",
    "UnknownTool",
    "corral_home",
    "data_dir",
    "describe_permissions",
    "describe_program",
    "discover",
    "identity_of",
    "load_manifest",
    "log_file",
    "lowlevel",
    "open_supervisor",
    "quarantine_file",
    "system_resolver",
    "toolkit",
    "trust_command",
]


if typing.TYPE_CHECKING:
    from . import lowlevel, toolkit


def __getattr__(name: str) -> typing.Any:
    """``supervisor.lowlevel`` and ``supervisor.toolkit``, imported on first use."""
    if name in ("lowlevel", "toolkit"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
