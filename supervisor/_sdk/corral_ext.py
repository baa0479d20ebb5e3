"""corral_ext: a single-file Python SDK for corral extensions.

An extension is a subprocess that speaks newline-delimited JSON with the host over
its stdin/stdout (the wire format of ``seeds/extensions-phase4.md``). This module
wraps that format so an extension author writes plain functions::

    from corral_ext import Extension, prompt, text_result

    ext = Extension("hello", "1.0.0")

    @ext.command("hello", "say hi")
    def hello(args: str):
        return prompt("Greet me in one short sentence.")

    @ext.tool("shout", "Upper-case a text.", {"type": "object",
              "properties": {"text": {"type": "string"}}, "required": ["text"]})
    def shout(args: dict):
        return text_result(args["text"].upper())

    ext.run()

The host puts the directory holding this file on ``PYTHONPATH`` of Python
extensions, so ``import corral_ext`` just works. It uses the standard library only
and imports nothing heavy (no asyncio, no dataclasses), so extensions start fast.

Guarantees of :meth:`Extension.run`:

* stdout carries protocol frames only: one compact JSON object per line, written
  whole under a lock and flushed. While ``run()`` owns the real stdout, ``print()``
  goes to stderr, so a stray debug print cannot corrupt the stream.
* Every request (``command_invoked``, ``tool_call``, ``event_intercept``) gets
  exactly one answer, even when its handler raises.
* Malformed lines and unknown frame types are reported on stderr and skipped.
* End of stdin ends ``run()`` cleanly; a ``shutdown`` frame is acknowledged with
  ``shutdown_ack`` and ends it too.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from collections.abc import Callable, Iterable
from typing import IO, Any, Final, TypeVar, final

__all__ = [
    "EVENTS",
    "INTERCEPTABLE_EVENTS",
    "PROTOCOL_VERSION",
    "AssistantMessageDecision",
    "Extension",
    "Response",
    "ToolCallDecision",
    "ToolResult",
    "TurnStartDecision",
    "display",
    "error",
    "error_result",
    "image_block",
    "image_result",
    "insert",
    "noop",
    "open_panel",
    "prompt",
    "text_block",
    "text_result",
]

PROTOCOL_VERSION: Final = 1
"""The protocol version this SDK speaks (``hello_ack.protocol_version``)."""

EVENTS: Final = frozenset(
    {"session_start", "turn_start", "turn_end", "tool_call", "assistant_message"}
)
"""Lifecycle events an extension can observe with :meth:`Extension.subscribe`."""

INTERCEPTABLE_EVENTS: Final = ("tool_call", "turn_start", "assistant_message")
"""Events an extension can intercept (block or rewrite)."""

_ACTIONS: Final = ("prompt", "insert", "display", "noop", "open_panel")
_NOTIFY_LEVELS: Final = ("info", "success", "warn", "error")
_DEFAULT_SCHEMA: Final[dict[str, Any]] = {"type": "object", "properties": {}}

JSONObject = dict[str, Any]
Block = dict[str, Any]

_F = TypeVar("_F", bound=Callable[..., Any])


class _Value:
    """Small value-object base: equality and repr over ``__slots__``."""

    __slots__: tuple[str, ...] = ()

    def _items(self) -> tuple[tuple[str, Any], ...]:
        return tuple((name, getattr(self, name)) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Value)
        return self._items() == other._items()

    __hash__ = None  # type: ignore[assignment]  # mutable value objects are unhashable

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self._items())
        return f"{type(self).__name__}({fields})"


# --- command responses --------------------------------------------------------


@final
class Response(_Value):
    """What the host should do after one of our slash commands ran.

    Build one with :func:`prompt`, :func:`insert`, :func:`display`, :func:`noop`,
    :func:`open_panel` or :func:`error` rather than by hand.

    Attributes:
        action: ``"prompt"``, ``"insert"``, ``"display"``, ``"noop"`` or ``"open_panel"``.
        prompt: text submitted as a user message (action ``prompt``).
        insert: text put into the editor (action ``insert``).
        display: text shown as a one-shot note (action ``display``).
        error: shown as a red status line whatever the action, when non-empty.
        panel: the panel to open (action ``open_panel``): ``id``, ``title``,
            ``lines``, ``footer``.
    """

    __slots__ = ("action", "display", "error", "insert", "panel", "prompt")

    def __init__(
        self,
        action: str = "noop",
        *,
        prompt: str = "",
        insert: str = "",
        display: str = "",
        error: str = "",
        panel: JSONObject | None = None,
    ) -> None:
        if action not in _ACTIONS:
            raise ValueError(f"action must be one of {_ACTIONS}, not {action!r}")
        self.action = action
        self.prompt = prompt
        self.insert = insert
        self.display = display
        self.error = error
        self.panel = panel

    def to_frame(self, request_id: Any) -> JSONObject:
        """The ``command_response`` frame answering request ``request_id``."""
        frame: JSONObject = {"type": "command_response", "id": request_id, "action": self.action}
        for key in ("prompt", "insert", "display", "error"):
            value: str = getattr(self, key)
            if value or key == self.action:
                frame[key] = value
        if self.panel is not None:
            frame["open_panel"] = self.panel
        return frame


def prompt(text: str) -> Response:
    """Submit ``text`` as a fresh user message; the agent runs a turn on it."""
    return Response("prompt", prompt=text)


def insert(text: str) -> Response:
    """Insert ``text`` into the user's editor at the cursor, without submitting."""
    return Response("insert", insert=text)


