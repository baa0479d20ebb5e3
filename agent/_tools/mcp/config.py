"""MCP servers declared ahead of time: the ``mcpServers`` files, per user and per project.

The shape MCP users already know (Claude Desktop, Claude Code, Cursor)::

    {"mcpServers": {
        "files": {"command": "/usr/bin/node", "args": ["/opt/mcp/files.js"],
                  "env": {"ROOT": "${HOME}/notes"}},
        "docs":  {"url": "https://mcp.example.com/mcp",
                  "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}}}}

``type`` (``stdio``, ``http``, ``streamable-http``) may be given and must agree;
``sse`` is refused (deprecated in MCP; use streamable HTTP). ``disabled: true``
skips a server. corral adds ``permissions`` (the sandbox of a stdio server, in the
shape of an extension manifest's: ``network``, ``read_only``, ``read_write``,
``env``, ``limits``). ``${VAR}`` in ``args``, ``env``, ``url`` and ``headers`` is
the host's variable, substituted when the server is started; a missing one is an
error naming it. Other fields are ignored.

Where: ``$CORRAL_HOME/mcp.json`` (the user's; trusted as their own file) and
``./.corral/mcp.json`` (the project's; each server needs the user's trust, see
:mod:`.trust`). A project server of the same name as a user server is reported and
skipped: the user's wins.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from sandbox import Permissions
from supervisor.lowlevel import StateFile

from .errors import McpConfigError

__all__ = [
    "CONFIG_NAME",
    "Origin",
    "ServerConfig",
    "ServerDecl",
    "Transport",
    "check_config",
    "check_server_name",
    "expand",
    "expanded",
    "load_config",
    "project_config_path",
    "user_config_path",
]

CONFIG_NAME = "mcp.json"
_MAX_FILE = 1024 * 1024
#: As extension names: no ``:`` (sources are ``mcp:<name>``), nothing to escape.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Transport(enum.Enum):
    """How corral talks to a server."""

    #: A process corral starts (sandboxed), JSON-RPC lines on its stdin/stdout.
    STDIO = "stdio"
    #: Streamable HTTP to a URL.
    HTTP = "http"


class Origin(enum.Enum):
    """Who declared a server."""

    #: ``$CORRAL_HOME/mcp.json``: the user's own file.
    USER = "user"
    #: ``./.corral/mcp.json``: a project's file; needs the user's trust per server.
    PROJECT = "project"
    #: ``mcp_connect``: the agent, during the session (never stored).
    AGENT = "agent"


class ServerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of ``mcpServers``."""

    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    url: str | None = None
    headers: dict[str, str] = {}
    type: str | None = None
    disabled: bool = False
    #: corral: the sandbox of a stdio server (default: no network, nothing extra).
    permissions: Permissions = Permissions()

    @property
    def transport(self) -> Transport:
        """STDIO with a ``command``, HTTP with a ``url``."""
        return Transport.STDIO if self.command is not None else Transport.HTTP

    def describe(self) -> str:
        """``/usr/bin/node server.js`` or the URL, for messages."""
        if self.command is not None:
            return " ".join([self.command, *self.args])
        return self.url or ""


class ServerDecl(msgspec.Struct, frozen=True, kw_only=True):
    """A server and where it was declared."""

    name: str
    config: ServerConfig
    origin: Origin
    #: The file it came from ("" for ``mcp_connect``).
    path: str = ""


class _File(msgspec.Struct, kw_only=True):
    servers: dict[str, msgspec.Raw] = msgspec.field(name="mcpServers", default_factory=dict)


_file_decoder = msgspec.json.Decoder(_File)
_server_decoder = msgspec.json.Decoder(ServerConfig)


def check_server_name(name: str) -> str | None:
    """Why ``name`` cannot name a server, or None."""
    if _NAME.match(name):
        return None
    return "use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"


