"""Agent events: the stream a prompt or a compaction produces.

These are the RPC wire events of seeds/rpc.md (tagged on ``type``) plus corral's
additions ``thinking_delta``, ``ext_notify``, ``ext_display``, ``ext_status``, the
panel events ``ext_panel_open``, ``ext_panel_render`` and ``ext_panel_close``, and
``retry``. The in-process API yields these same Structs; ``corral rpc`` writes them
as JSON lines.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

import msgspec

from ._messages import Block, ImageContent, Message, TextContent, wire_message

__all__ = [
    "AgentEvent",
    "AssistantMessage",
    "AssistantStart",
    "CompactDone",
    "Done",
    "Emit",
    "ErrorEvent",
    "ExtDisplay",
    "ExtNotify",
    "ExtPanelClose",
    "ExtPanelOpen",
    "ExtPanelRender",
    "ExtStatus",
    "Retry",
    "StopReason",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallEvent",
    "ToolProgress",
    "ToolResultEvent",
    "TurnEnd",
    "TurnStart",
    "Usage",
    "UsageTotals",
    "UserMessage",
    "wire_event",
]

StopReason = Literal["end_turn", "tool_use", "length", "error", "aborted", "blocked"]


class _E(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    pass


class TurnStart(_E, frozen=True, tag="turn_start"):
    """Beginning of one model call (one step of the loop)."""

    step: int


class UserMessage(_E, frozen=True, tag="user_message"):
    """The submitted prompt as added to the transcript."""

    content: list[Block]
    time: str


class AssistantStart(_E, frozen=True, tag="assistant_start"):
    """About to stream assistant text."""


class TextDelta(_E, frozen=True, tag="text_delta"):
    """Partial assistant text."""

    delta: str


class ThinkingDelta(_E, frozen=True, tag="thinking_delta"):
    """Partial thinking text of a model asked to reason (corral addition): shown as
    thinking, never part of the answer (``text_delta``) nor of its message's text."""

    delta: str


class ToolCallEvent(_E, frozen=True, tag="tool_call", omit_defaults=True):
    """The model wants to call a tool (``args`` as the model wrote them).

    Sent once the ``tool_call`` interceptors had their say. corral additions, present
    only when an extension intervened: ``ran_args`` are the arguments the tool
    actually receives and ``rewritten_by`` the extensions that rewrote them, in
    order; ``blocked_by`` names the extension that refused the call (it does not
    run; its ``tool_result`` carries the reason).
    """

    id: str
    name: str
    args: dict[str, Any]
    ran_args: dict[str, Any] | None = None
    rewritten_by: list[str] = []
    blocked_by: str | None = None
    #: corral addition: the tool host's one-line rendering of the call (its
    #: ``format_tool_call_preview``), present when it made one.
    preview: str | None = None


class ToolProgress(_E, frozen=True, tag="tool_progress"):
    """A progress line from a running tool.

    A tool host's streamed ``part`` comes with its ``payload`` as ``part`` (corral
    addition, absent otherwise) and as ``text`` (a string as is, anything else as
    compact JSON).
    """

    id: str
    text: str
    part: Any = msgspec.UNSET


class ToolResultEvent(_E, frozen=True, tag="tool_result", omit_defaults=True):
    """A tool finished.

    ``display`` (corral addition, present when there is one) is what the tool host's
    ``to_display_format`` made of the result for people; ``content`` is what the
    model sees.
    """

    id: str
    is_error: bool
    content: list[TextContent | ImageContent]
    display: Any = None


class AssistantMessage(_E, frozen=True, tag="assistant_message"):
    """The final assistant message of a model call, as the user should see it.

    When an ``assistant_message`` interceptor rewrote or suppressed the text, this
    carries the rewrite (or nothing); the transcript keeps the model's original.
    """

    content: list[Block]
    time: str


class UsageTotals(msgspec.Struct, frozen=True, kw_only=True):
    """Token and cost counters."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost_usd: float = 0.0

    def plus(self, usage: UsageTotals | Any) -> UsageTotals:
        """These totals with one call's ``usage`` (anything with the same counters) added."""
        return UsageTotals(
            input=self.input + usage.input,
            output=self.output + usage.output,
            cache_read=self.cache_read + usage.cache_read,
            cache_write=self.cache_write + usage.cache_write,
            cost_usd=self.cost_usd + usage.cost_usd,
        )