def display(text: str) -> Response:
    """Show ``text`` in the chat as a one-shot note (no model call, not in the transcript)."""
    return Response("display", display=text)


def noop() -> Response:
    """The extension handled the command itself; the host changes nothing."""
    return Response("noop")


def _panel_fields(title: str, lines: Iterable[str], footer: str) -> JSONObject:
    return {"title": title, "lines": [str(line) for line in lines], "footer": footer}


def open_panel(
    panel_id: str, title: str = "", lines: Iterable[str] = (), footer: str = ""
) -> Response:
    """Open an interactive panel ``panel_id``: ``title`` above, one row per line (drawn
    as given, no wrapping), ``footer`` below. While it has the focus the user's keys
    reach :meth:`Extension.on_panel`'s handler; redraw it with
    :meth:`Extension.render_panel`. A host without a screen (``corral run``) answers
    "panel unsupported here" and calls the panel's ``on_close``.
    """
    return Response("open_panel", panel={"id": panel_id, **_panel_fields(title, lines, footer)})


def error(text: str, action: str = "noop") -> Response:
    """Report ``text`` as an error (a red status line); ``action`` still applies."""
    return Response(action, error=text)


# --- tool results -------------------------------------------------------------


def text_block(text: str) -> Block:
    """A ``{"type": "text"}`` content block."""
    return {"type": "text", "text": text}


def image_block(data: bytes | str, mime_type: str = "image/png") -> Block:
    """A ``{"type": "image"}`` content block.

    Args:
        data: raw image bytes (base64-encoded here) or an already base64-encoded str.
        mime_type: the image's MIME type.
    """
    if isinstance(data, bytes | bytearray | memoryview):
        data = base64.b64encode(data).decode("ascii")
    return {"type": "image", "mime_type": mime_type, "data": data}


def _to_block(item: object) -> Block:
    """Normalise one element of a handler's result into a content block."""
    if isinstance(item, str):
        return text_block(item)
    if isinstance(item, dict) and isinstance(item.get("type"), str):
        data = item.get("data")
        if item["type"] == "image" and isinstance(data, bytes | bytearray | memoryview):
            return image_block(bytes(data), str(item.get("mime_type", "image/png")))
        return dict(item)
    raise TypeError(f"a content block must be a str or a dict with a 'type', not {item!r:.80}")


@final
class ToolResult(_Value):
    """The answer to one tool call: content blocks plus an error flag.

    Attributes:
        content: list of ``{"type":"text","text":...}`` /
            ``{"type":"image","mime_type":...,"data":<base64>}`` blocks.
        is_error: marks the call as failed; the model sees the content as the error.
    """

    __slots__ = ("content", "is_error")

    def __init__(self, content: Iterable[Block | str] = (), *, is_error: bool = False) -> None:
        self.content: list[Block] = [_to_block(item) for item in content]
        self.is_error = is_error

    def to_frame(self, request_id: Any) -> JSONObject:
        """The ``tool_result`` frame answering request ``request_id``."""
        frame: JSONObject = {"type": "tool_result", "id": request_id, "content": self.content}
        if self.is_error:
            frame["is_error"] = True
        return frame


