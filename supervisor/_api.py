"""What the agent sees of extensions: the values requests return, and the events.

Every type here is a frozen :class:`msgspec.Struct`, so each can cross a process
boundary as JSON unchanged: the RPC server sends them to clients as they are, and a
supervisor in another process could send them too. Requests are in
:mod:`supervisor._requests`; the client that sends them is
:class:`~supervisor._client.SupervisorClient`.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

import msgspec

from ._frames import CommandAction, ContentBlock, NotifyLevel
from ._lifecycle import ExtensionState
from ._manifest import ChildKind

__all__ = [
    "CommandInfo",
    "CommandOutcome",
    "Displayed",
    "EgressRefused",
    "ExtensionCrashed",
    "ExtensionInfo",
    "ExtensionKept",
    "ExtensionRestarted",
    "ExtensionStarted",
    "ExtensionStats",
    "ExtensionStopped",
    "InterceptKind",
    "InterceptOutcome",
    "Intervention",
    "InterventionKind",
    "NativeResult",
    "Notified",
    "Panel",
    "PanelClosed",
    "PanelOpened",
    "PanelRendered",
    "Quarantined",
    "ReloadStats",
    "SupervisorEvent",
    "ToolInfo",
    "ToolOutcome",
    "ToolsChanged",
]

#: The events an extension may intercept.
InterceptKind = Literal["tool_call", "turn_start", "assistant_message"]


# --- what the agent sees of extensions -----------------------------------------


class ToolInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A tool an extension (or a tool host: ``kind``) registered."""

    name: str
    description: str
    schema: dict[str, Any]
    extension: str
    kind: ChildKind = ChildKind.EXTENSION


class CommandInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A slash command an extension registered."""

    name: str
    description: str
    extension: str


class NativeResult(msgspec.Struct, frozen=True, kw_only=True):
    """A tool result in a provider's own shape (a tool host's ``format_tool_result``
    envelope): ``content`` goes to a provider that speaks ``format`` as it is."""

    #: ``openai.chat_completions`` or ``openai.responses``.
    format: str
    content: Any


class ToolOutcome(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Result of a tool call, attributed to the extension that ran it.

    A tool host may add two renderings (``None`` when it has none): ``native``, the
    result in a provider's own shape (``content`` is then its text for every other
    provider), and ``display``, what ``to_display_format`` made of it for people.
    """

    content: list[ContentBlock]
    is_error: bool
    tool: str
    extension: str
    native: NativeResult | None = None
    display: Any = None


class Panel(msgspec.Struct, frozen=True, kw_only=True):
    """An extension's interactive panel as the host shows it: bounded and terminal-safe
    (see ``docs/protocol.md``, "Panels"). ``panel_id`` is the extension's, exact."""

    extension: str
    panel_id: str
    title: str
    lines: list[str]
    footer: str


class CommandOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """An extension's answer to a slash command (the seed's four actions, and
    ``open_panel``: ``panel`` is the panel it opened, None when it did not open)."""

    action: CommandAction
    prompt: str = ""
    insert: str = ""
    display: str = ""
    error: str = ""
    extension: str = ""
    panel: Panel | None = None


class InterventionKind(enum.Enum):
    """What an interceptor did to an event."""

    #: Refused the event (a tool call, a turn, or the assistant text shown).
    BLOCK = "block"
    #: Changed it: ``modified_args`` for a tool call, ``replace_text`` for text.
    REWRITE = "rewrite"


class Intervention(msgspec.Struct, frozen=True, kw_only=True):
    """One interceptor's block or rewrite, applied or ignored: the provenance record.

    Attributes:
        extension: who asked for it.
        kind: block or rewrite.
        applied: False when the supervisor ignored it because the extension lacks
            the ``intercept_builtin`` permission for the built-in tool.
        reason: a block's reason, as the extension gave it.
        args: a tool call's arguments after this rewrite (applied or not).
        text: the user-visible text after this rewrite.
    """

    extension: str
    kind: InterventionKind
    applied: bool = True
    reason: str = ""
    args: dict[str, Any] | None = None
    text: str | None = None


class InterceptOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """The folded answer of an intercept chain.

    Attributes:
        block: some subscriber refused; ``reason`` says why and ``blocked_by`` who.
        args: the tool arguments after every rewrite (``tool_call`` only).
        text: the user-visible text after every rewrite, or None when unchanged
            (``assistant_message`` only).
        consulted: names of the extensions asked, in order.
        interventions: every block and rewrite, in chain order, including those the
            supervisor ignored (``applied=False``).
    """

    block: bool = False
    reason: str = ""
    blocked_by: str = ""
    args: dict[str, Any] | None = None
    text: str | None = None
    consulted: list[str] = []
    interventions: list[Intervention] = []

    @property
    def rewritten_by(self) -> list[str]:
        """Extensions whose rewrites were applied, in chain order."""
        return [
            i.extension
            for i in self.interventions
            if i.applied and i.kind is InterventionKind.REWRITE
        ]


