"""The MCP servers of a session: a :class:`~agent._tools.base.ToolSet` of kind ``MCP``.

:func:`open_mcp` runs a nursery that owns every connection's task for the whole
session; :meth:`McpServers.connect` checks the policy and starts one (the first
listing done before it returns), :meth:`McpServers.disconnect` stops one,
:meth:`McpServers.start_declared` starts the servers of the config files (the
user's, and the project's that the user trusted) concurrently at session start.
Leaving the block stops every server (each one's ladder, in parallel).

Two servers offering the same tool name: the one connected first keeps it (declared
servers in the order of their files, whichever answers first), the other lists it
as skipped. The order is fixed before anything starts, so it never depends on which
server is faster.
"""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import trio

from sandbox.log import get_logger
from supervisor import NetGuard

from ..._audit import AuditLog, ToolAction
from ..base import ToolKind
from .bounds import McpLimits
from .config import (
    Origin,
    ServerDecl,
    check_config,
    check_server_name,
    load_config,
    project_config_path,
    user_config_path,
)
from .connection import McpConnection, McpTool, ServerState
from .errors import McpConfigError, McpError, PolicyRefused
from .launcher import ServerLauncher
from .policy import McpPolicy
from .trust import McpTrust

__all__ = ["McpServers", "ServerStatus", "declared_servers", "open_mcp"]

log = get_logger(__name__)


class ServerStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One server, for ``mcp_list``, the CLI and RPC."""

    name: str
    #: ``stdio`` or ``http``.
    transport: str
    #: ``user``, ``project`` or ``agent``.
    origin: str
    #: The command line or the URL.
    target: str
    state: str
    tools: list[str] = []
    skipped: list[str] = []
    offered: int = 0
    restarts: int = 0
    pid: int | None = None
    sandboxed: bool | None = None
    server_info: str = ""
    problem: str = ""


def declared_servers(
    home: str | Path, project: str | Path, trust: McpTrust
) -> tuple[list[ServerDecl], list[str]]:
    """The servers to start at session start, and a problem line for each one left out.

    The user's file first; a project server of the same name is left out, and so is
    one the user has not trusted (the line names the command that trusts it). A
    file that cannot be read is a problem line, not an error. Blocking.
    """
    problems: list[str] = []
    chosen: dict[str, ServerDecl] = {}
    for path, origin in (
        (user_config_path(home), Origin.USER),
        (project_config_path(project), Origin.PROJECT),
    ):
        try:
            decls, bad = load_config(path, origin)
        except McpConfigError as exc:
            problems.append(str(exc))
            continue
        problems += [str(exc) for exc in bad]
        for decl in decls:
            if decl.name in chosen:
                problems.append(
                    f"project MCP server {decl.name} ({decl.path}) is not started: the user's "
                    f"server of that name wins ({chosen[decl.name].path})"
                )
                continue
            try:
                why = trust.problem(decl)
            except McpConfigError as exc:
                why = str(exc)
            if why is not None:
                problems.append(why)
                continue
            chosen[decl.name] = decl
    return list(chosen.values()), problems


@typing.final
class McpServers:
    """The connected MCP servers (see the module docstring). Get one from :func:`open_mcp`."""

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        launcher: ServerLauncher,
        policy: McpPolicy,
        limits: McpLimits,
        audit: AuditLog | None = None,
    ) -> None:
        self._nursery = nursery
        self._launcher = launcher
        self.policy = policy
        self.limits = limits
        self._audit = audit
        self._connections: dict[str, McpConnection] = {}
        self._generation = 0
        #: The live registry's tool kinds by name (the host sets it).
        self.lookup: Callable[[], Mapping[str, ToolKind]] = dict
        self._lock = trio.Lock()

    def __repr__(self) -> str:
        return f"<McpServers {list(self._connections)}>"

    @property
    def generation(self) -> int:
        """Bumped whenever a server's tools or state change."""
        return self._generation

    def _bump(self) -> None:
        self._generation += 1

    def _exposed(self) -> list[tuple[McpConnection, list[McpTool], list[str]]]:
        """Each connection with the tools it keeps and those an earlier server holds."""
        holders: dict[str, str] = {}
        out = []
        for conn in self._connections.values():
            kept: list[McpTool] = []
            clashes: list[str] = []
            for tool in conn.tools():
                name = tool.spec.name
                if name in holders:
                    clashes.append(f"{name}: the name is taken (mcp:{holders[name]})")
                else:
                    holders[name] = conn.name
                    kept.append(tool)
            out.append((conn, kept, clashes))
        return out

    def tools(self) -> list[McpTool]:
        """Every ready server's tools, servers in connection order, each name once."""
        tools: list[McpTool] = []
        for conn, kept, clashes in self._exposed():
            tools += kept
            for line in clashes:
                log.warning("mcp_tool_skipped", server=conn.name, why=line)
        return tools

    def connection(self, name: str) -> McpConnection | None:
        """The connection called ``name``."""
        return self._connections.get(name)

    def servers(self) -> list[ServerStatus]:
        """Every server connected in this session (failed ones too)."""
        return [_status(conn, kept, clashes) for conn, kept, clashes in self._exposed()]

    def _status(self, name: str) -> ServerStatus:
        return next(s for s in self.servers() if s.name == name)

    async def connect(self, decl: ServerDecl) -> ServerStatus:
        """Check ``decl`` against the policy, start it and list its tools.

        Raises:
            PolicyRefused: the policy refuses it (nothing was started or dialled).
            McpConfigError: the entry is malformed, or the name is in use.
            McpError: it did not start, initialise or list its tools.

        Cancellation: a half-started server is stopped.
        """
        async with self._lock:
            connection = self._add(decl)
        return await self._start(connection)

    def _add(self, decl: ServerDecl) -> McpConnection:
        """A new connection for ``decl``, last in the connection order (not started)."""
        why = check_server_name(decl.name) or check_config(decl.config)
        if why is not None:
            raise PolicyRefused(decl.name, why)
        existing = self._connections.get(decl.name)
        if existing is not None and existing.state not in (ServerState.FAILED, ServerState.STOPPED):
            raise McpConfigError(
                decl.path or "mcp_connect",
                f"a server named {decl.name} is already connected; disconnect it first",
                server=decl.name,
            )
        self._connections.pop(decl.name, None)  # a failed one gives its place up
        connection = McpConnection(
            decl,
            launcher=self._launcher,
            policy=self.policy,
            limits=self.limits,
            taken=self.lookup,
            changed=self._bump,
        )
        self._connections[decl.name] = connection
        self._bump()
        return connection

    async def _start(self, connection: McpConnection) -> ServerStatus:
        await self._nursery.start(connection.run)
        status = self._status(connection.name)
        if self._audit is not None:
            decl = connection.decl
            detail = f"{decl.origin.value} {decl.config.transport.value} {decl.config.describe()}"
            detail += f"; tools: {', '.join(status.tools) or 'none'}"
            await self._audit.record_tool(
                ToolAction.MCP_CONNECT, decl.name, connection.source, detail=detail
            )
        return status

    async def disconnect(self, name: str) -> bool:
        """Stop the server ``name`` and drop its tools; False when there is none.

        Cancellation: the server's stop goes on in its own task.
        """
        connection = self._connections.pop(name, None)
        if connection is None:
            return False
        connection.stop()
        self._bump()
        if self._audit is not None:
            await self._audit.record_tool(ToolAction.MCP_DISCONNECT, name, connection.source)
        return True

    async def start_declared(self, decls: list[ServerDecl]) -> list[str]:
        """Start ``decls`` at once (earlier ones first for tool names); a line per failure.

        Cancellation: the servers started so far keep running until the session ends.
        """
        problems: list[str] = []

        async def one(connection: McpConnection) -> None:
            try:
                await self._start(connection)
            except McpError as exc:
                problems.append(str(exc))
                log.warning("mcp_server_not_started", server=connection.name, error=str(exc))

        async with self._lock:
            connections = []
            for decl in decls:
                try:
                    connections.append(self._add(decl))
                except McpError as exc:
                    problems.append(str(exc))
        async with trio.open_nursery() as nursery:
            for connection in connections:
                nursery.start_soon(one, connection)
        return problems


