"""corral's supervisor: runs extensions and tool hosts as supervised subprocesses.

Open one with :func:`open_supervisor`; talk to it through the
:class:`SupervisorClient` it yields.
"""

from __future__ import annotations

import typing

from ._api import (
    CommandInfo,
    CommandOutcome,
    Displayed,
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
    choice_file,
    corral_home,
    data_dir,
    identity_of,
    log_file,
    quarantine_file,
    ui_file,
)
from ._digest import DigestLimits, TreeDigest, digest_tree, file_sha256
from ._exceptions import (
    CallFailed,
    CallTimeout,
    DirectoryUnhashable,
    ExtensionGone,
    ExtensionStopping,
    IllegalTransition,
    ManifestError,
    ProtocolViolation,
    SupervisorClosed,
    SupervisorError,
    TrustError,
    TrustStoreError,
    UnknownCommand,
    UnknownExtension,
    UnknownTool,
)
from ._frames import PROTOCOL_VERSION, ImageBlock, TextBlock
from ._hostwire import NativeFormat
from ._lifecycle import ExtensionState
from ._lines import LineReader, LineWriter, Oversize
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
    mcp_server_spec,
)
from ._process import ChildProcess, open_child
from ._reap import signal_group
from ._relay import Relay, RelayedProcess
from ._requests import EmitEvent
from ._sdk import corral_tools as toolkit
from ._spawn import SDK_DIR
from ._supervisor import open_supervisor
from ._trust import (
    TrustPin,
    TrustState,
    TrustStore,
    TrustVerdict,
    describe_permissions,
    trust_command,
)
from ._version import corral_version as _corral_version

if typing.TYPE_CHECKING:
    from ._version import VERSION

__all__ = [
    "MANIFEST_NAME",
    "PROTOCOL_VERSION",
    "SDK_DIR",
    "VERSION",
    "CallFailed",
    "CallTimeout",
    "ChildKind",
    "ChildProcess",
    "CommandInfo",
    "CommandOutcome",
    "DigestLimits",
    "DirectoryUnhashable",
    "Discovery",
    "Displayed",
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
    "LineReader",
    "LineWriter",
    "Manifest",
    "ManifestError",
    "NativeFormat",
    "NativeResult",
    "Notified",
    "Oversize",
    "ProtocolViolation",
    "Quarantined",
    "Relay",
    "RelayedProcess",
    "ReloadStats",
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
    "TreeDigest",
    "TrustError",
    "TrustPin",
    "TrustState",
    "TrustStore",
    "TrustStoreError",
    "TrustVerdict",
    "UnknownCommand",
    "UnknownExtension",
    "UnknownTool",
    "choice_file",
    "corral_home",
    "data_dir",
    "describe_permissions",
    "digest_tree",
    "discover",
    "file_sha256",
    "identity_of",
    "load_manifest",
    "log_file",
    "mcp_server_spec",
    "open_child",
    "open_supervisor",
    "quarantine_file",
    "signal_group",
    "toolkit",
    "trust_command",
    "ui_file",
]


def __getattr__(name: str) -> str:
    # VERSION reads the distribution's metadata: only when asked for (PEP 562).
    if name == "VERSION":
        globals()[name] = version = _corral_version()  # later look-ups skip this function
        return version
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