class ReloadStats(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a reload did (``kept_old`` is left out of the JSON when empty).

    Attributes:
        stopped: extensions of the previous generation that were serving and were
            stopped (replaced, disabled or gone).
        loaded: enabled manifests found.
        ready: new versions that became ready (and were swapped in).
        errors: manifests that did not load, and new versions that did not start.
        kept_old: extensions whose new version did not start (or whose manifest no
            longer loads): their previous version keeps running.
    """

    stopped: int
    loaded: int
    ready: int
    errors: list[str]
    kept_old: list[str] = []


class ExtensionStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters and process figures of one extension."""

    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    bad_frames: int = 0
    restarts: int = 0
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_p99_ms: float | None = None
    rss_bytes: int | None = None
    cpu_percent: float | None = None
    open_fds: int | None = None
    uptime_s: float | None = None
    #: Connections its egress proxy made for it (a network list), and refused.
    egress_allowed: int = 0
    egress_refused: int = 0


class ExtensionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Status of one extension (or tool host) as the supervisor sees it.

    ``tools`` and ``commands`` are the ones it runs; names it registered that a
    built-in or an earlier extension holds are ``shadowed_tools`` and
    ``shadowed_commands`` (while it runs). ``ui_elements`` are what a tool host's
    ``get_ui_elements`` answered (as sent; display them as untrusted data).
    """

    name: str
    version: str
    source: str
    path: str
    state: ExtensionState
    enabled: bool
    pid: int | None = None
    sandboxed: bool = False
    backend: str = "none"
    tools: list[str] = []
    commands: list[str] = []
    problem: str = ""
    stats: ExtensionStats = ExtensionStats()
    kind: ChildKind = ChildKind.EXTENSION
    ui_elements: list[Any] = []
    shadowed_tools: list[str] = []
    shadowed_commands: list[str] = []


# --- events ---------------------------------------------------------------------


class _Ev(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    extension: str


class Notified(_Ev, frozen=True, tag="notify"):
    """An extension's ``notify`` frame."""

    level: NotifyLevel
    message: str


class Displayed(_Ev, frozen=True, tag="display"):
    """A ``display`` answer of a command, for the user only."""

    text: str


class ExtensionStarted(_Ev, frozen=True, tag="started"):
    """An extension became ready (first start)."""

    pid: int
    sandboxed: bool
    backend: str
    tools: list[str]
    commands: list[str]
    note: str = ""


class ExtensionRestarted(_Ev, frozen=True, tag="restarted"):
    """A crashed extension is ready again."""

    pid: int
    restarts: int


class ExtensionCrashed(_Ev, frozen=True, tag="crashed"):
    """An extension exited on its own or was refused."""

    returncode: int | None
    signal: str | None
    reason: str
    stderr_tail: list[str]
    restart_in: float | None


class Quarantined(_Ev, frozen=True, tag="quarantined"):
    """An extension crashed too often; it will not be restarted."""

    reason: str
    crashes: int


class ExtensionStopped(_Ev, frozen=True, tag="stopped"):
    """An extension was stopped by the host."""


class ExtensionKept(_Ev, frozen=True, tag="kept"):
    """A reload kept the running version: the new one did not start (``reason``)."""

    pid: int | None
    reason: str


class EgressRefused(_Ev, frozen=True, tag="egress_refused"):
    """A child's egress proxy refused a connection (a destination outside its network
    list, or a name resolving to a local address, or a kind of traffic it never
    carries). ``extension`` is the child's name (``bash``, ``dyn-<tool>`` for the
    agent's own children)."""

    #: What the child asked for: ``host:port``.
    destination: str
    #: Why it was refused.
    reason: str
    #: How it asked: ``connect`` (HTTP CONNECT), ``http`` (plain HTTP) or ``socks``.
    via: str
    #: Refusals of this child not reported one by one just before this one (a flood
    #: is reported at a bounded rate; every refusal is counted in its stats).
    unreported: int = 0


class PanelOpened(_Ev, frozen=True, tag="panel_open"):
    """An extension opened a panel (its command's ``open_panel`` answer); it has the
    focus until it is closed. ``extension`` is ``panel.extension``."""

    panel: Panel


class PanelRendered(_Ev, frozen=True, tag="panel_render"):
    """The open panel was drawn again by its extension (a whole new ``panel``)."""

    panel: Panel


class PanelClosed(_Ev, frozen=True, tag="panel_close"):
    """A panel closed: ``by`` the extension, the host (the user, a newer panel of the
    same extension, a host that shows none) or the extension's exit; ``reason`` says why."""

    panel_id: str
    by: Literal["extension", "host", "exit"]
    reason: str = ""


class ToolsChanged(_Ev, frozen=True, tag="tools_changed"):
    """The set of extension tools or commands changed. ``extension`` is ``"*"``."""

    tools: list[ToolInfo]
    commands: list[CommandInfo]


SupervisorEvent = (
    Notified
    | Displayed
    | ExtensionStarted
    | ExtensionRestarted
    | ExtensionCrashed
    | Quarantined
    | ExtensionStopped
    | ExtensionKept
    | EgressRefused
    | PanelOpened
    | PanelRendered
    | PanelClosed
    | ToolsChanged
)
