"""Exceptions of the supervisor package.

::

    SupervisorError
    ├── ManifestError            a manifest is missing, malformed or invalid
    ├── SupervisorClosed         the supervisor is not running any more
    ├── UnknownExtension         no extension of that name
    ├── UnknownTool              no extension offers that tool
    ├── UnknownCommand           no extension offers that command
    ├── UnknownPanel             the extension has no open panel of that id
    ├── IllegalTransition        a lifecycle move the transition table forbids (a bug)
    ├── TrustError               trust cannot be checked or recorded
    │   ├── DirectoryUnhashable  ...an extension's directory cannot be digested
    │   └── TrustStoreError      ...the trust store is unreadable, corrupt or unsafe
    ├── NetRefused               the network guard refuses a destination (an address)
    └── NetUnresolved            the network guard cannot resolve a name (in time)
    └── CallFailed               a call reached an extension and did not succeed
        ├── CallTimeout          ...the deadline passed ("it was too slow")
        ├── ExtensionGone        ...the extension died or was stopped first
        │   └── ExtensionStopping    ...because the host is stopping it ("we stopped it")
        └── ProtocolViolation    ...the extension broke the protocol (oversize line, ...)

"It broke" (:class:`ExtensionGone`) and "we stopped it" (:class:`ExtensionStopping`)
are different types so callers can tell a crash from a reload.
"""

from __future__ import annotations

from pathlib import PurePath

__all__ = [
    "CallFailed",
    "CallTimeout",
    "DirectoryUnhashable",
    "ExtensionGone",
    "ExtensionStopping",
    "IllegalTransition",
    "ManifestError",
    "NetRefused",
    "NetUnresolved",
    "ProtocolViolation",
    "SupervisorClosed",
    "SupervisorError",
    "TrustError",
    "TrustStoreError",
    "UnknownCommand",
    "UnknownExtension",
    "UnknownPanel",
    "UnknownTool",
]


class SupervisorError(Exception):
    """Base of every supervisor error."""


class ManifestError(SupervisorError):
    """A manifest cannot be used.

    Attributes:
        path: the manifest file (or directory) at fault.
        field: the offending field, e.g. ``"exec"`` or ``"permissions.read_only[0]"``,
            or ``""`` when the whole file is at fault.
        message: what is wrong and, where possible, how to fix it.
    """

    def __init__(self, path: str, field: str, message: str) -> None:
        where = f"{path}: {field}: " if field else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.field = field
        self.message = message

    @property
    def extension(self) -> str:
        """A name for the extension whose manifest failed: its directory's."""
        p = PurePath(self.path)
        return (p.parent if p.name == "extension.json" else p).name or self.path


class SupervisorClosed(SupervisorError):
    """The supervisor has stopped; no request can be served."""

    def __init__(self) -> None:
        super().__init__("the supervisor is not running")


class UnknownExtension(SupervisorError):
    """No extension has this name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no extension named {name!r}")
        self.name = name


class UnknownTool(SupervisorError):
    """No running extension offers this tool."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no extension offers the tool {name!r}")
        self.name = name


class UnknownCommand(SupervisorError):
    """No running extension offers this command."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no extension offers the command /{name}")
        self.name = name


class UnknownPanel(SupervisorError):
    """The extension has no open panel of this id (never opened, or closed already)."""

    def __init__(self, extension: str, panel_id: str) -> None:
        super().__init__(f"extension {extension!r} has no open panel {panel_id!r}")
        self.extension = extension
        self.panel_id = panel_id


class IllegalTransition(SupervisorError):
    """An extension's state was asked to make a move its transition table forbids.

    Always a bug in corral (see :mod:`supervisor._lifecycle`), never the extension's doing.

    Attributes:
        extension: the extension's name.
        old: the state it was in.
        new: the state it was asked to go to.
    """

    def __init__(self, extension: str, old: str, new: str) -> None:
        super().__init__(f"extension {extension!r}: illegal state change {old} -> {new}")
        self.extension = extension
        self.old = old
        self.new = new


class TrustError(SupervisorError):
    """Trust in an extension cannot be checked or recorded.

    Attributes:
        path: the directory or file at fault.
        reason: what is wrong with it.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class DirectoryUnhashable(TrustError):
    """An extension's directory is too large to digest, unreadable, or changed meanwhile."""


class TrustStoreError(TrustError):
    """The trust store cannot be read or written, is corrupt, or others may write it."""


class NetRefused(SupervisorError):
    """The network guard refused a destination.

    Attributes:
        target: the host (or URL) as given.
        reason: why, e.g. ``"loopback"``.
        address: the offending address, when the refusal is about one.
    """

    def __init__(self, target: str, reason: str, *, address: str | None = None) -> None:
        where = f"{target} ({address})" if address and address != target else target
        super().__init__(f"blocked {where}: {reason}")
        self.target = target
        self.reason = reason
        self.address = address


class NetUnresolved(SupervisorError):
    """The network guard could not resolve a name (no answer, no address, too slow).

    Attributes:
        host: the name.
        reason: what went wrong.
    """

    def __init__(self, host: str, reason: str) -> None:
        super().__init__(f"{host}: {reason}")
        self.host = host
        self.reason = reason


class CallFailed(SupervisorError):
    """A request reached an extension and did not succeed.

    Attributes:
        extension: the extension's name.
        what: the call, e.g. ``"tool weather"`` or ``"command /clock"``.
    """

    def __init__(self, extension: str, what: str, message: str) -> None:
        super().__init__(f"{what} in extension {extension!r}: {message}")
        self.extension = extension
        self.what = what


class CallTimeout(CallFailed):
    """The call's deadline passed."""

    def __init__(self, extension: str, what: str, seconds: float) -> None:
        super().__init__(extension, what, f"no answer within {seconds:g} s")
        self.seconds = seconds


class ExtensionGone(CallFailed):
    """The extension exited (or was refused) before answering.

    Attributes:
        returncode: exit status when known (negative: killed by a signal).
    """

    def __init__(
        self, extension: str, what: str, message: str, *, returncode: int | None = None
    ) -> None:
        super().__init__(extension, what, message)
        self.returncode = returncode


class ExtensionStopping(ExtensionGone):
    """The host is stopping or reloading the extension."""


class ProtocolViolation(CallFailed):
    """The extension answered with something the protocol forbids.

    Attributes:
        excerpt: the first bytes of the offending line.
    """

    def __init__(self, extension: str, what: str, message: str, excerpt: str = "") -> None:
        super().__init__(extension, what, message)
        self.excerpt = excerpt
