"""One MCP server: its owner task, its session, its tools, and calls into it.

:meth:`McpConnection.run` is the owner task (started with ``nursery.start``). It
opens the transport (a supervised child through the :class:`~.launcher.ServerLauncher`,
or a guarded HTTP client), runs the official SDK's ``ClientSession`` over it (the
SDK is anyio-based and runs on trio as it is), initialises, lists the tools (every
page, until the bound), and reports started. Then it waits until it is told to
stop or the server process exits. A stdio server that dies is started again by the
supervisor (its restart policy: backoff, then quarantine) and its tools are listed
again on the new incarnation; one the supervisor gives up on is ``FAILED``. An
HTTP session is not restarted: its calls fail with the HTTP error, which the model
sees.

**Dying fails pending calls at once.** The process's exit closes the session's
read stream (the SDK then fails every pending request), and every call also races
the end of the session it was sent on.

**Discovered tools are bounded** (:func:`~.bounds.bound_tools`: count, names,
description length, schema shape and size) and cannot take a name a built-in,
extension or dynamic tool holds; each skipped tool is named with its reason.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import anyio
import trio

from sandbox.log import get_logger
from supervisor.lowlevel import describe_exit

from ..._providers.base import ToolSpec
from ..._version import __version__
from ..base import Progress, ToolKind, ToolRunResult, error_result, source_of
from ..web.guard import tls_context
from .bounds import McpLimits, bound_tools, convert_result
from .config import Origin, ServerConfig, ServerDecl, Transport, expanded
from .errors import ConnectFailed, McpError, ServerGone
from .http import guarded_client
from .launcher import ServerChild, ServerLauncher, ServerProcess, server_identity
from .policy import McpPolicy

__all__ = ["McpConnection", "McpLimits", "McpTool", "ServerState"]

log = get_logger(__name__)

_MAX_PAGES = 32
#: After the session's stream ends, wait this long for the process's exit status.
_DEATH_GRACE = 1.0


@typing.final
class _Life:
    """One incarnation of a server: when its session ended, and how its process died."""

    def __init__(self) -> None:
        self.ended = trio.Event()
        #: The calls in flight on this incarnation's session (cancelled when it ends).
        self.calls: set[trio.CancelScope] = set()
        self.died = trio.Event()
        #: The server ended the session (closed its stdout or exited), not corral.
        self.by_server = False
        self.death = ""

    def __repr__(self) -> str:
        return f"<_Life ended={self.ended.is_set()} death={self.death!r}>"

    def end(self) -> None:
        """The session is over: every call still waiting on it fails now."""
        self.ended.set()
        for scope in self.calls:
            scope.cancel()


class ServerState(enum.Enum):
    """Where a connection is."""

    #: Starting or dialling, initialising, listing tools.
    CONNECTING = "connecting"
    #: Its tools are registered and callable.
    READY = "ready"
    #: The server died; it starts again after a backoff.
    RESTARTING = "restarting"
    #: Given up (died too often, or could not connect); no tools.
    FAILED = "failed"
    #: Disconnected.
    STOPPED = "stopped"


@typing.final
class McpTool:
    """A tool discovered on an MCP server; source ``mcp:<server>``."""

    def __init__(self, connection: McpConnection, spec: ToolSpec) -> None:
        self._connection = connection
        self._spec = spec

    def __repr__(self) -> str:
        return f"<McpTool {self._spec.name!r} server={self._connection.name!r}>"

    @property
    def spec(self) -> ToolSpec:
        """As the server described it (bounded)."""
        return self._spec

    #: Discovered on an MCP server (source ``mcp:<server>``).
    kind = ToolKind.MCP

    @property
    def owner(self) -> str:
        """The server's name."""
        return self._connection.name

    async def run(self, call_id: str, args: dict[str, Any], progress: Progress) -> ToolRunResult:
        """Call the tool on its server; every failure is an error result.

        Cancellation: the request is abandoned (the SDK tells the server).
        """
        return await self._connection.call(self._spec.name, args)