def text_result(text: str) -> ToolResult:
    """A successful tool result holding one text block."""
    return ToolResult([text_block(text)])


def error_result(text: str) -> ToolResult:
    """A failed tool result (``is_error``) holding one text block."""
    return ToolResult([text_block(text)], is_error=True)


def image_result(data: bytes | str, mime_type: str = "image/png") -> ToolResult:
    """A successful tool result holding one image (raw bytes or base64 str)."""
    return ToolResult([image_block(data, mime_type)])


def _coerce_tool_result(value: object) -> ToolResult:
    """Accept everything a tool handler may return; raise TypeError otherwise."""
    if isinstance(value, ToolResult):
        return value
    if value is None:
        return ToolResult()
    if isinstance(value, str | dict):
        return ToolResult([value])
    if isinstance(value, list | tuple):
        return ToolResult(value)
    raise TypeError(f"tool handler returned an unsupported {type(value).__name__}")


# --- interception decisions ---------------------------------------------------


@final
class ToolCallDecision(_Value):
    """An interceptor's verdict on a tool call.

    Attributes:
        block: refuse the call; ``reason`` becomes the tool error the model sees.
        reason: refusal text (on block) or a pass-through note.
        modified_args: replacement arguments (a JSON object) the tool will receive
            instead of the model's; ``None`` keeps them. Ignored when blocking.
    """

    __slots__ = ("block", "modified_args", "reason")

    def __init__(self, block: bool = False, reason: str = "", modified_args: Any = None) -> None:
        self.block = block
        self.reason = reason
        self.modified_args = modified_args

    def to_fields(self) -> JSONObject:
        """The decision's fields of an ``event_intercept_response`` frame."""
        fields: JSONObject = {}
        if self.block:
            fields["block"] = True
        if self.reason:
            fields["reason"] = self.reason
        if self.modified_args is not None and not self.block:
            fields["modified_args"] = self.modified_args
        return fields


@final
class TurnStartDecision(_Value):
    """An interceptor's verdict on a turn about to start.

    Attributes:
        block: cancel the turn before the model is called.
        reason: shown to the user as a status line.
    """

    __slots__ = ("block", "reason")

    def __init__(self, block: bool = False, reason: str = "") -> None:
        self.block = block
        self.reason = reason

    def to_fields(self) -> JSONObject:
        """The decision's fields of an ``event_intercept_response`` frame."""
        fields: JSONObject = {}
        if self.block:
            fields["block"] = True
        if self.reason:
            fields["reason"] = self.reason
        return fields


@final
class AssistantMessageDecision(_Value):
    """An interceptor's verdict on the assistant's final text.

    Attributes:
        block: suppress the message for the user.
        reason: shown to the user.
        replace_text: user-visible replacement text; ``None`` keeps the original.
            The transcript always keeps the model's original text. Ignored when blocking.
    """

    __slots__ = ("block", "reason", "replace_text")

    def __init__(
        self, block: bool = False, reason: str = "", replace_text: str | None = None
    ) -> None:
        self.block = block
        self.reason = reason
        self.replace_text = replace_text

    def to_fields(self) -> JSONObject:
        """The decision's fields of an ``event_intercept_response`` frame."""
        fields: JSONObject = {}
        if self.block:
            fields["block"] = True
        if self.reason:
            fields["reason"] = self.reason
        if self.replace_text is not None and not self.block:
            fields["replace_text"] = self.replace_text
        return fields


_Decision = ToolCallDecision | TurnStartDecision | AssistantMessageDecision


def _allowed_pair(value: object) -> tuple[bool, str] | None:
    """Read the Go SDK's ``(allowed, reason)`` shorthand: a bool or a 2-tuple."""
    if isinstance(value, bool):
        return value, ""
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], bool)
        and isinstance(value[1], str)
    ):
        return value[0], value[1]
    return None


