"""The built-in tools ``mcp_connect``, ``mcp_disconnect`` and ``mcp_list``.

``mcp_connect`` takes an entry in the shape of ``mcpServers`` (``command`` /
``args`` / ``env``, or ``url`` / ``headers``) plus corral's ``read_only`` paths for
a stdio server. What the agent connects is held to the same policy as a declared
server, and more: its stdio server never gets the network, and ``${VAR}`` is not
substituted (the agent must not route the host's secrets into a command line or
a header). Connections made by the agent last for the session only.
"""

from __future__ import annotations

import json
import typing
from typing import Any

import msgspec

from sandbox import Permissions

from ..._exceptions import ToolError
from ..._providers.base import ToolSpec
from ..base import Progress, ToolKind, ToolRunResult, error_result, text_result
from ..files import decode_args
from .config import Origin, ServerConfig, ServerDecl
from .manager import McpServers, ServerStatus

__all__ = ["MCP_TOOLS", "McpConnectTool", "McpDisconnectTool", "McpListTool", "mcp_tools"]

#: The tool names, in the order the model sees them.
MCP_TOOLS = ("mcp_connect", "mcp_disconnect", "mcp_list")


class _ConnectArgs(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    url: str | None = None
    headers: dict[str, str] = {}
    read_only: list[str] = []


class _NameArgs(msgspec.Struct, frozen=True, kw_only=True):
    name: str


def _summary(status: ServerStatus) -> str:
    lines = [
        f"{status.name} ({status.transport}, {status.origin}): {status.state}"
        + (f" — {status.server_info}" if status.server_info else "")
    ]
    lines.append(f"  target: {status.target}")
    if status.transport == "stdio" and status.sandboxed is not None:
        lines.append(f"  sandboxed: {'yes' if status.sandboxed else 'NO'}")
    lines.append(
        f"  tools ({len(status.tools)} of {status.offered} offered): "
        + (", ".join(status.tools) or "none")
    )
    lines += [f"  skipped {line}" for line in status.skipped]
    if status.restarts:
        lines.append(f"  restarts: {status.restarts}")
    if status.problem:
        lines.append(f"  problem: {status.problem}")
    return "\n".join(lines)


class _Base:
    _spec: ToolSpec

    def __init__(self, servers: McpServers) -> None:
        self._servers = servers

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._servers!r}>"

    @property
    def spec(self) -> ToolSpec:
        """As the model sees it."""
        return self._spec

    #: corral's own (``--tools +mcp``).
    kind = ToolKind.BUILTIN
    owner = ""


@typing.final
class McpConnectTool(_Base):
    """``mcp_connect``: connect an MCP server for this session and register its tools."""

    _spec = ToolSpec(
        name="mcp_connect",
        description=(
            "Connect an MCP server for this session and register its tools (from your next "
            "step). Give `command` (absolute path) with `args`/`env` for a stdio server, which "
            "runs sandboxed without network and sees only the `read_only` paths you list; or "
            "`url` (https; no localhost or private addresses) with `headers` for a streamable "
            "HTTP server. Tools whose names are taken are skipped."
        ),
        schema={
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "A name for the server."},
                "command": {"type": "string", "description": "Absolute path of the program."},
                "args": {"type": "array", "items": {"type": "string"}},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
                "url": {"type": "string", "description": "Streamable HTTP endpoint."},
                "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                "read_only": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Absolute paths a stdio server may read.",
                },
            },
            "required": ["name"],
        },
    )

    async def run(self, call_id: str, args: dict[str, Any], progress: Progress) -> ToolRunResult:
        """Connect; refusals and failures are error results naming the server.

        Cancellation: a half-started server is stopped.
        """
        try:
            parsed = decode_args(args, _ConnectArgs, "mcp_connect")
            config = ServerConfig(
                command=parsed.command,
                args=parsed.args,
                env=parsed.env,
                url=parsed.url,
                headers=parsed.headers,
                permissions=Permissions(network=False, read_only=parsed.read_only),
            )
            await progress(f"connecting {parsed.name}…")
            status = await self._servers.connect(
                ServerDecl(name=parsed.name, config=config, origin=Origin.AGENT)
            )
        except ToolError as exc:
            return error_result(str(exc))
        return text_result(_summary(status))


@typing.final
class McpDisconnectTool(_Base):
    """``mcp_disconnect``: stop a server and drop its tools."""

    _spec = ToolSpec(
        name="mcp_disconnect",
        description="Disconnect an MCP server and remove its tools.",
        schema={
            "type": "object",
            "properties": {"name": {"type": "string", "description": "The server's name."}},
            "required": ["name"],
        },
    )

    async def run(self, call_id: str, args: dict[str, Any], progress: Progress) -> ToolRunResult:
        """Disconnect.

        Cancellation: the server still stops (in its own task).
        """
        try:
            parsed = decode_args(args, _NameArgs, "mcp_disconnect")
        except ToolError as exc:
            return error_result(str(exc))
        if not await self._servers.disconnect(parsed.name):
            names = ", ".join(s.name for s in self._servers.servers()) or "none"
            return error_result(f"no MCP server named {parsed.name!r}; connected: {names}")
        return text_result(f"disconnected {parsed.name}; its tools are gone from your next step")


@typing.final
class McpListTool(_Base):
    """``mcp_list``: the servers of this session, their state and tools."""

    _spec = ToolSpec(
        name="mcp_list",
        description="List the MCP servers of this session with their state and tools.",
        schema={"type": "object", "properties": {"json": {"type": "boolean"}}},
    )

    async def run(self, call_id: str, args: dict[str, Any], progress: Progress) -> ToolRunResult:
        """List (text, or JSON with ``json: true``).

        Cancellation: nothing to undo.
        """
        servers = self._servers.servers()
        if args.get("json") is True:
            return text_result(json.dumps(msgspec.to_builtins(servers)))
        if not servers:
            return text_result("no MCP servers connected")
        return text_result("\n".join(_summary(s) for s in servers))


def mcp_tools(servers: McpServers) -> dict[str, McpConnectTool | McpDisconnectTool | McpListTool]:
    """The three tools over ``servers``, by name."""
    return {
        "mcp_connect": McpConnectTool(servers),
        "mcp_disconnect": McpDisconnectTool(servers),
        "mcp_list": McpListTool(servers),
    }
