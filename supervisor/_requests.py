"""What the agent asks of the supervisor: one tagged union of plain data.

Each request is a frozen :class:`msgspec.Struct` tagged on ``"type"``, holding only
data, never a reply slot or a callback, so the same union could be spoken over a
pipe to a supervisor in another process (``msgspec.json.decode(line,
type=Request)``). In this process :class:`~supervisor._client.SupervisorClient`
hands each one to the supervisor, which routes it with one ``match`` and answers
through the :class:`~supervisor._calls.Reply` it returns:

==================  =========================================  ==================
request             what                                       answer
==================  =========================================  ==================
``CallTool``        run an extension tool                      ``ToolOutcome``
``PreviewToolCall`` a tool host's one-line preview of a call    ``str | None``
``InvokeCommand``   run an extension slash command             ``CommandOutcome``
``Intercept``       consult the intercept chain for one event  ``InterceptOutcome``
``EmitEvent``       a lifecycle event for subscribed ones      none (one-way)
``Reload``          start the new versions, swap them in      ``ReloadStats``
``ListExtensions``  status and stats of every extension        ``list[ExtensionInfo]``
``EnableExtension`` lift a quarantine, start again             ``ExtensionInfo``
``StartChild``      supervise a child declared at run time       its ``Relay``
``StopChild``       stop it and forget it                         none
``SetHostInfo``     what later ``hello_ack`` frames report     none (one-way)
``PanelInput``      a key for an extension's open panel         none
``ClosePanel``      close it on the host's side                 none
==================  =========================================  ==================

Why typed calls and not memory channels to a router task: routing never blocks
(it queues a frame for an extension or starts a task in the supervisor's
nursery), and on trio one task switch costs about as much as a whole round trip
to a child process; see ``docs/architecture.md`` for the measured figure.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._api import InterceptKind
from ._manifest import ExtensionSpec

__all__ = [
    "CallTool",
    "ClosePanel",
    "EmitEvent",
    "EnableExtension",
    "Intercept",
    "InvokeCommand",
    "ListExtensions",
    "PanelInput",
    "PreviewToolCall",
    "Reload",
    "Request",
    "SetHostInfo",
    "StartChild",
    "StopChild",
]


class _Req(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every request: tagged on ``type``."""


class CallTool(_Req, frozen=True, tag="call_tool"):
    """Run an extension tool. Fails fast if the extension dies."""

    name: str
    args: dict[str, Any]
    call_id: str = ""


class PreviewToolCall(_Req, frozen=True, tag="preview_tool_call"):
    """The one-line preview of a call a tool host's ``format_tool_call_preview`` makes
    (None: the owner has none, and the caller renders the call its own way)."""

    name: str
    args: dict[str, Any]


class InvokeCommand(_Req, frozen=True, tag="invoke_command"):
    """Run an extension slash command; ``args`` is the rest of the line."""

    name: str
    args: str = ""


class Intercept(_Req, frozen=True, tag="intercept"):
    """Consult the intercept chain for one event.

    ``builtin`` (``tool_call`` only) says the call runs one of the agent's built-in
    tools: only extensions granted ``intercept_builtin`` for it may block or rewrite
    it. It defaults to True so that a caller who does not say is safe.
    """

    event: InterceptKind
    step: int | None = None
    tool_id: str | None = None
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None
    text: str | None = None
    builtin: bool = True


class EmitEvent(_Req, frozen=True, tag="emit_event"):
    """One-way lifecycle event for subscribed extensions (no reply)."""

    event: str
    step: int | None = None
    tool_id: str | None = None
    tool_name: str | None = None
    tool_args: Any = None
    stop: str | None = None
    text: str | None = None


class Reload(_Req, frozen=True, tag="reload"):
    """Re-read manifests; start the new versions beside the running ones; swap."""


class ListExtensions(_Req, frozen=True, tag="list_extensions"):
    """Status and stats of every known extension."""


class EnableExtension(_Req, frozen=True, tag="enable_extension"):
    """Lift a quarantine (or start a stopped extension) in this session."""

    name: str


class SetHostInfo(_Req, frozen=True, tag="set_host_info"):
    """Provider, model and cwd sent in later ``hello_ack`` frames."""

    provider: str
    model: str
    cwd: str


class PanelInput(_Req, frozen=True, tag="panel_input"):
    """A key pressed while ``extension``'s panel ``panel_id`` has the focus: a key name
    of ``panel_key``, or ``rune`` with one printable character in ``text``."""

    extension: str
    panel_id: str
    key: str
    text: str = ""


class ClosePanel(_Req, frozen=True, tag="close_panel"):
    """Close ``extension``'s panel ``panel_id`` on the host's side (the user closed it);
    the extension gets ``panel_close`` (with ``reason``, when there is one)."""

    extension: str
    panel_id: str
    reason: str = ""


class StartChild(_Req, frozen=True, tag="start_child"):
    """Supervise a child declared at run time (a stdio MCP server's spec, see
    :func:`~supervisor._manifest.mcp_server_spec`); answered once it runs, or has
    given up, with its :class:`~supervisor._relay.Relay`."""

    spec: ExtensionSpec


class StopChild(_Req, frozen=True, tag="stop_child"):
    """Stop a child started with :class:`StartChild` and forget it."""

    name: str


Request = (
    CallTool
    | PreviewToolCall
    | InvokeCommand
    | Intercept
    | EmitEvent
    | Reload
    | ListExtensions
    | EnableExtension
    | SetHostInfo
    | StartChild
    | StopChild
    | PanelInput
    | ClosePanel
)
