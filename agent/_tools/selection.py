"""Which built-in tools a session offers: the names, the groups, and ``--tools`` /
``AgentOptions.tools`` resolved against them.

:data:`BUILTIN_TOOLS` are on by default; :data:`OPTIONAL_TOOLS` only when asked for,
by name or by group (:data:`TOOL_GROUPS`: ``web``, ``dynamic``, ``mcp``). Naming
them imports no tool. A list of plain names is the exact set (``read,bash``); entries starting with
``+`` or ``-`` add to or remove from the default set (``+web``, ``-bash``); a
group name stands for its members (``web`` is ``web_fetch,web_search``). Mixing
plain names with ``+``/``-`` entries starts from the plain names. An empty list
offers no built-in tool at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .._exceptions import AgentError
from . import BUILTIN_TOOLS
from .dynamic import DYNAMIC_TOOLS
from .web import WEB_TOOLS

__all__ = [
    "BUILTIN_TOOLS",
    "MCP_TOOLS",
    "OPTIONAL_TOOLS",
    "TOOL_GROUPS",
    "select_tools",
    "wanted_tools",
]

#: The tools of ``--tools +mcp`` (named here, so that naming them imports nothing).
MCP_TOOLS = ("mcp_connect", "mcp_disconnect", "mcp_list")
#: Built-in tools that are off unless asked for (``--tools +web``, ``+dynamic``, ``+mcp``).
OPTIONAL_TOOLS = (*WEB_TOOLS, *DYNAMIC_TOOLS, *MCP_TOOLS)
#: Names that stand for several optional tools.
TOOL_GROUPS: Mapping[str, Sequence[str]] = {
    "web": WEB_TOOLS,
    "dynamic": DYNAMIC_TOOLS,
    "mcp": MCP_TOOLS,
}


def wanted_tools(requested: Sequence[str] | None) -> list[str]:
    """The built-in tools a session with ``--tools requested`` offers, in order.

    Raises:
        AgentError: an entry names no tool or group.
    """
    return select_tools(requested, BUILTIN_TOOLS, OPTIONAL_TOOLS, TOOL_GROUPS)


def select_tools(
    requested: Sequence[str] | None,
    defaults: Sequence[str],
    optional: Sequence[str] = (),
    groups: Mapping[str, Sequence[str]] | None = None,
) -> list[str]:
    """The tool names ``requested`` selects, in the order of ``defaults`` then ``optional``.

    Args:
        requested: the entries as given; None means ``defaults``.
        defaults: tools on unless removed.
        optional: tools off unless asked for.
        groups: names that stand for several tools.

    Raises:
        AgentError: an entry names no tool or group; the message lists the valid ones.
    """
    if requested is None:
        return list(defaults)
    groups = groups or {}
    known = [*defaults, *optional]
    entries = [e.strip() for e in requested if e.strip()]
    relative = bool(entries) and all(e[0] in "+-" for e in entries)
    chosen = set(defaults) if relative else set()
    names = [e.lstrip("+-").strip() for e in entries]
    unknown = [name for name in names if name not in known and name not in groups]
    if unknown:
        valid = ", ".join([*known, *groups])
        raise AgentError(f"unknown built-in tool(s) {', '.join(unknown)}; valid: {valid}")
    for entry, name in zip(entries, names, strict=True):
        members = groups.get(name, [name])
        if entry.startswith("-"):
            chosen.difference_update(members)
        else:
            chosen.update(members)
    return [name for name in known if name in chosen]
