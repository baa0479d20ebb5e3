"""Exceptions of the MCP connections.

::

    ToolError (agent)
    └── McpError                an MCP server cannot be used as asked
        ├── PolicyRefused       the policy refused a server before anything opened
        ├── McpConfigError      a config file (mcpServers) is malformed or unsafe
        ├── ConnectFailed       the server did not start, answer or list its tools
        └── ServerGone          the server died, or was disconnected, during a call

The MCP tools turn every one of them into an error result for the model; the CLI
and the session start show them as one line naming the server or file.
"""

from __future__ import annotations

from ..._exceptions import ToolError

__all__ = ["ConnectFailed", "McpConfigError", "McpError", "PolicyRefused", "ServerGone"]


class McpError(ToolError):
    """Base of the MCP errors.

    Attributes:
        server: the server's name ("" when none is known yet).
    """

    def __init__(self, server: str, message: str) -> None:
        super().__init__(f"MCP server {server}: {message}" if server else message)
        self.server = server


class PolicyRefused(McpError):
    """The connection policy refused a server (nothing was started or dialled).

    Attributes:
        reason: why, e.g. ``"the command must be an absolute path"``.
    """

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(server, f"refused by policy: {reason}")
        self.reason = reason


class McpConfigError(McpError):
    """A config file with ``mcpServers`` is malformed or unsafe.

    Attributes:
        path: the file.
    """

    def __init__(self, path: str, message: str, *, server: str = "") -> None:
        super(McpError, self).__init__(f"{path}: {message}")
        self.server = server
        self.path = path


class ConnectFailed(McpError):
    """The server could not be started, initialised or asked for its tools."""


class ServerGone(McpError):
    """The server died or was disconnected while a call was pending.

    Attributes:
        detail: the exit status and the last lines of stderr, when known.
    """

    def __init__(self, server: str, detail: str) -> None:
        super().__init__(server, detail)
        self.detail = detail