def check_config(config: ServerConfig) -> str | None:
    """Why ``config`` is not a usable server entry, or None."""
    if config.command is not None and config.url is not None:
        return "give either command (stdio) or url (HTTP), not both"
    if config.command is None and config.url is None:
        return "give command (a stdio server) or url (a streamable HTTP server)"
    wanted = (config.type or "").lower()
    if wanted == "sse":
        return "the SSE transport is not supported (deprecated in MCP); use streamable HTTP"
    if wanted and wanted not in ("stdio", "http", "streamable-http", "streamable_http"):
        return f"unknown type {config.type!r}; use stdio or http"
    if wanted and (wanted == "stdio") != (config.transport is Transport.STDIO):
        return f"type {config.type!r} does not match the {config.transport.value} entry"
    values = [config.command or "", config.url or "", *config.args]
    values += [*config.env, *config.env.values(), *config.headers, *config.headers.values()]
    if any("\x00" in v for v in values):
        return "a value contains a NUL character"
    return None


def load_config(path: Path, origin: Origin) -> tuple[list[ServerDecl], list[McpConfigError]]:
    """The servers declared in ``path`` (none when it does not exist), and a problem
    for each malformed entry: one bad entry never takes the others down.

    Raises:
        McpConfigError: the file itself is unsafe (not the user's, writable by
            others) or not JSON; the message names the file.
    """
    where = str(path)
    try:
        data = StateFile(path, limit=_MAX_FILE).read()
    except OSError as exc:  # a refusal's strerror is its reason
        raise McpConfigError(where, exc.strerror or str(exc)) from exc
    if data is None:
        return [], []
    try:
        servers = _file_decoder.decode(data).servers
    except msgspec.DecodeError as exc:
        raise McpConfigError(where, f"not a valid mcpServers file: {exc}") from None
    out: list[ServerDecl] = []
    problems: list[McpConfigError] = []
    for name, raw in servers.items():
        why = check_server_name(name)
        if why is not None:
            problems.append(McpConfigError(where, f"server name {name!r}: {why}; skipped"))
            continue
        try:
            config = _server_decoder.decode(raw)
        except msgspec.DecodeError as exc:
            problems.append(McpConfigError(where, f"server {name}: {exc}; skipped", server=name))
            continue
        problem = check_config(config)
        if problem is not None:
            problems.append(
                McpConfigError(where, f"server {name}: {problem}; skipped", server=name)
            )
            continue
        if not config.disabled:
            out.append(ServerDecl(name=name, config=config, origin=origin, path=where))
    return out, problems


def user_config_path(home: str | Path) -> Path:
    """``$CORRAL_HOME/mcp.json``."""
    return Path(home) / CONFIG_NAME


def project_config_path(project: str | Path) -> Path:
    """``<project>/.corral/mcp.json``."""
    return Path(project) / ".corral" / CONFIG_NAME


def expand(value: str, environ: Mapping[str, str], *, server: str, path: str) -> str:
    """``value`` with each ``${VAR}`` replaced by the host's variable.

    Raises:
        McpConfigError: a variable is not set.
    """

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise McpConfigError(
                path or "mcp_connect", f"server {server}: ${{{name}}} is not set", server=server
            )
        return environ[name]

    return _VAR.sub(sub, value)


def expanded(decl: ServerDecl, environ: Mapping[str, str] | None = None) -> ServerConfig:
    """``decl.config`` with ``${VAR}`` substituted in args, env, url and headers.

    Raises:
        McpConfigError: a variable is not set.
    """
    env = os.environ if environ is None else environ
    c = decl.config

    def ex(value: str) -> str:
        return expand(value, env, server=decl.name, path=decl.path)

    fields: dict[str, Any] = {
        "args": [ex(a) for a in c.args],
        "env": {k: ex(v) for k, v in c.env.items()},
        "headers": {k: ex(v) for k, v in c.headers.items()},
    }
    if c.url is not None:
        fields["url"] = ex(c.url)
    return msgspec.structs.replace(c, **fields)
