"""What an MCP server may register, and what one of its results becomes.

Pure functions over what the SDK decoded (no I/O): :func:`bound_tools` keeps the
tools a server may register and names each one it may not, with why;
:func:`convert_result` turns a ``CallToolResult`` into a tool result. The bounds
are :class:`McpLimits`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from ..._messages import ImageContent, TextContent, image_problem
from ..._providers.base import ToolSpec
from ..base import ToolKind, ToolRunResult, error_result

__all__ = ["McpLimits", "bound_tools", "convert_result"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: Skipped tools named one by one; the rest are counted.
_MAX_SKIPPED = 20


class McpLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds on what a server may register and how long things may take."""

    #: Tools registered per server at most; the rest are dropped (and named).
    max_tools: int = 128
    #: Characters of a tool's description kept.
    max_description: int = 1024
    #: Bytes of a tool's input schema (as JSON) at most; larger ones are skipped.
    max_schema: int = 16 * 1024
    #: Characters of one call's text result kept.
    max_result: int = 1024 * 1024
    #: Longest line from a stdio server, in bytes (a longer one ends the session).
    max_line: int = 16 * 1024 * 1024
    #: Seconds to start, initialise and list tools.
    connect_timeout: float = 30.0
    #: Seconds one tool call may take.
    call_timeout: float = 60.0


def _clean(text: str, limit: int) -> str:
    text = _CONTROL.sub("", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def bound_tools(
    listed: list[Any], limits: McpLimits, taken: Mapping[str, ToolKind]
) -> tuple[list[ToolSpec], list[str]]:
    """The specs of the tools in ``listed`` (``mcp_types.Tool``) that may be registered,
    and one line for each that may not.

    Args:
        listed: what ``tools/list`` returned, in order.
        limits: the bounds.
        taken: names other tools hold (built-ins, extensions, dynamic tools).
    """
    kept: list[ToolSpec] = []
    names: set[str] = set()
    skipped: list[str] = []
    for tool in listed:
        name = str(tool.name)
        if not _NAME.match(name):
            skipped.append(f"{_clean(name, 64)!r}: not a valid tool name")
            continue
        if len(kept) >= limits.max_tools:
            skipped.append(f"{name}: over the limit of {limits.max_tools} tools")
            continue
        kind = taken.get(name)
        if kind is not None or name in names:
            what = kind.value if kind is not None else "another tool of this server"
            skipped.append(f"{name}: the name is taken ({what})")
            continue
        schema = tool.input_schema
        if not isinstance(schema, dict) or schema.get("type") != "object":
            skipped.append(f"{name}: its input schema is not an object schema")
            continue
        size = len(json.dumps(schema))
        if size > limits.max_schema:
            skipped.append(
                f"{name}: its input schema is {size} bytes (at most {limits.max_schema})"
            )
            continue
        description = _clean(str(tool.description or ""), limits.max_description)
        kept.append(ToolSpec(name=name, description=description, schema=schema))
        names.add(name)
    if len(skipped) > _MAX_SKIPPED:
        skipped = [*skipped[:_MAX_SKIPPED], f"… and {len(skipped) - _MAX_SKIPPED} more"]
    return kept, skipped


def convert_result(server: str, tool: str, result: Any, limit: int) -> ToolRunResult:
    """An MCP ``CallToolResult`` as a tool result: text, checked images, notes.

    Text beyond ``limit`` characters is cut (and says so); a bad image drops the result.
    """
    import mcp_types as types

    content: list[TextContent | ImageContent] = []
    for number, block in enumerate(result.content or [], start=1):
        if isinstance(block, types.TextContent):
            content.append(TextContent(text=block.text))
        elif isinstance(block, types.ImageContent):
            image = ImageContent(mime_type=block.mime_type, data=block.data)
            problem = image_problem(image)
            if problem is not None:
                return error_result(
                    f"MCP server {server}, tool {tool}: content block {number} is a bad image "
                    f"({problem}); the result was dropped"
                )
            content.append(image)
        elif isinstance(block, types.EmbeddedResource):
            inner = block.resource
            if isinstance(inner, types.TextResourceContents):
                content.append(TextContent(text=f"[resource {inner.uri}]\n{inner.text}"))
            else:
                content.append(TextContent(text=f"[binary resource {inner.uri}, not shown]"))
        elif isinstance(block, types.ResourceLink):
            content.append(TextContent(text=f"[resource link {block.uri}]"))
        else:
            content.append(TextContent(text=f"[{getattr(block, 'type', 'unknown')} content]"))
    if not content and result.structured_content is not None:
        content.append(TextContent(text=json.dumps(result.structured_content, ensure_ascii=False)))
    total = 0
    for n, item in enumerate(content):
        if isinstance(item, TextContent):
            if total + len(item.text) > limit:
                cut = max(limit - total, 0)
                note = f"\n[cut: the result is longer than {limit} characters]"
                content[n] = TextContent(text=item.text[:cut] + note)
                content = content[: n + 1]
                break
            total += len(item.text)
    return ToolRunResult(content=content, is_error=bool(result.is_error))
