"""The web tools ``web_fetch`` and ``web_search``, and the network guard under them.

Both tools are off unless enabled (``--tools +web``, or ``AgentOptions.tools``);
:func:`web_tools` builds them from a :class:`WebConfig`. :class:`NetGuard` is the
SSRF gate (pre-flight plus dial-time address checks, redirect policy, no
environment proxies) for any HTTP client that must not reach internal hosts; it
is the supervisor's (:class:`supervisor.NetGuard`, the same guard the egress proxy
of sandboxed children uses), with the address policy of :mod:`sandbox`.
"""

from __future__ import annotations

import typing

from sandbox import AddressPolicy, Allowance, blocked_reason, parse_allowance, parse_host
from supervisor import NetGuard, Resolver, system_resolver

from ..._lazy import lazy_exports as _lazy_exports
from .config import WebConfig

if typing.TYPE_CHECKING:
    from sandbox import Sandbox

    from ..base import Tool
    from .browser import PageRenderer, find_chromium
    from .errors import BlockedTarget, BrowserError, FetchFailed, WebConfigError, WebError
    from .fetch import RenderMode, WebFetchTool
    from .guard import check_url, open_client, redirect_target
    from .search import SearchOutput, WebSearchTool

__all__ = [
    "WEB_TOOLS",
    "AddressPolicy",
    "Allowance",
    "BlockedTarget",
    "BrowserError",
    "FetchFailed",
    "NetGuard",
    "PageRenderer",
    "RenderMode",
    "Resolver",
    "SearchOutput",
    "WebConfig",
    "WebConfigError",
    "WebError",
    "WebFetchTool",
    "WebSearchTool",
    "blocked_reason",
    "check_url",
    "find_chromium",
    "open_client",
    "parse_allowance",
    "parse_host",
    "redirect_target",
    "system_resolver",
    "web_tools",
]

#: The tool names, in the order the model sees them.
WEB_TOOLS = ("web_fetch", "web_search")


def web_tools(
    config: WebConfig, *, sandbox: Sandbox | None = None, require_sandbox: bool = False
) -> dict[str, Tool]:
    """``web_fetch`` and ``web_search`` for ``config``, by name.

    Raises:
        WebConfigError: an allowance in ``config`` is not an address or network.
    """
    from .fetch import WebFetchTool
    from .search import WebSearchTool

    return {
        "web_fetch": WebFetchTool(config, sandbox=sandbox, require_sandbox=require_sandbox),
        "web_search": WebSearchTool(config),
    }


#: Where each other public name lives: imported on first use (PEP 562), so that
#: an agent without the web tools (the default) does not load HTTP and HTML code.
_WHERE: dict[str, str] = {
    "PageRenderer": ".browser",
    "find_chromium": ".browser",
    "BlockedTarget": ".errors",
    "BrowserError": ".errors",
    "FetchFailed": ".errors",
    "WebConfigError": ".errors",
    "WebError": ".errors",
    "RenderMode": ".fetch",
    "WebFetchTool": ".fetch",
    "check_url": ".guard",
    "open_client": ".guard",
    "redirect_target": ".guard",
    "SearchOutput": ".search",
    "WebSearchTool": ".search",
}


__getattr__, __dir__ = _lazy_exports(__name__, _WHERE, globals(), __all__)
