"""The tool-host protocol over one incarnation's stdio (seed ``tool-host-protocol.md``, v1).

:class:`ToolHostProtocol` is the :class:`~supervisor._seams.Conversation` of a
tool host: the second kind of supervised child, next to the extension protocol of
:mod:`supervisor._protocol`. Everything else (spawn, sandbox, trust, restart,
quarantine, the shutdown ladder, logs, stats) is the extension's machinery.

* **start-up**, bounded by ``handshake_timeout`` as a whole: ``get_config_schema``
  (the manifest's ``config`` is checked against it, see :mod:`supervisor._schema`),
  ``init({config})`` (its state is kept), then at once ``get_config_schema`` again
  (a runner learns its modules' settings in ``init``), ``get_tool_schemas``,
  ``get_ui_elements``, ``get_tags`` and ``required_tags``. A host that does not get
  through (no answer, an error from a required method, a config that does not fit)
  is refused like an extension without ``hello``: killed, FAILED, not restarted.
  Three round trips for a host with its own ``exec``; corral's runners (``runtime``)
  get all seven requests in one write: they answer in order, and ``get_tool_schemas``
  without a state uses the state their ``init`` made. Answers are judged in order.
* **calls**: ``execute_tool`` carries the state kept so far, unless the host says
  the tool is ``stateless``; calls that carry it go one at a time, and each answer's
  state replaces the kept one (see :mod:`supervisor._hoststate`; the state is kept
  across a crash: the host gets ``init`` again, then the calls carry the state the
  client held). ``part`` events
  reach the caller's :attr:`~supervisor._calls.Reply.on_part` as ``{"part": payload}``.
  A successful result is then offered to ``format_tool_result`` and
  ``to_display_format`` (each an optional method, with ``hook_timeout``) before
  the caller gets it.
* **optional methods**: one answered with an error (any type but
  ``NotInitialized``) is not asked again in this incarnation; a method the host
  lacks means corral's own rendering.
* **tags**: the host's tools are offered only when every ``required_tags`` entry is
  among the ``get_tags`` answer for the current provider and model (asked again
  when they change).

Bad input (a line that is not JSON, a wrong ``v``, an unknown or timed-out id, a
tool whose schema is not an object schema, an oversize line) is written to the
host's log, shown as its problem, counted in its stats, and fails only the call
it names; the host keeps serving.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import msgspec
import trio

from sandbox.log import get_logger

from . import _frames as f
from ._api import NativeResult, ToolOutcome
from ._calls import CallKind, PendingCalls, Reply
from ._config import HostInfo, SupervisorConfig
from ._exceptions import ExtensionGone, ProtocolViolation
from ._hoststate import HostSession, StateTurns
from ._hostwire import (
    OPTIONAL_METHODS,
    ErrorResponse,
    HostErrorType,
    HostEvent,
    HostMessage,
    HostWireError,
    Method,
    OkResponse,
    ProviderNativeToolResult,
    Request,
    decode_execute_value,
    decode_formatted_result,
    decode_host_message,
    decode_tool_schemas,
    encode_request,
    json_excerpt,
    native_text,
    result_content,
)
from ._lines import LineReader, Oversize
from ._protocol import ChildProtocol, Registrations, tool_problem
from ._requests import CallTool, PreviewToolCall
from ._schema import check_schema
from ._seams import Pipe

__all__ = ["ToolHostProtocol"]

log = get_logger(__name__)

#: Problems written to the host's log per incarnation before it goes quiet (still counted).
_COMPLAINT_LIMIT = 20
#: A preview longer than this is cut (it is one line on a terminal).
_PREVIEW_MAX = 500
#: Asked at once after ``init``.
_AFTER_INIT = (
    Method.GET_CONFIG_SCHEMA,
    Method.GET_TOOL_SCHEMAS,
    Method.GET_UI_ELEMENTS,
    Method.GET_TAGS,
    Method.REQUIRED_TAGS,
)
#: Requests of start-up (method, params).
_Asks = list[tuple[Method, dict[str, Any]]]


class Owner(Protocol):
    """What the protocol needs of its owner (:class:`~supervisor._extension.Extension`)."""

    @property
    def name(self) -> str: ...

    def hello_accepted(self, registrations: Registrations) -> None:
        """``init`` succeeded: its registrations are ``registrations`` from now on."""

    def ready(self, how: str) -> None:
        """The host is ready."""

    def registrations_changed(self) -> None:
        """The tools offered changed (tags) after ready."""

    def note(self, text: str, *, problem: bool = False) -> None:
        """Write ``text`` to the host's log; a ``problem`` (something the host sent is
        wrong) is also its status."""


class Host(Protocol):
    """What the protocol needs of the supervisor."""

    def host_info(self) -> HostInfo:
        """The current provider, model and cwd (``get_tags`` gets them)."""


@typing.final
class ToolHostProtocol(ChildProtocol):
    """The tool-host protocol spoken with one incarnation (see the module docstring)."""

    #: End of stdin is a tool host's goodbye: the runners finish running calls and exit.
    goodbye = b""
    #: What an exit before ready says it missed.
    first_step = "answering init"

    def __init__(
        self,
        owner: Owner,
        pipe: Pipe,
        *,
        calls: PendingCalls,
        config: SupervisorConfig,
        host: Host,
        host_config: dict[str, Any],
        session: HostSession,
        ui_cache: Path | None = None,
        pipelined: bool = False,
    ) -> None:
        super().__init__(owner, pipe, calls, config)  # acked: never set (no acknowledgement)
        self._owner: Owner = owner
        self._host = host
        self._host_config = host_config
        self._session = session
        #: Where ``get_ui_elements`` is kept for ``corral ext list --json``.
        self._ui_cache = ui_cache
        self._pipelined = pipelined  # every start-up request in one write (corral's runners)
        #: Optional methods the host answered with an error: not asked again.
        self._lacks: set[Method] = set()
        self._tools: dict[str, f.RegisterTool] = {}
        #: Tools the host says neither read nor change the state.
        self._stateless: set[str] = set()
        self._turns = StateTurns(session, calls, self._send_turn)
        self._required: frozenset[str] = frozenset()
        self._complaints = 0
        #: Problems found during start-up, told once it is over.
        self._early: list[str] = []

    # --- start-up ------------------------------------------------------------------

    async def converse(self, reader: LineReader) -> None:
        """Start-up, then route every line until EOF.

        Cancellation: stops reading where it is.
        """
        timeout = self._config.handshake_timeout
        ready = False
        with trio.move_on_after(timeout):
            ready = await self._start(reader)
        # Told now, so that becoming ready (which clears the status) does not hide them.
        early, self._early = self._early, []
        for problem in early:
            self._owner.note(problem, problem=True)
        if not ready:
            if not self.early_exit and self.refused is None:
                self._refuse(f"start-up (init, get_tool_schemas) not done within {timeout:g} s")
            return
        # After ready, not before: the trip to a worker thread is no part of start-up.
        if self._ui_cache is not None:
            await trio.to_thread.run_sync(self._session.keep_ui, self._ui_cache)
        await self._route(reader)

    async def _start(self, reader: LineReader) -> bool:
        schema: _Asks = [(Method.GET_CONFIG_SCHEMA, {})]
        init: _Asks = [(Method.INIT, {"config": self._host_config})]
        ahead = self._after_init() if self._pipelined else []  # one round trip, or three
        answers = await self._exchange(reader, [*schema, *init, *ahead] if ahead else schema)
        if answers is None or not self._config_fits(answers[0], "before"):
            return False
        if not ahead and (answers := await self._exchange(reader, init)) is None:
            return False
        initialized = answers[1 if ahead else 0]
        if isinstance(initialized, ErrorResponse):
            self._owner.note(f"init: {initialized.logged()}")
            self._refuse(f"init failed: {initialized.describe()}")
            return False
        self._session.initial(initialized.result.state, initialized.result.value)
        after = ahead or self._after_init()
        rest = answers[2:] if ahead else await self._exchange(reader, after)
        return rest is not None and self._finish(after, rest)

    def _after_init(self) -> _Asks:
        """What start-up asks once ``init`` is done (before its answer, when pipelined)."""
        state = {"state": self._session.state} if self._session.state is not None else {}
        params = {Method.GET_TOOL_SCHEMAS: state, Method.GET_TAGS: self._tag_params()}
        return [(m, params.get(m, {})) for m in _AFTER_INIT if m not in self._lacks]

    def _finish(self, asked: _Asks, answered: list[OkResponse | ErrorResponse]) -> bool:
        """Take the answers to :meth:`_after_init`'s requests; ready unless refused."""
        answers = {method: answer for (method, _), answer in zip(asked, answered, strict=True)}
        schema = answers.get(Method.GET_CONFIG_SCHEMA)
        if schema is not None and not self._config_fits(schema, "after"):
            return False
        if not self._take_tools(answers[Method.GET_TOOL_SCHEMAS]):
            return False
        self._session.ui_elements = self._list_of(answers.get(Method.GET_UI_ELEMENTS), None)
        self._required = frozenset(self._strings(answers.get(Method.REQUIRED_TAGS)) or ())
        tags = self._strings(answers.get(Method.GET_TAGS))
        self.registrations.tools = self._offered(tags)
        self._owner.hello_accepted(self.registrations)
        self._ready = True
        self._owner.ready("init")
        return True

    async def _exchange(
        self, reader: LineReader, requests: _Asks
    ) -> list[OkResponse | ErrorResponse] | None:
        """Send ``requests`` at once, read until each is answered; answers in order, None at EOF."""
        waiting: dict[str, int] = {}
        lines: list[bytes] = []
        for index, (asked, params) in enumerate(requests):
            rid = PendingCalls.new_id(CallKind.HOOK)
            waiting[rid] = index
            lines.append(encode_request(Request(id=rid, method=asked, params=params)))
        self._pipe.send(b"".join(lines))  # one write
        answers: list[OkResponse | ErrorResponse | None] = [None] * len(requests)
        while waiting:
            item = await reader.next()
            if item is None:
                self.early_exit = True
                return None
            msg = self._decode(item)
            if msg is None:
                continue
            # (An event is no answer: its id stays waiting.)
            if isinstance(msg, HostEvent) or (index := waiting.pop(msg.id, -1)) < 0:
                self._complain(f"a line for id {msg.id[:64]!r}, which no request of start-up has")
                continue
            method = requests[index][0]
            if isinstance(msg, ErrorResponse) and method in OPTIONAL_METHODS:
                self._lacking(method, msg)
            answers[index] = msg
        return typing.cast(list[OkResponse | ErrorResponse], answers)  # every one answered

    def _config_fits(self, answer: OkResponse | ErrorResponse, when: str) -> bool:
        """Check the manifest's config against the host's schema (refuse if it does not fit)."""
        if not isinstance(answer, OkResponse):
            return True  # no schema: the host's init is the only check
        schema = answer.result.value
        if not isinstance(schema, dict):
            self._complain(f"get_config_schema answered {type(schema).__name__}, not a schema")
            return True
        problems = check_schema(self._host_config, schema)
        if problems:
            self._refuse(
                f"config does not fit the host's schema ({when} init): " + "; ".join(problems)
            )
            return False
        return True

    def _take_tools(self, answer: OkResponse | ErrorResponse) -> bool:
        if isinstance(answer, ErrorResponse):
            self._refuse(f"get_tool_schemas failed: {answer.describe()}")
            return False
        try:
            schemas, problems = decode_tool_schemas(answer.result.value)
        except HostWireError as exc:
            self._refuse(exc.detail)
            return False
        for problem in problems:
            name = f" {problem.name!r}" if problem.name else ""
            self._complain(f"tool #{problem.index}{name} skipped: {problem.detail}")
        for schema in schemas:
            frame = f.RegisterTool(
                name=schema.name, description=schema.description, schema=schema.parameters
            )
            why = tool_problem(frame) or ("listed twice" if schema.name in self._tools else "")
            if why:
                self._complain(f"tool {schema.name[:64]!r} skipped: {why}")
                continue
            self._tools[schema.name] = frame
            if schema.stateless:
                self._stateless.add(schema.name)
        return True

    # --- tags ------------------------------------------------------------------------

    def _tag_params(self) -> dict[str, Any]:
        info = self._host.host_info()
        model = {"id": info.model, "provider": info.provider}
        return {"config": self._host_config, "models": [model]}

    def _offered(self, tags: list[str] | None) -> dict[str, f.RegisterTool]:
        """The tools to offer: all of them, unless a required tag is missing."""
        missing = sorted(self._required - set(tags or ()))
        if not missing:
            return dict(self._tools)
        info = self._host.host_info()
        self._note(
            f"tools not offered to {info.provider}/{info.model}: "
            f"required tags {missing} are not among its tags {sorted(tags or ())}"
        )
        return {}

    def host_changed(self) -> None:
        """The provider or model changed: ask ``get_tags`` again (when it matters)."""
        if not self._ready or not self._required or Method.GET_TAGS in self._lacks:
            return  # nothing required, or no tags to ask for: the offer stays as it is

        def answered(hook: Reply[Any]) -> None:
            msg = hook.value
            self._retag(self._strings(msg) if isinstance(msg, OkResponse) else None)

        self._hook(Method.GET_TAGS, self._tag_params(), answered)

    def _retag(self, tags: list[str] | None) -> None:
        offered = self._offered(tags)
        if offered.keys() != self.registrations.tools.keys():
            self.registrations.tools = offered
            self._owner.registrations_changed()

    # --- calls -------------------------------------------------------------------------

    def send_tool(self, rid: str, req: CallTool, reply: Reply[Any]) -> str | None:
        """Send ``execute_tool`` for call ``rid``, or queue it until it is its turn.

        A tool the host says is stateless goes at once, without the state; every
        other call may change the state and waits for the one before it (see
        :class:`~supervisor._hoststate.StateTurns`).
        """
        if req.name in self._stateless:
            return self.call(rid, self._execute_line(rid, req, False), reply)
        if self._turns.queue(rid, req, reply):
            return None
        return self.call(rid, self._execute_line(rid, req, True), reply)

    def _send_turn(self, reply: Reply[Any], req: CallTool) -> bool:
        """Send a call whose turn came; fail it when it cannot be sent."""
        error = self._pipe.send(self._execute_line(reply.rid, req, True))
        if error is None:
            return True
        self._calls.drop(reply.rid)
        self._calls.counts["errors"] += 1
        reply.fail(ExtensionGone(self._name, reply.what, error))
        return False

    def _execute_line(self, rid: str, req: CallTool, stateful: bool) -> bytes:
        params: dict[str, Any] = {"tool_name": req.name, "arguments": req.args}
        if stateful and self._session.state is not None:
            params["state"] = self._session.state
        return encode_request(Request(id=rid, method=Method.EXECUTE_TOOL, params=params))

    def preview(self, req: PreviewToolCall, reply: Reply[str | None]) -> None:
        """Answer ``reply`` with ``format_tool_call_preview``'s line, or None."""
        if Method.FORMAT_TOOL_CALL_PREVIEW in self._lacks:
            reply.set(None)
            return

        def answered(hook: Reply[Any]) -> None:
            msg = hook.value
            value = msg.result.value if isinstance(msg, OkResponse) else None
            text = value if isinstance(value, str) else None
            if value is not None and text is None:
                self._complain(f"format_tool_call_preview answered {type(value).__name__}")
            reply.set(None if text is None else " ".join(text.split())[:_PREVIEW_MAX])

        params = {"tool_name": req.name, "arguments": req.args, **self._state_param()}
        self._hook(Method.FORMAT_TOOL_CALL_PREVIEW, params, answered)

    def _state_param(self) -> dict[str, Any]:
        state = self._session.state
        return {} if state is None else {"state": state}

    def _hook(
        self, method: Method, params: dict[str, Any], then: Callable[[Reply[Any]], None]
    ) -> None:
        """Ask an optional method; ``then`` gets the answered reply (value: the message)."""
        sent = params.get("state")
        if sent is not None:  # the state it answers is kept if nothing changed it meanwhile
            answered = then

            def then(hook: Reply[Any]) -> None:
                msg = hook.value
                state = msg.result.state if isinstance(msg, OkResponse) else None
                if not self._turns.hook_answered(sent, state):
                    self._note(f"{method} changed the state while calls did: not kept")
                answered(hook)

        hook: Reply[Any] = Reply()
        hook.kind, hook.name, hook.then = CallKind.HOOK, str(method), then
        rid = PendingCalls.new_id(CallKind.HOOK)
        error = self._pipe.send(encode_request(Request(id=rid, method=method, params=params)))
        if error is not None:
            hook.fail(ProtocolViolation(self._name, str(method), error, ""))
            return
        self._calls.add(rid, hook)

    # --- routing -------------------------------------------------------------------------

    def _decode(self, item: bytes | Oversize) -> HostMessage | None:
        """A host message, or None after reporting a bad line (failing the call it names)."""
        if isinstance(item, Oversize):
            problem, fid = self._oversize(item)
            self._bad(problem, fid, item.head)
            return None
        if not item or item.isspace():
            return None
        try:
            msg = decode_host_message(item)
        except HostWireError as exc:
            self._bad(exc.detail, exc.message_id, item)
            return None
        if not msg.id:
            self._bad("empty id", None, item)
            return None
        return msg

    def _bad(self, problem: str, rid: str | None, line: bytes) -> None:
        self._calls.counts["bad_frames"] += 1
        self._complain(f"bad line ({problem}): {f.excerpt(line)}")
        if rid is not None:
            self._calls.violated(rid, problem, f.excerpt(line))

    def _handle(self, item: bytes | Oversize) -> None:
        msg = self._decode(item)
        if msg is None:
            return
        if isinstance(msg, HostEvent):
            self._event(msg)
            return
        reply = self._calls.take_any(msg.id)
        if reply is None:
            self._calls.counts["bad_frames"] += 1
            self._complain(f"answer to unknown id {msg.id[:64]!r} (a call that timed out?)")
            return
        if reply.kind is CallKind.HOOK:
            if isinstance(msg, ErrorResponse):
                self._lacking(Method(reply.name), msg)
            reply.set(msg)
        else:
            self._turns.answered(reply, msg.result.state if isinstance(msg, OkResponse) else None)
            self._tool_answer(reply, msg)

    def _event(self, msg: HostEvent) -> None:
        reply = self._calls.peek(msg.id, CallKind.TOOL)
        if reply is None:
            self._calls.counts["bad_frames"] += 1
            self._complain(f"event for unknown id {msg.id[:64]!r} (a call that ended?)")
            return
        if msg.event.type != "part":
            log.debug("toolhost_event_ignored", type=msg.event.type[:40])
            return
        if reply.on_part is not None:
            reply.on_part({"part": msg.event.payload})

    def _tool_answer(self, reply: Reply[Any], msg: OkResponse | ErrorResponse) -> None:
        if isinstance(msg, ErrorResponse):
            self._calls.counts["errors"] += 1
            self._owner.note(f"{reply.name}: {msg.logged()}")  # the model gets no stack
            reply.set(
                self._outcome(reply, [f.TextBlock(text=f"tool host error: {msg.describe()}")], True)
            )
            return
        raw = msg.result.value
        try:
            value = decode_execute_value(raw)
        except HostWireError as exc:
            self._calls.counts["errors"] += 1
            self._complain(exc.detail)
            reply.fail(ProtocolViolation(self._name, reply.what, exc.detail, exc.excerpt))
            return
        if value.repairs:
            self._note(f"{reply.name}: repaired arguments ({', '.join(value.repairs)})")
        if not value.success:
            self._calls.counts["errors"] += 1
            reply.set(
                self._outcome(reply, [f.TextBlock(text=value.error or "the tool failed")], True)
            )
            return
        self._format(reply, raw, self._outcome(reply, result_content(value.result), False))

    def _outcome(
        self, reply: Reply[Any], content: list[f.ContentBlock], error: bool
    ) -> ToolOutcome:
        return ToolOutcome(content=content, is_error=error, tool=reply.name, extension=self._name)

    def _format(self, reply: Reply[Any], raw: Any, outcome: ToolOutcome) -> None:
        """``format_tool_result``, then ``to_display_format``, then answer ``reply``."""
        if Method.FORMAT_TOOL_RESULT in self._lacks or reply.done:  # done: abandoned
            self._display(reply, raw, outcome)
            return

        def formatted(hook: Reply[Any]) -> None:
            msg = hook.value
            value = msg.result.value if isinstance(msg, OkResponse) else None
            shown = decode_formatted_result(value)
            images = [b for b in outcome.content if isinstance(b, f.ImageBlock)]
            if isinstance(shown, str):
                done = msgspec.structs.replace(outcome, content=[f.TextBlock(text=shown), *images])
            elif isinstance(shown, ProviderNativeToolResult):
                native = NativeResult(format=shown.format.value, content=shown.content)
                text = f.TextBlock(text=native_text(shown.content))
                done = msgspec.structs.replace(outcome, content=[text, *images], native=native)
            else:
                done = outcome
            self._display(reply, raw, done)

        params = {"result": raw, **self._state_param()}
        self._hook(Method.FORMAT_TOOL_RESULT, params, formatted)

    def _display(self, reply: Reply[Any], raw: Any, outcome: ToolOutcome) -> None:
        if Method.TO_DISPLAY_FORMAT in self._lacks or reply.done:
            reply.set(outcome)
            return

        def displayed(hook: Reply[Any]) -> None:
            msg = hook.value
            value = msg.result.value if isinstance(msg, OkResponse) else None
            reply.set(outcome if value is None else msgspec.structs.replace(outcome, display=value))

        text = " ".join(b.text for b in outcome.content if isinstance(b, f.TextBlock))
        params = {"text": text, "result": raw, **self._state_param()}
        self._hook(Method.TO_DISPLAY_FORMAT, params, displayed)

    # --- problems --------------------------------------------------------------------------

    def _lacking(self, method: Method, msg: ErrorResponse) -> None:
        if msg.error.type == HostErrorType.NOT_INITIALIZED:
            return
        self._lacks.add(method)
        if msg.error.type != HostErrorType.UNKNOWN_METHOD:
            self._note(f"{method} answered an error; not asked again: {msg.logged()}")

    def _note(self, text: str) -> None:
        """A fact for the host's log (not a problem)."""
        self._complaints += 1
        if self._complaints <= _COMPLAINT_LIMIT:
            log.info("toolhost_note", note=text)
            self._owner.note(text)

    def _complain(self, problem: str) -> None:
        self._complaints += 1
        if self._complaints <= _COMPLAINT_LIMIT or self._complaints % 1000 == 0:
            log.warning("toolhost_protocol_error", problem=problem)
            if self._ready:
                self._owner.note(problem, problem=True)
            else:
                self._early.append(problem)

    def _list_of(self, msg: OkResponse | ErrorResponse | None, kind: type | None) -> list[Any]:
        if not isinstance(msg, OkResponse):
            return []
        value = msg.result.value
        if not isinstance(value, list):
            self._complain(
                f"expected a list, got {type(value).__name__}: {json_excerpt(value, 80)}"
            )
            return []
        return value if kind is None else [v for v in value if isinstance(v, kind)]

    def _strings(self, msg: OkResponse | ErrorResponse | None) -> list[str] | None:
        if not isinstance(msg, OkResponse):
            return None
        return self._list_of(msg, str)
