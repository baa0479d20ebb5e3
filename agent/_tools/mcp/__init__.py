"""MCP connections: tools on Model Context Protocol servers, behind a policy gate.

Servers are declared ahead of time (:mod:`.config`: ``mcpServers`` files per user
and per project, project ones only once trusted, :mod:`.trust`) or connected by
the agent (``mcp_connect``, :mod:`.tools`). The policy (:mod:`.policy`) is checked
before any process or socket opens; HTTP connections dial through the web tools'
network guard (:mod:`.http`); stdio servers are supervised children, confined
and restarted like extensions (:mod:`.launcher`). Each connection
(:mod:`.connection`) speaks the official ``mcp`` SDK on trio, bounds what it
registers (:mod:`.bounds`), and fails pending calls at once when its server dies.
:func:`open_mcp` holds a session's servers (:mod:`.manager`).
"""

from __future__ import annotations

from .bounds import McpLimits, bound_tools, convert_result
from .config import (
    CONFIG_NAME,
    Origin,
    ServerConfig,
    ServerDecl,
    Transport,
    load_config,
    project_config_path,
    user_config_path,
)
from .connection import McpConnection, McpTool, ServerState
from .errors import ConnectFailed, McpConfigError, McpError, PolicyRefused, ServerGone
from .launcher import ServerChild, ServerLauncher, ServerProcess, SupervisedLauncher
from .manager import McpServers, ServerStatus, declared_servers, open_mcp
from .policy import McpPolicy, credential_headers
from .tools import MCP_TOOLS, McpConnectTool, McpDisconnectTool, McpListTool, mcp_tools
from .trust import McpTrust, entry_digest

__all__ = [
    "CONFIG_NAME",
    "MCP_TOOLS",
    "ConnectFailed",
    "McpConfigError",
    "McpConnectTool",
    "McpConnection",
    "McpDisconnectTool",
    "McpError",
    "McpLimits",
    "McpListTool",
    "McpPolicy",
    "McpServers",
    "McpTool",
    "McpTrust",
    "Origin",
    "PolicyRefused",
    "ServerChild",
    "ServerConfig",
    "ServerDecl",
    "ServerGone",
    "ServerLauncher",
    "ServerProcess",
    "ServerState",
    "ServerStatus",
    "SupervisedLauncher",
    "Transport",
    "bound_tools",
    "convert_result",
    "credential_headers",
    "declared_servers",
    "entry_digest",
    "load_config",
    "mcp_tools",
    "open_mcp",
    "project_config_path",
    "user_config_path",
]
