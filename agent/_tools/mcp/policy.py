"""The connection policy: checked before any process starts or any socket opens.

* **stdio**: the command must be an absolute path to an executable regular file
  (no lookup on ``PATH``, which a project could shadow); the sandbox refuses
  version-manager shims when it plans the launch.
* **HTTP**: the URL is pre-flighted by the web tools' :class:`~supervisor.NetGuard`
  (http or https only, no credentials in the URL, no ``localhost`` names, every
  resolved address public unless an explicit allowance covers it), and every
  connection is checked again at dial time by the same guard (see :mod:`.http`),
  so a name that rebinds to a private address after the pre-flight is refused.
* **No secret over cleartext**: over ``http://`` the request headers may not carry
  credentials (``Authorization``, ``Cookie``, or any header whose name mentions a
  token, key, secret, password or auth), loopback allowances included.

Allowances (``--mcp-allow``, ``CORRAL_MCP_ALLOW``) are exact addresses or
networks with an optional port, as the web tools': they exist for tests and
trusted intranets.
"""

from __future__ import annotations

import os
import re
import stat
import typing

import httpx
import trio

from supervisor import NetGuard

from ..web import (
    AddressPolicy,
    BlockedTarget,
    FetchFailed,
    WebConfigError,
    parse_allowance,
)
from ..web.guard import check_url
from .config import ServerConfig, ServerDecl
from .errors import PolicyRefused

__all__ = ["McpPolicy", "credential_headers"]

_SECRET_HEADER = re.compile(r"token|key|secret|passw|auth|cookie|session", re.IGNORECASE)


def credential_headers(headers: dict[str, str]) -> list[str]:
    """The header names in ``headers`` that carry credentials."""
    return [name for name in headers if _SECRET_HEADER.search(name)]


@typing.final
class McpPolicy:
    """What corral may start or dial for an MCP server.

    Args:
        guard: the network guard (its policy holds the allowances; its resolver is
            the seam tests use).
    """

    def __init__(self, guard: NetGuard) -> None:
        self.guard = guard

    def __repr__(self) -> str:
        return f"<McpPolicy {self.guard!r}>"

    @classmethod
    def allowing(cls, allowances: list[str]) -> McpPolicy:
        """The policy with these exceptions to the guard (``--mcp-allow`` entries).

        Raises:
            WebConfigError: an entry is malformed (``--mcp-allow`` named).
        """
        try:
            policy = AddressPolicy(parse_allowance(a) for a in allowances)
        except ValueError as exc:
            raise WebConfigError("CORRAL_MCP_ALLOW / --mcp-allow", str(exc)) from None
        return cls(NetGuard(policy))

    async def refusal(self, decl: ServerDecl) -> str | None:
        """Why the policy would refuse ``decl`` at start, or None: what a session's
        start checks, so a listing and a trust prompt say what will really happen.

        Cancellation: the lookup of an HTTP server's host is abandoned.
        """
        try:
            if decl.config.command is not None:
                await trio.to_thread.run_sync(self.check_stdio, decl.name, decl.config)
            else:
                await self.check_http(decl.name, decl.config)
        except PolicyRefused as exc:
            return str(exc)
        return None

    def check_stdio(self, name: str, config: ServerConfig) -> str:
        """Check a stdio server's command; returns it. Blocking (it looks at the file).

        Raises:
            PolicyRefused: relative, missing, not a regular file, or not executable.
        """
        command = config.command or ""
        if not os.path.isabs(command):
            raise PolicyRefused(
                name, f"the command {command!r} must be an absolute path (PATH is not searched)"
            )
        try:
            info = os.stat(command)
        except OSError as exc:
            raise PolicyRefused(name, f"the command {command}: {exc.strerror}") from None
        if not stat.S_ISREG(info.st_mode):
            raise PolicyRefused(name, f"the command {command} is not a regular file")
        if not os.access(command, os.X_OK):
            raise PolicyRefused(name, f"the command {command} is not executable")
        return command

    async def check_http(self, name: str, config: ServerConfig) -> httpx.URL:
        """Pre-flight an HTTP server's URL and headers.

        Raises:
            PolicyRefused: the guard refuses the URL, the name does not resolve, or
                credentials would go over cleartext.

        Cancellation: the lookup is abandoned.
        """
        url = config.url or ""
        try:
            parsed = await check_url(self.guard, url)
        except (BlockedTarget, FetchFailed) as exc:
            raise PolicyRefused(name, str(exc)) from None
        secrets = credential_headers(config.headers)
        if parsed.scheme != "https" and secrets:
            raise PolicyRefused(
                name,
                f"{', '.join(secrets)} would be sent over cleartext http; use an https URL",
            )
        return parsed