class Usage(_E, frozen=True, tag="usage"):
    """Per-call usage plus the session's running totals."""

    input: int
    output: int
    cache_read: int
    cache_write: int
    cost_usd: float
    cumulative: UsageTotals


class TurnEnd(_E, frozen=True, tag="turn_end", omit_defaults=True):
    """One model call finished."""

    stop: StopReason
    error: str | None = None


class Done(_E, frozen=True, tag="done"):
    """The whole prompt or compaction completed (successfully or not)."""


class ErrorEvent(_E, frozen=True, tag="error"):
    """A non-fatal error message."""

    message: str


class CompactDone(_E, frozen=True, tag="compact_done"):
    """Compaction finished."""

    summary: str


class Retry(_E, frozen=True, tag="retry"):
    """A model call failed before any output and is tried again (corral addition)."""

    #: The attempt that starts after the wait (2 for the first retry).
    attempt: int
    delay: float
    #: Short cause: the HTTP status (``"429"``) or what broke.
    reason: str
    #: The whole error.
    error: str


class ExtNotify(_E, frozen=True, tag="ext_notify"):
    """An extension's ``notify`` (corral addition)."""

    extension: str
    level: str
    message: str


class ExtDisplay(_E, frozen=True, tag="ext_display"):
    """A ``display`` note from an extension command (corral addition)."""

    extension: str
    text: str


class ExtStatus(_E, frozen=True, tag="ext_status", omit_defaults=True):
    """An extension started, crashed, restarted, was quarantined, stopped, or was kept
    by a reload (its new version did not start; the running one goes on)."""

    extension: str
    status: Literal["started", "crashed", "restarted", "quarantined", "stopped", "kept"]
    detail: str = ""
    pid: int | None = None
    sandboxed: bool | None = None


class ExtPanelOpen(_E, frozen=True, tag="ext_panel_open"):
    """An extension opened an interactive panel (corral addition): it has the focus;
    send it keys with ``ext_panel_key``, close it with ``ext_panel_close``. Its text is
    bounded and terminal-safe (docs/protocol.md, "Panels")."""

    extension: str
    panel_id: str
    title: str
    lines: list[str]
    footer: str


class ExtPanelRender(_E, frozen=True, tag="ext_panel_render"):
    """The open panel, drawn again by its extension: the whole panel (corral addition)."""

    extension: str
    panel_id: str
    title: str
    lines: list[str]
    footer: str


class ExtPanelClose(_E, frozen=True, tag="ext_panel_close", omit_defaults=True):
    """A panel closed (corral addition): ``by`` ``extension``, ``host`` (a client, the
    user, a newer panel, a host that shows none) or ``exit`` (the extension stopped,
    crashed or was reloaded); ``reason`` says why."""

    extension: str
    panel_id: str
    by: Literal["extension", "host", "exit"]
    reason: str = ""


AgentEvent = (
    TurnStart
    | UserMessage
    | AssistantStart
    | TextDelta
    | ThinkingDelta
    | ToolCallEvent
    | ToolProgress
    | ToolResultEvent
    | AssistantMessage
    | Usage
    | TurnEnd
    | Done
    | ErrorEvent
    | CompactDone
    | Retry
    | ExtNotify
    | ExtDisplay
    | ExtStatus
    | ExtPanelOpen
    | ExtPanelRender
    | ExtPanelClose
)


#: Where the loop sends its events; awaiting it applies back-pressure.
Emit = Callable[[AgentEvent], Awaitable[None]]


def wire_event(event: AgentEvent) -> AgentEvent:
    """``event`` as the wire shows it (RPC, ``--json``): images as byte counts, not base64."""
    if not isinstance(event, UserMessage | AssistantMessage | ToolResultEvent) or not any(
        isinstance(b, ImageContent) and b.data is not None for b in event.content
    ):
        return event
    shown = wire_message(Message(role="user", content=list(event.content), time=""))
    return msgspec.structs.replace(event, content=shown.content)
