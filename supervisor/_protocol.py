"""The extension protocol over one incarnation's stdio: handshake, registration, routing.

:class:`ExtensionProtocol` is the :class:`~supervisor._seams.Conversation`
of an extension (seed phase 4, see ``docs/protocol.md``):

* **handshake**: the first line must be a valid ``hello`` naming the manifest's
  extension within ``handshake_timeout`` (raced against the exit: EOF ends the
  wait); anything else refuses the extension (its group is killed). A valid one
  is answered with ``hello_ack``;
* **registration**: ``register_tool`` / ``register_command`` / ``subscribe`` frames
  until ``ready``, or until a quiet period after the last one, capped; each
  incarnation has its own timer, so waiting for ready can never hang;
* **routing**: every later frame is matched on its type: replies resolve the
  pending call with their id, ``notify`` becomes an event, panel frames go to its
  :class:`~supervisor._panels.Panels`, ``shutdown_ack`` cuts
  the shutdown ladder short. A bad line (not JSON, unknown type, oversize) is
  logged with an excerpt, counted, and fails the call it names, if any.

What the protocol changes in its extension (state, registrations) goes through
the small :class:`Owner` interface, so the lifecycle stays the owner's.
"""

from __future__ import annotations

import re
import time
import typing
from collections.abc import Mapping
from typing import Any, Protocol

import msgspec
import trio

from sandbox.log import get_logger

from . import _frames as f
from ._api import CommandOutcome, Displayed, Notified, SupervisorEvent, ToolOutcome
from ._calls import CallKind, PendingCalls, Reply
from ._config import HostInfo, SupervisorConfig
from ._lines import MORE, LineReader, Oversize
from ._panels import Panels
from ._requests import CallTool, PreviewToolCall
from ._seams import Pipe
from ._version import VERSION

__all__ = [
    "ID_RE",
    "INTERCEPTABLE",
    "ChildProtocol",
    "ExtensionProtocol",
    "Owner",
    "Registrations",
    "tool_problem",
]

log = get_logger(__name__)

#: The events an extension may intercept (``subscribe.intercept``).
INTERCEPTABLE = frozenset({"tool_call", "turn_start", "assistant_message"})
_TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
#: Finds the id in the head of a line too long to decode.
ID_RE = re.compile(rb'"id"\s*:\s*"([^"]{1,128})"')
#: Bad frames logged per incarnation before logging goes quiet (they are still counted).
_BAD_FRAME_LOG_LIMIT = 10


@typing.final
class Registrations:
    """What one incarnation registered: tools, commands and subscriptions."""

    __slots__ = ("commands", "events", "intercepts", "tools")

    def __init__(self) -> None:
        self.tools: dict[str, f.RegisterTool] = {}
        self.commands: dict[str, f.RegisterCommand] = {}
        self.events: frozenset[str] = frozenset()
        self.intercepts: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return f"<Registrations tools={sorted(self.tools)} commands={sorted(self.commands)}>"


class Owner(Protocol):
    """What the protocol needs of its extension (:class:`~supervisor._extension.Extension`)."""

    @property
    def name(self) -> str:
        """The manifest's name; ``hello`` must say the same."""
        ...

    def hello_accepted(self, registrations: Registrations) -> None:
        """``hello`` was valid: registrations go to ``registrations`` from now on."""
        ...

    def ready(self, how: str) -> None:
        """The extension is ready (``how``: a ``ready`` frame, the quiet period, the cap)."""
        ...

    def registrations_changed(self) -> None:
        """A registration arrived after ready."""
        ...


class Host(Protocol):
    """What the protocol needs of the supervisor."""

    def host_info(self) -> HostInfo:
        """What ``hello_ack`` reports."""
        ...

    def publish(self, event: SupervisorEvent) -> None:
        """Send an event to every subscriber."""
        ...