def _coerce_decision(event: str, value: object) -> _Decision:
    """Turn whatever an interceptor returned into the decision type of ``event``.

    ``None`` means allow. A bool or an ``(allowed, reason)`` tuple follows the Go SDK's
    ``InterceptToolCall``: **True means allowed**, False blocks. For
    ``assistant_message`` a plain str is the replacement text.
    """
    kind: type[_Decision] = {
        "tool_call": ToolCallDecision,
        "turn_start": TurnStartDecision,
        "assistant_message": AssistantMessageDecision,
    }[event]
    if isinstance(value, kind):
        return value
    if value is None:
        return kind()
    pair = _allowed_pair(value)
    if pair is not None:
        return kind(block=not pair[0], reason=pair[1])
    if kind is AssistantMessageDecision and isinstance(value, str):
        return AssistantMessageDecision(replace_text=value)
    raise TypeError(f"{event} interceptor returned an unsupported {type(value).__name__}")


# --- the extension ------------------------------------------------------------


@final
class _Command:
    __slots__ = ("description", "handler")

    def __init__(self, description: str, handler: Callable[[str], object]) -> None:
        self.description = description
        self.handler = handler


@final
class _Tool:
    __slots__ = ("concurrent", "description", "handler", "schema")

    def __init__(
        self,
        description: str,
        schema: JSONObject,
        handler: Callable[[JSONObject], object],
        concurrent: bool,
    ) -> None:
        self.description = description
        self.schema = schema
        self.handler = handler
        self.concurrent = concurrent


def _encode(frame: JSONObject) -> bytes:
    """One compact, ASCII-only JSON line; raises TypeError/ValueError when not JSON-able."""
    return json.dumps(frame, separators=(",", ":"), allow_nan=False).encode("ascii") + b"\n"


def _excerpt(line: bytes, limit: int = 80) -> str:
    text = line[:limit].decode("utf-8", "replace")
    return repr(text + ("..." if len(line) > limit else ""))


