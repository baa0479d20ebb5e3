"""The ``corral rpc`` wire server: NDJSON commands in, responses and events out.

The protocol is seeds/rpc.md plus corral's additions (``docs/rpc.md``); one
:class:`~agent._runtime.Runtime` does the work, this module translates:

* one reader task decodes each line into a :data:`~agent._rpc.commands.Command` (a tagged union on
  ``type``, one module-level decoder) and answers it; a line that is not JSON, not
  an object, of an unknown type, with wrong field types, or over the line limit
  gets a ``success:false`` response naming the problem (with the id when one can
  be read), and serving goes on;
* prompts and compactions are queued on the runtime, answered ``started`` when
  accepted; ``ext_*`` commands run one at a time, in order, in their own task, so a
  slow ``/command`` never delays an ``abort``;
* one :class:`~supervisor.lowlevel.LineWriter` owns stdout: a line finding it idle is
  written at once, the others are queued and written by its task, batched.

Ids are kept as raw JSON and echoed byte for byte. End of input lets queued work
finish, then :func:`serve_rpc` returns 0. A stop request (``corral rpc``'s SIGTERM)
is read as the end of input with every job aborted: the client still gets each
job's ending and ``done``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import re
import typing
from typing import Any

import msgspec
import trio

from sandbox.log import get_logger
from supervisor import VERSION, SupervisorError
from supervisor.lowlevel import LineReader, LineWriter, Oversize

from .._drain import Drain
from .._events import AgentEvent, ToolCallEvent, ToolResultEvent, wire_event
from .._exceptions import AgentError
from .._messages import ImageContent, wire_message
from .._runtime import Runtime
from .._tools.base import ToolKind
from .commands import (
    COMMANDS,
    EXT_OPS,
    NULL,
    Abort,
    Clear,
    Command,
    Compact,
    ExtCommand,
    ExtList,
    ExtOp,
    ExtPanelClose,
    ExtPanelKey,
    ExtReload,
    GetMessages,
    GetModels,
    GetState,
    GetTools,
    Hello,
    ImageIn,
    Ping,
    Prompt,
    Response,
    SetModel,
    SetReasoning,
    ToolsClear,
)

__all__ = [
    "DEFAULT_LINE_LIMIT",
    "PROTOCOL_VERSION",
    "SEED_TOKEN_ENV",
    "TOKEN_ENV",
    "serve_rpc",
]

log = get_logger(__name__)

#: Major version of the wire schema (the ``hello`` response's ``protocol_version``).
PROTOCOL_VERSION = 1
#: Longest accepted input line, newline excluded.
DEFAULT_LINE_LIMIT = 16 * 1024 * 1024
#: Environment variable holding the shared secret ``hello`` must present.
TOKEN_ENV = "CORRAL_RPC_TOKEN"
#: The seed's name for it (``zot rpc``), honoured as an alias so that an embedder
#: written for the seed never gets an unauthenticated server by setting only it.
SEED_TOKEN_ENV = "ZOTCORE_RPC_TOKEN"
#: Lines waiting for the writer before producers wait (back-pressure from stdout).
_OUT_BUFFER = 1024
#: Extension commands (``ext_*``) waiting for their turn before the reader waits.
_EXT_BACKLOG = 64


class _IdOnly(msgspec.Struct):
    id: msgspec.Raw = NULL


_decoder: msgspec.json.Decoder[Command] = msgspec.json.Decoder(Command)
_id_decoder = msgspec.json.Decoder(_IdOnly)
_encoder = msgspec.json.Encoder()
_ID_IN_PREFIX = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d[\d.eE+-]{0,40})')


def _id_ok(raw: msgspec.Raw) -> bool:
    first = memoryview(raw)[:1].tobytes()
    return first in (b"n", b'"', b"-") or first.isdigit()


def _bad_id(raw: msgspec.Raw) -> str:
    return f"id must be a string or a number, not {memoryview(raw)[:40].tobytes().decode()}"


#: A response to a bad line: id, command type, problem.
_Bad = tuple[msgspec.Raw, str | None, str]
_AUTH_FAILED = f"authentication failed: the first command must be hello with the token {TOKEN_ENV}"


def _kind(command: Command) -> str:
    return typing.cast(str, type(command).__struct_config__.tag)


def _diagnose(line: bytes, exc: msgspec.DecodeError) -> _Bad:
    """The id, command type and message of a response to a line that did not decode."""
    try:
        value = msgspec.json.decode(line)
    except msgspec.DecodeError as bad:
        return NULL, None, f"not valid JSON: {bad}"
    if not isinstance(value, dict):
        return NULL, None, f"a command must be a JSON object, not {type(value).__name__}"
    ident = _id_decoder.decode(line).id
    if not _id_ok(ident):
        return NULL, None, _bad_id(ident)
    kind = value.get("type")
    if kind is None:
        return ident, None, "missing field `type` (the command name)"
    if not isinstance(kind, str):
        return ident, None, f"`type` must be a string, not {type(kind).__name__}"
    if kind not in COMMANDS:
        return ident, kind, f"unknown command type {kind!r}; known: {', '.join(COMMANDS)}"
    return ident, kind, f"invalid {kind} command: {exc}"


def _images(images: list[ImageIn]) -> list[ImageContent]:
    out = []
    for number, image in enumerate(images, start=1):
        if not image.mime_type.startswith("image/"):
            raise ValueError(f"images[{number - 1}]: mime_type {image.mime_type!r} is not image/*")
        try:
            size = len(base64.b64decode(image.data, validate=True))
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"images[{number - 1}]: data is not valid base64 ({exc})") from None
        out.append(ImageContent(mime_type=image.mime_type, data=image.data, bytes=size))
    return out


class AttributedToolResult(ToolResultEvent, frozen=True, tag="tool_result", omit_defaults=True):
    """``tool_result`` with corral's additive ``extension``: the extension that ran the tool.

    Absent for built-in tools, so a seed client sees exactly the seed's fields.
    """

    extension: str | None = None


def encode_line(frame: AgentEvent | Response) -> bytes:
    """One output line for a response or an event."""
    if not isinstance(frame, Response):
        frame = wire_event(frame)
    return _encoder.encode(frame) + b"\n"


# --- the server ---------------------------------------------------------------------


@typing.final
class _Server:
    def __init__(self, runtime: Runtime, token: str | None, line_limit: int) -> None:
        self._rt = runtime
        self._token = token.encode() if token is not None else None
        self._line_limit = line_limit
        self._authed = token is None
        self._ext_in, self._ext_out = trio.open_memory_channel[tuple[ExtOp, str]](_EXT_BACKLOG)
        self._writer: LineWriter | None = None
        #: The event pump's progress: an ext op's answer waits for what came before.
        self._pumped = Drain()
        #: Tool call id to the extension running it, until its result is sent.
        self._sources: dict[str, str] = {}
        #: Set by a stop request: read nothing more.
        self._stopping = False
        #: Cancelled by a stop request while the reader waits for a line (and only then:
        #: a command being answered is answered whole).
        self._waiting: trio.CancelScope | None = None

    def __repr__(self) -> str:
        return f"<RpcServer authed={self._authed} runtime={self._rt!r}>"

    async def _send(self, line: bytes) -> None:
        assert self._writer is not None
        # stdout gone: nobody to tell (serving stops, see _write).
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._writer.write(line)

    async def _emit(self, event: AgentEvent) -> None:
        if isinstance(event, ToolCallEvent):
            # Looked up when the call starts: a reload while it runs cannot change it.
            tool = self._rt.host.engine.registry.get(event.name)
            if tool is not None and tool.kind in (ToolKind.EXTENSION, ToolKind.TOOL_HOST):
                self._sources[event.id] = tool.owner
        elif isinstance(event, ToolResultEvent):
            source = self._sources.pop(event.id, None)
            if source is not None:
                fields = msgspec.structs.asdict(event)
                event = AttributedToolResult(**fields, extension=source)
        await self._send(encode_line(event))

    async def _respond(
        self, ident: msgspec.Raw, command: str | None, data: Any = None, error: str | None = None
    ) -> None:
        response = Response(
            id=ident, command=command, success=error is None, data=data, error=error
        )
        await self._send(encode_line(response))

    async def _write(self, writer: LineWriter, serving: trio.CancelScope) -> None:
        await writer.run()
        if writer.broken:
            # The client's choice (as `| head` is): stop at once, exit 0, no words.
            log.info("rpc_stdout_closed")
            serving.cancel()

    async def _pump(self, events: trio.MemoryReceiveChannel[AgentEvent]) -> None:
        pumped = self._pumped
        try:
            while True:
                try:
                    event = await pumped.next(events)
                except trio.EndOfChannel:
                    return
                await self._emit(event)
                pumped.handled()
        finally:
            pumped.stopped()

    async def _stop_on(self, stop: trio.Event) -> None:
        await stop.wait()
        log.info("rpc_stop_requested")
        self._stopping = True
        if self._waiting is not None:
            self._waiting.cancel()

    async def serve(
        self, stdin: trio.abc.ReceiveStream, stdout: trio.abc.SendStream, stop: trio.Event | None
    ) -> int:
        status = 0
        self._writer = writer = LineWriter(stdout, _OUT_BUFFER, batch=256)
        async with trio.open_nursery() as io:
            io.start_soon(self._write, writer, io.cancel_scope)
            try:
                with self._rt.events(buffer=_OUT_BUFFER) as ext_events:
                    async with trio.open_nursery() as tasks:
                        if stop is not None:
                            tasks.start_soon(self._stop_on, stop)
                        async with trio.open_nursery() as ops:
                            ops.start_soon(self._serve_ext_ops)
                            with self._ext_in:  # closed at the end: the ext task drains
                                status = await self._read(
                                    LineReader(stdin, self._line_limit), tasks, ext_events
                                )
                            if status:
                                ops.cancel_scope.cancel()
                        if self._stopping:
                            self._rt.abort_all()  # each job still says how it ended
                        if status == 0:
                            await self._rt.join()  # end of input: queued work finishes
                        tasks.cancel_scope.cancel()
            finally:
                writer.close()  # the writer drains what is queued, then ends
        return status

    def _parse(self, item: bytes | Oversize) -> Command | _Bad | None:
        if isinstance(item, Oversize):
            found = _ID_IN_PREFIX.search(item.head)  # the id, if it can be read
            limit = f"exceeds the limit of {self._line_limit} bytes; skipped"
            return (
                msgspec.Raw(found.group(1)) if found else NULL,
                None,
                (f"line of {item.size} bytes {limit}"),
            )
        line = item.strip()
        if not line:
            return None
        try:
            command = _decoder.decode(line)
        except msgspec.DecodeError as exc:
            return _diagnose(line, exc)
        if not _id_ok(command.id):
            return NULL, _kind(command), _bad_id(command.id)
        return command

    async def _read(
        self,
        reader: LineReader,
        tasks: trio.Nursery,
        ext_events: trio.MemoryReceiveChannel[AgentEvent],
    ) -> int:
        if self._authed:
            tasks.start_soon(self._pump, ext_events)
        while not self._stopping:
            with trio.CancelScope() as waiting:
                self._waiting = waiting
                item = await reader.next()
            self._waiting = None
            if waiting.cancelled_caught or item is None:
                break
            parsed = self._parse(item)
            if parsed is None:
                continue
            if isinstance(parsed, tuple):
                log.info("rpc_bad_command", problem=parsed[2])
                await self._respond(*parsed[:2], error=parsed[2])
                if not self._authed:
                    return 1
                continue
            kind = _kind(parsed)
            if not self._authed:
                if not self._check_hello(parsed):
                    log.warning("rpc_auth_failed", command=kind)
                    await self._respond(parsed.id, kind, error=_AUTH_FAILED)
                    return 1
                self._authed = True
                tasks.start_soon(self._pump, ext_events)
            if isinstance(parsed, EXT_OPS):
                await self._ext_in.send((parsed, kind))
            else:
                await self._answer(parsed, kind)
        log.info("rpc_end_of_input")
        return 0

    def _check_hello(self, command: Command) -> bool:
        if not isinstance(command, Hello) or command.token is None or self._token is None:
            return False
        return hmac.compare_digest(command.token.encode(), self._token)

    async def _answer(self, command: Command, kind: str) -> None:
        if isinstance(command, Prompt | Compact):
            await self._accept(command, kind)
            return
        try:
            data = self._immediate(command)
        except (AgentError, ValueError) as exc:  # busy, unknown model, ...
            await self._respond(command.id, kind, error=str(exc))
        else:
            await self._respond(command.id, kind, data=data)

    async def _accept(self, command: Prompt | Compact, kind: str) -> None:
        try:
            images = _images(command.images) if isinstance(command, Prompt) else []
            if isinstance(command, Prompt):
                self._rt.check_reasoning(command.reasoning)
        except (ValueError, AgentError) as exc:
            await self._respond(command.id, kind, error=str(exc))
            return
        state = self._rt.state()
        ahead = state.queued + 1 if state.busy else 0
        # The response goes out before the job is queued, so it always precedes the
        # job's first event.
        await self._respond(command.id, kind, data={"started": True, "position": ahead})
        try:
            if isinstance(command, Prompt):
                self._rt.start_prompt(
                    command.message, images, self._emit, reasoning=command.reasoning
                )
            else:
                self._rt.start_compact(self._emit)
        except AgentError as exc:  # the runtime closed under us
            log.warning("rpc_job_refused", error=str(exc))

    def _immediate(self, command: Command) -> Any:
        rt = self._rt
        if isinstance(command, Ping):
            return {"pong": True}
        if isinstance(command, Abort):
            return {"aborted": rt.abort()}
        if isinstance(command, GetState):
            return rt.state()
        if isinstance(command, GetMessages):
            return {"messages": [wire_message(m) for m in rt.messages()]}
        if isinstance(command, Clear):
            rt.clear()
            return None
        if isinstance(command, SetModel):
            rt.set_model(command.model)
            return {"model": command.model}
        if isinstance(command, GetModels):
            return {"models": rt.models()}
        if isinstance(command, SetReasoning):
            rt.set_reasoning(command.level)
            return {"reasoning": command.level}
        if isinstance(command, GetTools):
            sources = rt.tool_sources()
            tools = [msgspec.structs.asdict(t) for t in rt.tools()]
            kinds = rt.host.engine.registry.kinds()
            return {
                "tools": [
                    {
                        **t,
                        "source": sources.get(t["name"], "builtin"),
                        "kind": kinds.get(t["name"], ToolKind.BUILTIN).value,
                    }
                    for t in tools
                ]
            }
        if isinstance(command, Hello):
            state = rt.state()
            return {
                "protocol_version": PROTOCOL_VERSION,
                "version": VERSION,
                "provider": state.provider,
                "model": state.model,
                "commands": list(COMMANDS),
            }
        raise AssertionError(f"unhandled command {command!r}")  # pragma: no cover

    async def _serve_ext_ops(self) -> None:
        # One at a time, in order: a reload never races a command sent before it.
        async with self._ext_out:
            async for command, kind in self._ext_out:
                await self._ext_op(command, kind)

    async def _ext_op(self, command: ExtOp, kind: str) -> None:
        rt = self._rt
        try:
            data: Any
            if isinstance(command, ExtList):
                data = {"extensions": await rt.extensions()}
            elif isinstance(command, ExtCommand):
                data = await rt.ext_command(command.name, command.args)
            elif isinstance(command, ExtReload):
                data = await rt.ext_reload()
            elif isinstance(command, ToolsClear):
                data = await _tools_clear(rt, command.kind)
            elif isinstance(command, ExtPanelKey):
                c = command
                await rt.ext_panel_key(c.extension, c.panel_id, c.key, c.text)
                data = None
            elif isinstance(command, ExtPanelClose):
                await rt.ext_panel_close(command.extension, command.panel_id)
                data = None
            else:
                data = await rt.ext_enable(command.name)
        except (SupervisorError, AgentError, ValueError) as exc:
            await self._pumped.drained()
            await self._respond(command.id, kind, error=str(exc))
        else:
            # What the extension sent before its answer is written before it.
            await self._pumped.drained()
            await self._respond(command.id, kind, data=data)


async def _tools_clear(rt: Runtime, kind: ToolKind) -> dict[str, Any]:
    """``tools_clear``: remove every dynamic tool, or disconnect every MCP server."""
    host = rt.host
    removed: list[str] = []
    match kind:
        case ToolKind.DYNAMIC:
            if host.dynamic is None:
                raise AgentError("dynamic tools are off in this session (--tools +dynamic)")
            removed = await host.dynamic.clear()
        case ToolKind.MCP:
            if host.mcp is not None:
                for server in host.mcp.servers():
                    if await host.mcp.disconnect(server.name):
                        removed.append(server.name)
        case _:
            raise AgentError(f"tools_clear: kind must be dynamic or mcp, not {kind.value!r}")
    rt.tools()  # the registry drops them now, not at the next step
    return {"kind": kind.value, "removed": removed}


async def serve_rpc(
    runtime: Runtime,
    stdin: trio.abc.ReceiveStream,
    stdout: trio.abc.SendStream,
    *,
    token: str | None = None,
    line_limit: int = DEFAULT_LINE_LIMIT,
    stop: trio.Event | None = None,
) -> int:
    """Serve ``runtime`` over NDJSON until the end of ``stdin`` (or ``stop``).

    Args:
        runtime: the session to serve.
        stdin: where commands come from, one JSON object per line.
        stdout: where responses and events go, one JSON object per line.
        token: when set, the first command must be ``hello`` with this token
            (compared in constant time); otherwise it is refused and serving stops.
        line_limit: longest accepted input line in bytes; longer ones are answered
            with an error and skipped.
        stop: when set, no further command is read (one being answered is answered
            whole), the running and the queued jobs are aborted, and serving ends as
            at the end of input once each job said its ending and ``done``.

    Returns:
        The exit status: 0 after the end of input or a stop (once every queued job
        finished) or when the client closed stdout (serving stops at once), 1 when
        authentication failed.

    Cancellation: stops reading and writing at once; jobs still queued are left to
    the runtime (which ends them when it closes).
    """
    return await _Server(runtime, token, line_limit).serve(stdin, stdout, stop)