class ChildProtocol:
    """What the protocol of every kind of supervised child keeps and does alike:
    its owner, the pipe, the calls, the refusal and the early exit, its registrations.
    """

    def __init__(
        self, owner: Owner, pipe: Pipe, calls: PendingCalls, config: SupervisorConfig
    ) -> None:
        self._owner = owner
        self._name = owner.name
        self._pipe = pipe
        self._calls = calls
        self._config = config
        self.registrations = Registrations()
        #: Set when the child acknowledged the goodbye.
        self.acked = trio.Event()
        #: Why start-up refused the child, if it did.
        self.refused: str | None = None
        #: The child's stdout ended before its start-up was over.
        self.early_exit = False
        self._ready = False
        #: The reader while lines are routed (see :meth:`spin`).
        self._routing: LineReader | None = None
        # Bound here, not only in the owner task's context: a caller spinning for
        # its answer handles lines in its own task (see spin).
        self._log = log.bind(extension=owner.name)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self._name!r} ready={self._ready} refused={self.refused!r}>"
        )

    def _refuse(self, reason: str) -> None:
        """Refuse the child: it is killed, and not restarted."""
        self.refused = reason
        self._log.error("extension_refused", reason=reason)
        self._pipe.kill()

    def _handle(self, item: bytes | Oversize) -> None:
        """Act on one line once start-up is over (each kind its own)."""
        raise NotImplementedError

    def _caught_up(self) -> None:
        """Every line readable now was handled (a kind may act on a burst once, here)."""

    async def _route(self, reader: LineReader) -> None:
        """Route every line until EOF (after start-up).

        The pipe is read directly (see :class:`~supervisor._lines.LineReader`), and
        a caller waiting for an answer may read it too (:meth:`spin`).

        Cancellation: stops reading where it is.
        """
        self._routing = reader
        handle = self._handle
        try:
            while True:
                for line in reader.lines_nowait():
                    handle(line)
                item = reader.next_nowait()
                if item is MORE:
                    self._caught_up()
                    await reader.fill()
                elif item is None:
                    return
                else:
                    handle(item)
        finally:
            self._caught_up()
            self._routing = None

    def call(self, rid: str, line: bytes, reply: Reply[Any]) -> str | None:
        """Send a request and track it as ``rid``; an error text when it cannot be sent.

        With other calls in flight, more lines follow in this scheduler pass (their
        callers were woken together): the line waits for one write with theirs. A
        lone call is written at once and may :meth:`spin` for its answer.
        """
        calls = self._calls
        alone = calls.add(rid, reply)
        error = self._pipe.send(line, coalesce=not alone)
        if error is not None:
            calls.drop(rid)
        elif alone and self._routing is not None and self._config.reply_spin > 0:
            reply.spin = self.spin
        return error

    def spin(self, reply: Reply[Any]) -> None:
        """Read and handle lines without waiting until ``reply`` is answered, for up to
        ``reply_spin`` seconds (see :meth:`Reply.wait <supervisor._calls.Reply.wait>`).

        It runs in the caller's task while the reader task waits for the pipe to
        become readable: both take lines from the one reader, and neither awaits in
        the middle of a line, so each line is handled exactly once, in order.
        """
        reader = self._routing
        if reader is None:
            return
        handle = self._handle
        clock = time.perf_counter
        deadline = clock() + self._config.reply_spin
        while True:
            if reader.read_nowait():
                while (item := reader.next_nowait()) is not MORE:
                    if item is None:
                        return  # the reader task sees the end too
                    handle(item)
                self._caught_up()
                if reply.done:
                    return
            if clock() >= deadline:
                return

    def _oversize(self, item: Oversize) -> tuple[str, str | None]:
        """What is wrong with an oversize line, and the id in its head (if any)."""
        match = ID_RE.search(item.head)
        fid = match.group(1).decode("utf-8", "replace") if match else None
        limit = self._config.max_frame_bytes
        return f"line of {item.size} bytes exceeds the {limit}-byte limit", fid


