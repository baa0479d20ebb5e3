"""The tool contract: what a tool is, what it returns, and where it comes from.

Every tool (corral's own under :mod:`agent._tools`, an extension's, a tool host's,
a dynamic tool, an MCP server's) is a :class:`Tool`; tools that come and go outside
the supervisor arrive in a :class:`ToolSet`. The registry
(:mod:`agent._registry`) collects them and the loop runs them; both stand above
this module, which imports nothing of theirs.

A tool's origin is its :attr:`Tool.kind`, the one place it is said; its
:attr:`Tool.owner` names who offers it within that kind. The *source* that users
and RPC clients read (``"builtin"``, ``"dynamic"``, an extension's name,
``"mcp:<server>"``) is derived from the two by :func:`source_of`.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

import msgspec

from .._messages import ImageContent, NativeContent, TextContent
from .._providers.base import ToolSpec

__all__ = [
    "Progress",
    "Tool",
    "ToolKind",
    "ToolRunResult",
    "ToolSet",
    "error_result",
    "source_of",
    "text_result",
]


class Progress(Protocol):
    """How a running tool reports progress: a line, and a tool host's ``part`` payload."""

    def __call__(self, text: str, part: Any = msgspec.UNSET, /) -> Awaitable[None]: ...


class ToolRunResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool returned; a tool host may add ``native`` (the result in a provider's
    own shape) and ``display`` (its rendering for people)."""

    content: list[TextContent | ImageContent]
    is_error: bool = False
    native: NativeContent | None = None
    display: Any = None


def text_result(text: str) -> ToolRunResult:
    """A successful text result."""
    return ToolRunResult(content=[TextContent(text=text)])


def error_result(text: str) -> ToolRunResult:
    """An error result carrying ``text``."""
    return ToolRunResult(content=[TextContent(text=text)], is_error=True)


class ToolKind(enum.Enum):
    """Where a tool comes from; names the set a UI lists or clears at once."""

    #: corral's own (``read``, ``bash``, ``new_tool`` ...); source ``builtin``.
    BUILTIN = "builtin"
    #: Registered by an extension; its source is the extension's name (the owner).
    EXTENSION = "extension"
    #: Offered by a tool host; its source is the host's name (the owner).
    TOOL_HOST = "tool-host"
    #: Written by the agent with ``new_tool``; source ``dynamic``.
    DYNAMIC = "dynamic"
    #: Discovered on an MCP server; source ``mcp:<server>`` (the server is the owner).
    MCP = "mcp"


class Tool(Protocol):
    """A tool the model can call."""

    @property
    def spec(self) -> ToolSpec:
        """Name, description and argument schema, as the model sees them."""
        ...

    @property
    def kind(self) -> ToolKind:
        """Where the tool comes from."""
        ...

    @property
    def owner(self) -> str:
        """Who offers it within its kind: the extension's, tool host's or MCP server's
        name; ``""`` for corral's own and dynamic tools."""
        ...

    async def run(self, call_id: str, args: dict[str, Any], progress: Progress) -> ToolRunResult:
        """Run the tool.

        Failures are returned as error results; only ``Cancelled`` propagates.

        Cancellation: the tool stops; what it started is stopped and reaped.
        """
        ...


def source_of(kind: ToolKind, owner: str = "") -> str:
    """A tool's source as users, RPC clients and the audit log read it:
    ``"builtin"``, ``"dynamic"``, the extension's (or tool host's) name, or
    ``"mcp:<server>"``, from its :attr:`~Tool.kind` and :attr:`~Tool.owner`."""
    match kind:
        case ToolKind.EXTENSION | ToolKind.TOOL_HOST:
            return owner
        case ToolKind.MCP:
            return f"mcp:{owner}"
        case _:
            return str(kind.value)


class ToolSet(Protocol):
    """Tools that come and go outside the supervisor (dynamic tools, MCP servers)."""

    @property
    def generation(self) -> int:
        """Changes whenever :meth:`tools` would return something else."""
        ...

    def tools(self) -> Sequence[Tool]:
        """The set's tools now, in order."""
        ...