def _status(conn: McpConnection, kept: list[McpTool], clashes: list[str]) -> ServerStatus:
    config = conn.decl.config
    return ServerStatus(
        name=conn.name,
        transport=config.transport.value,
        origin=conn.decl.origin.value,
        target=config.describe(),
        state=conn.state.value,
        tools=[t.spec.name for t in kept],
        skipped=[*conn.skipped, *clashes],
        offered=conn.offered,
        restarts=conn.restarts,
        pid=conn.pid,
        sandboxed=conn.sandboxed,
        server_info=conn.server_info,
        problem=conn.problem,
    )


@asynccontextmanager
async def open_mcp(
    launcher: ServerLauncher,
    guard: NetGuard,
    *,
    limits: McpLimits | None = None,
    audit: AuditLog | None = None,
) -> AsyncIterator[McpServers]:
    """A session's MCP servers; every one is stopped when the block ends.

    Args:
        launcher: starts stdio servers.
        guard: the network guard of HTTP servers (its policy holds the allowances).
        limits: bounds (the defaults otherwise).
        audit: where connections are recorded.

    Cancellation: every server is stopped (its ladder, shielded and bounded).
    """
    async with trio.open_nursery() as nursery:
        servers = McpServers(
            nursery,
            launcher=launcher,
            policy=McpPolicy(guard),
            limits=limits or McpLimits(),
            audit=audit,
        )
        try:
            yield servers
        finally:
            for connection in list(servers._connections.values()):
                connection.stop()
            nursery.cancel_scope.cancel()