@typing.final
class ExtensionProtocol(ChildProtocol):
    """The extension protocol spoken with one incarnation (see the module docstring)."""

    goodbye = f.encode_frame(f.Shutdown())
    #: What an exit before the handshake says it missed.
    first_step = "sending hello"

    def __init__(
        self,
        owner: Owner,
        pipe: Pipe,
        *,
        calls: PendingCalls,
        config: SupervisorConfig,
        host: Host,
        extension_dir: str = "",
        data_dir: str = "",
    ) -> None:
        super().__init__(owner, pipe, calls, config)
        self._host = host
        #: The panel it has open (see :mod:`supervisor._panels`).
        self.panels = Panels(owner.name, host.publish, pipe.send, supported=config.panels)
        self._dirs = (extension_dir, data_dir)

    # --- what the owner sends ----------------------------------------------------------

    def send_tool(self, rid: str, req: CallTool, reply: Reply[Any]) -> str | None:
        """Send the ``tool_call`` frame of call ``rid`` (see :meth:`call`)."""
        return self.call(
            rid, f.encode_bare(f.ToolCall(id=rid, name=req.name, args=req.args)) + b"\n", reply
        )

    def preview(self, req: PreviewToolCall, reply: Reply[str | None]) -> None:
        """Extensions have no call previews."""
        reply.set(None)

    def host_changed(self) -> None:
        """Extensions learn the host in ``hello_ack`` only."""

    async def converse(self, reader: LineReader) -> None:
        """Handshake, registration, then route every frame until EOF.

        Cancellation: stops reading where it is.
        """
        if await self._handshake(reader):
            await self._registration(reader)
            await self._route(reader)

    # --- start-up ------------------------------------------------------------------

    def _hello_ack(self, info: HostInfo) -> bytes:
        ack = f.HelloAck(
            corral_version=VERSION,
            zot_version=VERSION,
            provider=info.provider,
            model=info.model,
            cwd=info.cwd,
            extension_dir=self._dirs[0] or msgspec.UNSET,
            data_dir=self._dirs[1] or msgspec.UNSET,
        )
        return f.encode_frame(ack)

    async def _handshake(self, reader: LineReader) -> bool:
        timeout = self._config.handshake_timeout
        # The answer is ready before the hello comes (off the start's critical path);
        # made again if the host changed meanwhile.
        info = self._host.host_info()
        ack = self._hello_ack(info)
        item: bytes | Oversize | None = None
        with trio.move_on_after(timeout):
            item = await reader.next()
            if item is None:
                self.early_exit = True
                return False
        if item is None:
            self._refuse(f"no hello within {timeout:g} s")
            return False
        if isinstance(item, Oversize):
            self._refuse(f"first frame is larger than {self._config.max_frame_bytes} bytes")
            return False
        try:
            frame = f.decode_ext_frame(item)
        except f.FrameError as exc:
            self._refuse(f"first frame is not a valid hello ({exc.detail}): {exc.excerpt}")
            return False
        if not isinstance(frame, f.Hello):
            self._refuse(f"first frame must be hello, got {type(frame).__name__}")
            return False
        if frame.name != self._name:
            self._refuse(f"hello names {frame.name!r} but the manifest names {self._name!r}")
            return False
        self._owner.hello_accepted(self.registrations)
        now = self._host.host_info()
        self._pipe.send(ack if now is info else self._hello_ack(now))
        return True

    async def _registration(self, reader: LineReader) -> None:
        # What came with the hello first, without a wait (an SDK announces hello,
        # registrations and ready in one write): then no deadline is needed.
        while (item := reader.next_nowait()) is not MORE:
            if item is None:
                return
            self._handle(item)
            if self._ready:
                return
        cfg = self._config
        now = trio.current_time()
        cap = now + cfg.ready_cap
        # One scope for the rest, its deadline moved after each frame.
        with trio.CancelScope(deadline=min(cap, now + cfg.ready_quiet)) as scope:
            while True:
                item = await reader.next()
                if item is None:
                    return
                self._handle(item)
                if self._ready:
                    return
                scope.deadline = min(cap, trio.current_time() + cfg.ready_quiet)
        self._mark_ready("quiet period" if trio.current_time() < cap else "cap")

    def _mark_ready(self, how: str) -> None:
        if not self._ready:
            self._ready = True
            self._owner.ready(how)

    # --- routing ---------------------------------------------------------------------

    def _bad_frame(self, message: str, excerpt: str, frame_id: str | None) -> None:
        counts = self._calls.counts
        counts["bad_frames"] += 1
        n = counts["bad_frames"]
        if n <= _BAD_FRAME_LOG_LIMIT or n % 1000 == 0:
            self._log.warning("bad_frame", problem=message, excerpt=excerpt, count=n)
        if frame_id is not None:
            self._calls.violated(frame_id, message, excerpt)

    def _handle(self, item: bytes | Oversize) -> None:
        if isinstance(item, Oversize):
            problem, fid = self._oversize(item)
            self._bad_frame(problem, f.excerpt(item.head), fid)
            return
        try:
            frame = f.decode_ext_bare(item)
        except msgspec.DecodeError:
            self._bad_line(item)
            return
        match frame:
            case f.ToolResult():  # (_tool_result, inlined: the hot path)
                reply = self._calls.take(frame.id, CallKind.TOOL)
                if reply is None:
                    self._bad_frame(f"reply to unknown id {frame.id!r}", frame.id, None)
                    return
                if frame.is_error:
                    self._calls.counts["errors"] += 1
                reply.set(
                    ToolOutcome(
                        content=frame.content,  # the frame is dropped: no copy needed
                        is_error=frame.is_error,
                        tool=reply.name,
                        extension=self._name,
                    )
                )
            case f.EventInterceptResponse():
                reply = self._take(frame.id, CallKind.INTERCEPT)
                if reply is not None:
                    reply.set(frame)
            case f.CommandResponse():
                self._command_response(frame)
            case f.Notify():
                level = frame.seed_level
                event = Notified(extension=self._name, level=level, message=frame.message)
                self._host.publish(event)
            case f.RegisterTool() | f.RegisterCommand() | f.Subscribe():
                self._register(frame)
            case f.Ready():
                self._mark_ready("ready frame")
            case f.PanelRender():
                self.panels.render(frame)
            case f.PanelClose():
                self.panels.closed(frame)
            case f.ShutdownAck():
                self._log.debug("shutdown_ack")
                self.acked.set()
            case f.Hello():
                self._bad_frame("hello sent twice", f.excerpt(item), None)

    def _caught_up(self) -> None:
        # A burst of panel renders becomes one event: its last (see Panels.render).
        if self.panels.pending:
            self.panels.flush()

    def _bad_line(self, item: bytes) -> None:
        """A line that is not a frame: counted and logged, unless it is blank."""
        if item and not item.isspace():
            try:
                f.decode_ext_frame(item)
            except f.FrameError as exc:
                self._bad_frame(exc.detail, exc.excerpt, exc.frame_id)

    def _register(self, frame: f.RegisterTool | f.RegisterCommand | f.Subscribe) -> None:
        regs = self.registrations
        match frame:
            case f.Subscribe():
                unknown = set(frame.intercept) - INTERCEPTABLE
                if unknown:
                    self._log.warning("subscribe_unknown_intercept", events=sorted(unknown))
                regs.events = frozenset(frame.events)
                regs.intercepts = frozenset(e for e in frame.intercept if e in INTERCEPTABLE)
            case f.RegisterTool():
                problem = tool_problem(frame)
                if problem:
                    self._log.warning("tool_rejected", tool=frame.name, problem=problem)
                    return
                regs.tools[frame.name] = frame
            case f.RegisterCommand():
                name = frame.name.lstrip("/")
                if not name or any(c.isspace() for c in name):
                    self._log.warning(
                        "command_rejected", command=frame.name, problem="invalid name"
                    )
                    return
                regs.commands[name] = f.RegisterCommand(name=name, description=frame.description)
        if self._ready:
            self._owner.registrations_changed()

    def _take(self, rid: str, kind: CallKind) -> Reply[Any] | None:
        reply = self._calls.take(rid, kind)
        if reply is None:
            self._bad_frame(f"reply to unknown id {rid!r}", rid, None)
        return reply

    def _command_response(self, frame: f.CommandResponse) -> None:
        reply = self._take(frame.id, CallKind.COMMAND)
        if reply is None:
            return
        action = frame.taken_action
        error = frame.error
        panel = None
        if action == "display" and frame.display:
            self._host.publish(Displayed(extension=self._name, text=frame.display))
        elif action == "open_panel" and frame.open_panel is not None and not error:
            # As the reference: an error opens nothing, and neither does a null spec.
            panel, error = self.panels.opened(frame.open_panel)
        reply.set(
            CommandOutcome(
                action=action,
                prompt=frame.prompt,
                insert=frame.insert,
                display=frame.display,
                error=error,
                extension=self._name,
                panel=panel,
            )
        )


def tool_problem(frame: f.RegisterTool) -> str:
    """Why a tool registration is rejected ("" when it is fine)."""
    if not _TOOL_NAME_RE.match(frame.name):
        return "name is not an identifier"
    schema: Mapping[str, Any] | None = frame.schema if isinstance(frame.schema, dict) else None
    if schema is None or schema.get("type") != "object":
        return "schema must be a JSON object schema with type: object"
    return ""