@final
class Extension:
    """One corral extension: register handlers, then call :meth:`run`.

    Args:
        name: must equal the ``name`` in ``extension.json``; sent in ``hello``.
        version: sent in ``hello``.
        capabilities: sent in ``hello``; by default derived from what is registered
            (``commands``, ``tools``, ``events``, ``panels``).

    Attributes:
        hello_ack: the host's ``hello_ack`` frame once it arrived (``protocol_version``,
            ``provider``, ``model``, ``cwd``, ``extension_dir``, ``data_dir``, ...); an
            empty dict before that.
    """

    def __init__(self, name: str, version: str, capabilities: Iterable[str] | None = None) -> None:
        self.name = name
        self.version = version
        self.capabilities: list[str] | None = None if capabilities is None else list(capabilities)
        self.hello_ack: JSONObject = {}
        self._commands: dict[str, _Command] = {}
        self._tools: dict[str, _Tool] = {}
        self._events: list[str] = []
        self._event_handlers: list[tuple[str | None, Callable[[JSONObject], object]]] = []
        self._intercepts: dict[str, Callable[..., object]] = {}
        self._start_callbacks: list[Callable[[], object]] = []
        self._panels: dict[str, tuple[Callable[..., object], Callable[..., object] | None]] = {}
        # One lock makes every frame line-atomic, whichever thread writes it.
        self._write_lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._out: IO[bytes] | None = None
        self._announced = False  # hello ... ready written; later frames go straight out
        self._pending: list[bytes] = []  # frames sent from other threads before that
        self._broken = False
        self._running = False

    def __repr__(self) -> str:
        return f"<Extension {self.name!r} {self.version!r} running={self._running}>"

    # --- registration --------------------------------------------------------

    def command(self, name: str, description: str = "") -> Callable[[_F], _F]:
        """Decorator registering ``fn(args: str)`` as the slash command ``/name``.

        ``args`` is what the user typed after the command name. The handler returns
        a :class:`Response` (see :func:`prompt`, :func:`insert`, :func:`display`,
        :func:`noop`, :func:`error`), a str (shown with action ``display``) or None
        (``noop``). If it raises, the host gets a response whose ``error`` holds the
        exception text.
        """

        def register(fn: _F) -> _F:
            self._commands[name] = _Command(description, fn)
            self._announce_late(
                {"type": "register_command", "name": name, "description": description}
            )
            return fn

        return register

    def tool(
        self,
        name: str,
        description: str,
        schema: JSONObject | None = None,
        *,
        concurrent: bool = False,
    ) -> Callable[[_F], _F]:
        """Decorator registering ``fn(args: dict)`` as the model-callable tool ``name``.

        Args:
            name: tool name (an identifier; built-in tools win name clashes).
            description: what the model is told the tool does.
            schema: JSON Schema of the arguments (``type: object``); default: no arguments.
            concurrent: run each call in its own thread so a slow call does not hold up
                other requests. Default: calls run one at a time in the reading thread.

        The handler returns a :class:`ToolResult` (:func:`text_result`,
        :func:`error_result`, :func:`image_result`), a list of content blocks, or a str
        (one text block). If it raises, the host gets an ``is_error`` result carrying
        the exception text.
        """
        if schema is None:
            schema = dict(_DEFAULT_SCHEMA)
        if not isinstance(schema, dict):
            raise TypeError(f"schema of tool {name!r} must be a dict (a JSON object schema)")

        def register(fn: _F) -> _F:
            self._tools[name] = _Tool(description, schema, fn, concurrent)
            self._announce_late(
                {
                    "type": "register_tool",
                    "name": name,
                    "description": description,
                    "schema": schema,
                }
            )
            return fn

        return register

    def subscribe(self, *events: str) -> None:
        """Observe lifecycle ``events`` (see :data:`EVENTS`); handle them with :meth:`on_event`."""
        added = False
        for event in events:
            if event not in EVENTS:
                self.log(f"warning: subscribing to unknown event {event!r}")
            if event not in self._events:
                self._events.append(event)
                added = True
        if added:
            self._announce_late(self._subscribe_frame())

    def on_event(self, handler: _F) -> _F:
        """Register ``handler(frame: dict)`` for every observed ``event`` frame.

        Usable as a decorator. Observation is one-way: return values are ignored and
        exceptions are logged.
        """
        self._event_handlers.append((None, handler))
        return handler

    def on(self, event: str) -> Callable[[_F], _F]:
        """Decorator: subscribe to ``event`` and call ``handler(frame: dict)`` for it only."""

        def register(fn: _F) -> _F:
            self._event_handlers.append((event, fn))
            self.subscribe(event)
            return fn

        return register

    def intercept_tool_call(self, fn: _F) -> _F:
        """Register ``fn(tool_name: str, args: dict)`` to vet tool calls before they run.

        ``fn`` returns a :class:`ToolCallDecision`, ``None`` (allow), or like the Go
        SDK's ``InterceptToolCall`` a bool or ``(allowed, reason)`` where **True means
        allowed**. A raising interceptor allows the call unchanged. Usable as a decorator.
        """
        return self._intercept("tool_call", fn)

    def intercept_turn_start(self, fn: _F) -> _F:
        """Register ``fn(step: int)`` to gate a turn; returns a :class:`TurnStartDecision`.

        ``None``, a bool or ``(allowed, reason)`` are accepted as for
        :meth:`intercept_tool_call`. Usable as a decorator.
        """
        return self._intercept("turn_start", fn)

    def intercept_assistant_message(self, fn: _F) -> _F:
        """Register ``fn(text: str)`` to vet the assistant's final text.

        Returns an :class:`AssistantMessageDecision`, a str (the replacement text),
        ``None`` (unchanged), a bool or ``(allowed, reason)``. Usable as a decorator.
        """
        return self._intercept("assistant_message", fn)

    def _intercept(self, event: str, fn: _F) -> _F:
        self._intercepts[event] = fn
        self._announce_late(self._subscribe_frame())
        return fn

    def on_panel(
        self,
        panel_id: str,
        on_key: Callable[[str, str], object],
        on_close: Callable[[str], object] | None = None,
    ) -> None:
        """Handle the panel ``panel_id`` (opened with :func:`open_panel`).

        ``on_key(key, text)`` runs for each key the user presses while the panel has
        the focus: ``key`` is ``up``, ``down``, ``left``, ``right``, ``enter``,
        ``tab``, ``backspace``, ``delete``, ``home``, ``end``, ``pageup``,
        ``pagedown``, ``unknown``, or ``rune`` with the character in ``text``.
        ``on_close(reason)`` runs when the host closed the panel (the user pressed
        Esc, another panel replaced it, or the host shows none: ``reason`` says
        which when the host tells). Handlers run on the reading thread, in order.
        """
        self._panels[panel_id] = (on_key, on_close)

    def render_panel(
        self, panel_id: str, title: str = "", lines: Iterable[str] = (), footer: str = ""
    ) -> None:
        """Draw the open panel ``panel_id`` again (an empty ``title`` keeps the title).

        Safe from any thread; a render for a panel that is not open is dropped by the host.
        """
        fields = _panel_fields(title, lines, footer)
        self._write(_encode({"type": "panel_render", "panel_id": panel_id, **fields}))

    def close_panel(self, panel_id: str) -> None:
        """Close the panel ``panel_id`` (its ``on_close`` does not run)."""
        self._write(_encode({"type": "panel_close", "panel_id": panel_id}))

    def on_start(self, fn: _F) -> _F:
        """Register ``fn()`` to run once :attr:`hello_ack` has arrived. Usable as a decorator."""
        self._start_callbacks.append(fn)
        return fn

    # --- output ---------------------------------------------------------------

    def notify(self, message: str, level: str = "info") -> None:
        """Push a note to the user (level ``info``, ``success``, ``warn`` or ``error``;
        ``warning`` is sent as ``warn``, the seed's name).

        Safe from any thread, at any time: frames sent before :meth:`run` has announced
        the extension are held back until right after ``ready``.
        """
        if level == "warning":
            level = "warn"
        if level not in _NOTIFY_LEVELS:
            raise ValueError(f"level must be one of {_NOTIFY_LEVELS}, not {level!r}")
        self._write(_encode({"type": "notify", "level": level, "message": message}))

    def log(self, message: str) -> None:
        """Write ``[name] message`` to stderr, which the host keeps in the extension's log."""
        with self._log_lock:
            try:
                sys.stderr.write(f"[{self.name}] {message}\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass  # nowhere left to log to

    def _log_exception(self, what: str, exc: BaseException) -> None:
        import traceback  # only on the error path: keeps import time small

        details = "".join(traceback.format_exception(exc)).rstrip()
        self.log(f"{what}: {type(exc).__name__}: {exc}\n{details}")

    def _write(self, data: bytes) -> None:
        with self._write_lock:
            if not self._announced:
                self._pending.append(data)
                return
            self._write_locked(data)

    def _write_locked(self, data: bytes) -> None:
        if self._broken or self._out is None:
            return
        try:
            self._out.write(data)
            self._out.flush()
        except (OSError, ValueError) as exc:  # EPIPE, closed file: the host is gone
            self._broken = True
            self.log(f"stdout closed, dropping further frames ({exc})")

    def _reply(self, frame: JSONObject, fallback: JSONObject) -> None:
        """Send ``frame``; if it cannot be encoded, send ``fallback`` so the request is answered."""
        try:
            data = _encode(frame)
        except (TypeError, ValueError) as exc:
            self.log(f"cannot encode {frame.get('type')} reply as JSON ({exc}); sending fallback")
            data = _encode(fallback)
        self._write(data)

    def _announce_late(self, frame: JSONObject) -> None:
        """Send a registration made after ``run()`` announced the extension."""
        with self._write_lock:
            if self._announced:
                self._write_locked(_encode(frame))

    def _subscribe_frame(self) -> JSONObject:
        return {
            "type": "subscribe",
            "events": list(self._events),
            "intercept": list(self._intercepts),
        }

    def _derived_capabilities(self) -> list[str]:
        if self.capabilities is not None:
            return list(self.capabilities)
        caps: list[str] = []
        if self._tools:
            caps.append("tools")
        if self._events or self._intercepts:
            caps.append("events")
        if self._commands or not caps:
            caps.insert(0, "commands")
        if self._panels:
            caps.append("panels")
        return caps

    # --- the protocol loop ----------------------------------------------------

    def run(self, *, stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None) -> None:
        """Speak the protocol until ``shutdown`` or end of stdin.

        Sends ``hello``, every ``register_command`` / ``register_tool``, ``subscribe``
        (when anything is observed or intercepted) and ``ready`` without waiting for
        ``hello_ack`` (a host that never sends it cannot stall registration), then
        dispatches host frames one line at a time.

        Args:
            stdin: binary stream to read frames from (default: the process's stdin).
            stdout: binary stream to write frames to (default: the process's stdout; while
                ``run()`` uses it, ``sys.stdout`` points at stderr so ``print()`` cannot
                corrupt the protocol).
        """
        if self._running:
            raise RuntimeError("Extension.run() is already running")
        self._running = True
        redirect = stdout is None
        saved_stdout = sys.stdout
        out = stdout
        if out is None:
            sys.stdout.flush()
            out = sys.stdout.buffer
            sys.stdout = sys.stderr
        inp = stdin if stdin is not None else sys.stdin.buffer
        try:
            self._announce(out)
            self._read_loop(inp)
        finally:
            if redirect:
                sys.stdout = saved_stdout
            self._running = False

    def _announce(self, out: IO[bytes]) -> None:
        frames: list[JSONObject] = [
            {
                "type": "hello",
                "name": self.name,
                "version": self.version,
                "capabilities": self._derived_capabilities(),
            }
        ]
        for name, cmd in self._commands.items():
            frames.append(
                {"type": "register_command", "name": name, "description": cmd.description}
            )
        for name, tool in self._tools.items():
            frames.append(
                {
                    "type": "register_tool",
                    "name": name,
                    "description": tool.description,
                    "schema": tool.schema,
                }
            )
        if self._events or self._intercepts:
            frames.append(self._subscribe_frame())
        frames.append({"type": "ready"})
        with self._write_lock:
            self._out = out
            # One write for all of it: the host reads the whole announcement at once
            # (one wake-up instead of one per frame).
            self._write_locked(b"".join([*map(_encode, frames), *self._pending]))
            self._announced = True
            self._pending = []

    def _read_loop(self, inp: IO[bytes]) -> None:
        while True:
            try:
                raw = inp.readline()
            except (OSError, ValueError) as exc:
                self.log(f"stdin failed, stopping ({exc})")
                return
            if not raw:
                return  # EOF: the host is done with us
            line = raw.strip()
            if not line:
                continue
            frame = self._parse(line)
            if frame is not None and self._dispatch(frame):
                return

    def _parse(self, line: bytes) -> JSONObject | None:
        try:
            frame = json.loads(line)
        except (ValueError, RecursionError) as exc:
            self.log(f"skipping malformed line {_excerpt(line)}: {exc}")
            return None
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            self.log(f"skipping line without a string 'type': {_excerpt(line)}")
            return None
        return frame

    def _dispatch(self, frame: JSONObject) -> bool:
        """Handle one host frame; True means stop reading."""
        kind = frame["type"]
        if kind == "tool_call":
            tool = self._tools.get(str(frame.get("name")))
            if tool is not None and tool.concurrent:
                threading.Thread(
                    target=self._handle_tool,
                    args=(frame,),
                    name=f"corral-tool-{frame.get('name')}",
                    daemon=True,
                ).start()
            else:
                self._handle_tool(frame)
        elif kind == "command_invoked":
            self._handle_command(frame)
        elif kind == "event_intercept":
            self._handle_intercept(frame)
        elif kind == "event":
            self._handle_event(frame)
        elif kind in ("panel_key", "panel_close"):
            self._handle_panel(kind, frame)
        elif kind == "hello_ack":
            self.hello_ack = frame
            for callback in self._start_callbacks:
                try:
                    callback()
                except Exception as exc:
                    self._log_exception("on_start callback failed", exc)
        elif kind == "shutdown":
            with self._write_lock:
                self._write_locked(_encode({"type": "shutdown_ack"}))
            return True
        else:
            self.log(f"skipping unknown frame type {kind!r}")
        return False

    def _handle_command(self, frame: JSONObject) -> None:
        request_id = frame.get("id", "")
        name = str(frame.get("name", ""))
        args = frame.get("args")
        args = args if isinstance(args, str) else ("" if args is None else str(args))
        command = self._commands.get(name)
        fallback = error(f"/{name}: the extension produced an invalid response")
        if command is None:
            response = error(f"{self.name}: no handler for /{name}")
        else:
            try:
                result = command.handler(args)
                if result is None:
                    response = noop()
                elif isinstance(result, str):
                    response = display(result)
                elif isinstance(result, Response):
                    response = result
                else:
                    raise TypeError(
                        f"command handler returned an unsupported {type(result).__name__}"
                    )
            except BaseException as exc:
                self._log_exception(f"command /{name} failed", exc)
                response = error(f"/{name} failed: {type(exc).__name__}: {exc}")
                if not isinstance(exc, Exception):
                    self._reply(response.to_frame(request_id), fallback.to_frame(request_id))
                    raise
        self._reply(response.to_frame(request_id), fallback.to_frame(request_id))

    def _handle_tool(self, frame: JSONObject) -> None:
        request_id = frame.get("id", "")
        name = str(frame.get("name", ""))
        fallback = error_result(f"{name}: the extension produced a result that is not JSON")
        tool = self._tools.get(name)
        if tool is None:
            result = error_result(f"{self.name}: unknown tool {name!r}")
        else:
            try:
                args = _as_object(frame.get("args"))
                if args is None:
                    result = error_result(f"{name}: arguments must be a JSON object")
                else:
                    result = _coerce_tool_result(tool.handler(args))
            except BaseException as exc:
                self._log_exception(f"tool {name} failed", exc)
                result = error_result(f"{name} failed: {type(exc).__name__}: {exc}")
                if not isinstance(exc, Exception):
                    self._reply(result.to_frame(request_id), fallback.to_frame(request_id))
                    raise
        self._reply(result.to_frame(request_id), fallback.to_frame(request_id))

    def _handle_panel(self, kind: str, frame: JSONObject) -> None:
        handlers = self._panels.get(str(frame.get("panel_id")))
        if handlers is None:
            return  # not ours, or not handled: nothing to answer
        on_key, on_close = handlers
        try:
            if kind == "panel_key":
                text = frame.get("text")
                on_key(str(frame.get("key", "")), text if isinstance(text, str) else "")
            elif on_close is not None:
                reason = frame.get("reason")
                on_close(reason if isinstance(reason, str) else "")
        except Exception as exc:
            self._log_exception(f"{kind} handler failed", exc)

    def _handle_event(self, frame: JSONObject) -> None:
        event = frame.get("event")
        for wanted, handler in self._event_handlers:
            if wanted is None or wanted == event:
                try:
                    handler(frame)
                except Exception as exc:
                    self._log_exception(f"event handler for {event!r} failed", exc)

    def _handle_intercept(self, frame: JSONObject) -> None:
        request_id = frame.get("id", "")
        event = str(frame.get("event", ""))
        allow: JSONObject = {"type": "event_intercept_response", "id": request_id}
        reply = dict(allow)
        fn = self._intercepts.get(event)
        if fn is not None:
            try:
                if event == "tool_call":
                    args = _as_object(frame.get("tool_args"))
                    if args is None:
                        raise TypeError("tool_args is not a JSON object")
                    value = fn(str(frame.get("tool_name", "")), args)
                elif event == "turn_start":
                    step = frame.get("step")
                    value = fn(step if isinstance(step, int) else 0)
                else:
                    text = frame.get("text")
                    value = fn(text if isinstance(text, str) else "")
                reply.update(_coerce_decision(event, value).to_fields())
            except BaseException as exc:
                # A broken interceptor must never wedge the agent: allow, unchanged.
                self._log_exception(f"{event} interceptor failed; allowing", exc)
                if not isinstance(exc, Exception):
                    self._reply(allow, allow)
                    raise
        self._reply(reply, allow)


def _as_object(value: object) -> JSONObject | None:
    """Arguments as a dict: missing means ``{}``, a JSON string is parsed, else None."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None