@typing.final
class McpConnection:
    """One server's connection (see the module docstring).

    Args:
        decl: the server and where it was declared.
        launcher: starts stdio servers.
        policy: checks commands and URLs before anything opens.
        limits: bounds.
        taken: the live registry's tool kinds by name.
        changed: called whenever the tools or the state change.
    """

    def __init__(
        self,
        decl: ServerDecl,
        *,
        launcher: ServerLauncher,
        policy: McpPolicy,
        limits: McpLimits,
        taken: Callable[[], Mapping[str, ToolKind]],
        changed: Callable[[], None],
    ) -> None:
        self.decl = decl
        self.name = decl.name
        self._launcher = launcher
        self._policy = policy
        self._limits = limits
        self._taken = taken
        self._changed = changed
        self.state = ServerState.CONNECTING
        #: Why it is FAILED, or the last death (for ``mcp_list``).
        self.problem = ""
        #: Tools not registered, each with why.
        self.skipped: list[str] = []
        #: Tools the server offered in its last listing.
        self.offered = 0
        self.restarts = 0
        self.pid: int | None = None
        self.sandboxed: bool | None = None
        self.server_info = ""
        self._tools: list[McpTool] = []
        self._session: Any = None
        self._life = _Life()
        self._wake = trio.Event()
        self._stopping = False
        self._started = False
        self._task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED

    def __repr__(self) -> str:
        return f"<McpConnection {self.name!r} state={self.state.value} tools={len(self._tools)}>"

    @property
    def source(self) -> str:
        """``mcp:<name>`` (the source of its tools, in the audit log)."""
        return source_of(ToolKind.MCP, self.name)

    def tools(self) -> list[McpTool]:
        """The registered tools (none unless READY)."""
        return list(self._tools) if self.state is ServerState.READY else []

    @property
    def stopping(self) -> bool:
        """:meth:`stop` was called."""
        return self._stopping

    def stop(self) -> None:
        """Ask the owner task to disconnect (it stops the server and returns)."""
        self._stopping = True
        self._wake.set()

    def _set(self, state: ServerState, problem: str | None = None) -> None:
        self.state = state
        if problem is not None:
            self.problem = problem
        self._changed()

    # --- the owner task ---------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, serve until stopped; follow a stdio server through its restarts.

        ``task_status.started()`` is called once the first connection listed its
        tools; until then any failure is raised to the starter as
        :class:`~.errors.McpError`. Later failures are logged and reflected in
        :attr:`state`; this task never raises after it started. A stdio server is a
        supervised child (the launcher): the supervisor restarts it with backoff and
        quarantines it when it dies too often; each new incarnation is initialised and
        its tools listed again. An HTTP session is served once.

        Cancellation: the session is closed and the server process stopped
        (its ladder, shielded and bounded).
        """
        # Only the user's (or a trusted project's) entries may name host variables:
        # the agent must not pull secrets into a command line or headers.
        agent = self.decl.origin is Origin.AGENT
        config = self.decl.config if agent else expanded(self.decl)
        self._task_status = task_status
        try:
            if config.transport is Transport.STDIO:
                await self._run_stdio(config)
            else:
                await self._attempt(self._serve_http_once(config))
        except McpError as exc:  # the policy refused it, or it never got going
            if not self._started:
                self._set(ServerState.FAILED, str(exc))
            raise
        finally:
            self._session = None
        if self._stopping:
            self._set(ServerState.STOPPED)
        elif config.transport is Transport.HTTP:
            self._set(ServerState.FAILED, self.problem or "the HTTP session ended")

    async def _attempt(self, serving: Coroutine[Any, Any, None]) -> None:
        """Serve one session; a failure before start-up is raised, later ones logged."""
        self._life = _Life()
        self._wake = trio.Event()
        try:
            await serving
        except Exception as exc:
            error = _connect_error(self.name, exc)
            if self._life.death:  # the SDK only saw its stream end; this says why
                error = ConnectFailed(self.name, self._life.death)
            if not self._started:
                self._set(ServerState.FAILED, str(error))
                raise error from None
            self.problem = str(error)
            log.warning("mcp_server_failed", server=self.name, error=self.problem)
        finally:
            self._tools = []
            self._session = None
            self._life.end()

    async def _run_stdio(self, config: ServerConfig) -> None:
        await trio.to_thread.run_sync(self._policy.check_stdio, self.name, config)
        identity = server_identity(self.name, self.decl.origin.value, self.decl.path)
        async with self._launcher.launch(self.name, config, identity) as child:
            while not self._stopping:
                process = await self._next(child)
                if process is None:  # stopping, or the supervisor will not start it again
                    if not self._stopping:
                        why = (
                            f"{child.problem} (last: {self.problem})"
                            if self.problem
                            else child.problem
                        )
                        if not self._started:
                            self._set(ServerState.FAILED, why)
                            raise ConnectFailed(self.name, why)
                        self._set(ServerState.FAILED, f"{why}; not restarted")
                        log.error("mcp_server_given_up", server=self.name, problem=why)
                    return
                if self._started:
                    self.restarts = child.restarts
                    self._set(ServerState.CONNECTING)
                self.pid, self.sandboxed = process.pid, process.sandboxed
                await self._attempt(self._incarnation(process))
                if not self._stopping:
                    self._set(ServerState.RESTARTING)
                    log.info("mcp_server_restarting", server=self.name)

    async def _next(self, child: ServerChild) -> ServerProcess | None:
        """The child's next incarnation, or None once it has none or :meth:`stop` was called."""
        found: list[ServerProcess | None] = [None]

        async def take(scope: trio.CancelScope) -> None:
            found[0] = await child.next()
            scope.cancel()

        self._wake = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(take, nursery.cancel_scope)
            await self._wake.wait()  # set by stop()
            nursery.cancel_scope.cancel()
        return None if self._stopping else found[0]

    async def _incarnation(self, process: ServerProcess) -> None:
        """One incarnation's session; then how it died (before its error is told)."""
        try:
            await self._serve_stdio(process)
        finally:
            await self._ended(process)

    async def _ended(self, process: ServerProcess) -> None:
        """After a session: say how the process died, or end it (corral ended the session)."""
        with trio.CancelScope(shield=True):
            if self._stopping:
                return
            with trio.move_on_after(_DEATH_GRACE):  # its exit status follows its stdout's end
                await process.wait()
            if process.returncode is None:
                # The session ended on our side (a timeout, a line too long): the process
                # goes too, and the supervisor restarts it (its backoff, its quarantine).
                process.kill()
            elif self._life.by_server:
                self._record_death(process, process.returncode)

    async def _serve_stdio(self, process: ServerProcess) -> None:
        from mcp.shared.message import SessionMessage

        read_in, read_out = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_in, write_out = anyio.create_memory_object_stream[SessionMessage](0)
        # Every end is closed on the way out: anyio warns about one left open.
        with read_in, read_out, write_in, write_out:
            await self._run_pumps(process, (read_in, read_out, write_in, write_out))

    async def _run_pumps(
        self,
        process: ServerProcess,
        streams: tuple[Any, Any, Any, Any],
    ) -> None:
        read_in, read_out, write_in, write_out = streams
        async with trio.open_nursery() as nursery:
            nursery.start_soon(process.drain_stderr)
            nursery.start_soon(self._pump_in, process, read_in)
            nursery.start_soon(self._pump_out, process, write_out)
            nursery.start_soon(self._watch_exit, process, read_in)
            try:
                await self._session_over(read_out, write_in)
            finally:
                nursery.cancel_scope.cancel()

    async def _watch_exit(self, process: ServerProcess, read_in: Any) -> None:
        await process.wait()
        self._life.by_server = True
        # The SDK fails every pending request once its read stream ends.
        read_in.close()
        self._wake.set()

    def _record_death(self, process: ServerProcess, status: int) -> None:
        """Say how the process ended, for the calls that failed with it and ``mcp_list``."""
        tail = process.stderr_tail()
        life = self._life
        # The supervisor's reason first: it killed the process (a line over its limit).
        life.death = process.violation or f"exited ({describe_exit(status)})" + (
            f"; last stderr: {tail[-1]}" if tail else ""
        )
        self.problem = life.death
        life.died.set()
        log.warning("mcp_server_exited", server=self.name, status=status, stderr=tail[-3:])

    async def _pump_in(self, process: ServerProcess, read_in: Any) -> None:
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        limit = self._limits.max_line
        buffer = bytearray()
        try:
            while chunk := await process.stdout.receive_some(65536):
                buffer += chunk
                # Only the new bytes are searched: a long line costs linear time.
                end = buffer.rfind(b"\n", len(buffer) - len(chunk))
                lines = bytes(buffer[:end]).split(b"\n") if end >= 0 else []
                del buffer[: end + 1]
                if len(buffer) > limit or any(len(line) > limit for line in lines):
                    # Said as its death is: the SDK only sees its stream end.
                    self._life.death = f"sent a line longer than {limit} bytes"
                    log.warning("mcp_line_too_long", server=self.name)
                    break
                for line in lines:
                    if not line.strip():
                        continue
                    item: Any
                    try:
                        item = SessionMessage(types.jsonrpc_message_adapter.validate_json(line))
                    except ValueError as exc:
                        log.info(
                            "mcp_bad_line",
                            server=self.name,
                            excerpt=line[:120],
                            error=str(exc)[:200],
                        )
                        item = exc
                    await read_in.send(item)
            else:
                self._life.by_server = True  # the end of its stdout
                if process.violation:  # the supervisor ended it: a line over its limit
                    self._life.death = process.violation
        except (trio.ClosedResourceError, trio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        except anyio.BrokenResourceError:
            pass
        finally:
            read_in.close()
            self._wake.set()

    async def _pump_out(self, process: ServerProcess, write_out: Any) -> None:
        try:
            async for message in write_out:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send_all(data.encode() + b"\n")
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self._wake.set()

    async def _serve_http_once(self, config: ServerConfig) -> None:
        await self._policy.check_http(self.name, config)
        ssl_context = await tls_context()
        self.pid = None
        self.sandboxed = None
        await self._serve_http(config.url or "", config.headers, ssl_context)

    async def _serve_http(self, url: str, headers: dict[str, str], ssl_context: Any) -> None:
        from mcp.client.streamable_http import streamable_http_client

        limits = self._limits
        client = guarded_client(
            self._policy.guard,
            ssl_context,
            headers=headers,
            timeout=limits.connect_timeout,
            read_timeout=max(limits.call_timeout, 300.0),
        )
        async with client, streamable_http_client(url, http_client=client) as (read, write):
            await self._session_over(read, write)

    async def _session_over(self, read: Any, write: Any) -> None:
        import mcp_types as types
        from mcp.client.session import ClientSession

        info = types.Implementation(name="corral", version=__version__)
        async with ClientSession(read, write, client_info=info) as session:
            with trio.fail_after(self._limits.connect_timeout):
                result = await session.initialize()
                listed = await self._list(session)
            server = result.server_info
            self.server_info = f"{server.name} {server.version}".strip() if server else ""
            self._tools = self._register(listed)
            self._session = session
            self._set(ServerState.READY, "")
            log.info(
                "mcp_server_ready",
                server=self.name,
                tools=[t.spec.name for t in self._tools],
                skipped=len(self.skipped),
            )
            if not self._started:
                self._started = True
                self._task_status.started()
            if not self._stopping:
                await self._wake.wait()
            if not self._stopping:
                raise ServerGone(self.name, self.problem or "the connection ended")

    async def _list(self, session: Any) -> list[Any]:
        import mcp_types as types

        tools: list[Any] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor or len(tools) > self._limits.max_tools:
                break
        return tools

    def _register(self, listed: list[Any]) -> list[McpTool]:
        # Clashes between servers are settled by McpServers in connection order (the
        # registry may also still list this server's tools of its last incarnation).
        taken = {name: kind for name, kind in self._taken().items() if kind is not ToolKind.MCP}
        specs, self.skipped = bound_tools(listed, self._limits, taken)
        self.offered = len(listed)
        for line in self.skipped[:5]:
            log.warning("mcp_tool_skipped", server=self.name, why=line)
        return [McpTool(self, spec) for spec in specs]

    # --- calls ------------------------------------------------------------------------

    async def call(self, tool: str, args: dict[str, Any]) -> ToolRunResult:
        """Call ``tool``; a dead, restarting or slow server gives an error result.

        Cancellation: the request is abandoned.
        """
        session, life = self._session, self._life
        if session is None or self.state is not ServerState.READY or life.ended.is_set():
            detail = f": {self.problem}" if self.problem else ""
            return error_result(f"MCP server {self.name} is {self.state.value}{detail}")
        result: Any = None
        # Cancelled by the end of the session (a task per call would cost more).
        gone = trio.CancelScope()
        life.calls.add(gone)
        try:
            with trio.move_on_after(self._limits.call_timeout) as timer, gone:
                try:
                    result = await session.call_tool(tool, args)
                except Exception as exc:  # the SDK's MCPError, a transport error
                    result = exc
        finally:
            life.calls.discard(gone)
        if timer.cancelled_caught:
            return error_result(
                f"MCP server {self.name}, tool {tool}: no answer within "
                f"{self._limits.call_timeout:g} s"
            )
        failed = isinstance(result, Exception)
        stdio = self.decl.config.transport is Transport.STDIO
        if failed and stdio and not (self._stopping or life.died.is_set() or life.death):
            # The SDK says "Connection closed" as soon as stdout ends; the exit status
            # and stderr, which follow within moments, say why.
            with trio.move_on_after(_DEATH_GRACE):
                await life.died.wait()
        if gone.cancelled_caught or (failed and (self._stopping or life.death)):
            why = life.death or ("disconnected" if self._stopping else self.problem)
            return error_result(
                f"MCP server {self.name} went away during the call: {why or 'disconnected'}"
            )
        if failed:
            return error_result(f"MCP server {self.name}, tool {tool}: {result}")
        return convert_result(self.name, tool, result, self._limits.max_result)


def _connect_error(name: str, exc: BaseException) -> McpError:
    """One error for a failed connection (the SDK raises exception groups)."""
    if isinstance(exc, McpError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            return _connect_error(name, inner)
    if isinstance(exc, trio.TooSlowError):
        return ConnectFailed(name, "no answer to initialize / tools/list in time")
    return ConnectFailed(name, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
