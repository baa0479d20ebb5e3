"""A minimal MCP stdio server with one ``echo`` tool, for ``bench_supervisor.py``."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-echo")


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


if __name__ == "__main__":
    server.run("stdio")
