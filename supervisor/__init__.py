"""corral's supervisor: runs extensions as supervised subprocesses.

Open one with :func:`open_supervisor`; talk to it through the
:class:`SupervisorClient` it yields.
"""

from __future__ import annotations

from ._api import (
    CommandInfo,
    CommandOutcome,
    Displayed,
    EmitEvent,
    ExtensionCrashed,
    ExtensionInfo,
    ExtensionRestarted,
    ExtensionStarted,
    ExtensionStats,
    ExtensionStopped,
    InterceptOutcome,
    Intervention,
    InterventionKind,
    Notified,
    Quarantined,
    ReloadStats,
    SupervisorClient,
    SupervisorEvent,
    ToolInfo,
    ToolOutcome,
    ToolsChanged,
)
from ._config import HostInfo, RestartPolicy, SupervisorConfig, corral_home, quarantine_file
from ._exceptions import (
    CallFailed,
    CallTimeout,
    ExtensionGone,
    ExtensionStopping,
    ManifestError,
    ProtocolViolation,
    SupervisorClosed,
    SupervisorError,
    UnknownCommand,
    UnknownExtension,
    UnknownTool,
)
from ._frames import PROTOCOL_VERSION, ImageBlock, TextBlock
from ._manifest import MANIFEST_NAME, Discovery, ExtensionSpec, Manifest, discover, load_manifest
from ._supervisor import open_supervisor

__all__ = [
    "MANIFEST_NAME",
    "PROTOCOL_VERSION",
    "CallFailed",
    "CallTimeout",
    "CommandInfo",
    "CommandOutcome",
    "Discovery",
    "Displayed",
    "EmitEvent",
    "ExtensionCrashed",
    "ExtensionGone",
    "ExtensionInfo",
    "ExtensionRestarted",
    "ExtensionSpec",
    "ExtensionStarted",
    "ExtensionStats",
    "ExtensionStopped",
    "ExtensionStopping",
    "HostInfo",
    "ImageBlock",
    "InterceptOutcome",
    "Intervention",
    "InterventionKind",
    "Manifest",
    "ManifestError",
    "Notified",
    "ProtocolViolation",
    "Quarantined",
    "ReloadStats",
    "RestartPolicy",
    "SupervisorClient",
    "SupervisorClosed",
    "SupervisorConfig",
    "SupervisorError",
    "SupervisorEvent",
    "TextBlock",
    "ToolInfo",
    "ToolOutcome",
    "ToolsChanged",
    "UnknownCommand",
    "UnknownExtension",
    "UnknownTool",
    "corral_home",
    "discover",
    "load_manifest",
    "open_supervisor",
    "quarantine_file",
]
