"""Python tool module for the runner tests: one hand-written tool, no hooks."""

from __future__ import annotations

from typing import Any

from corral_tools import raw_tool


@raw_tool(
    schema={
        "type": "object",
        "properties": {"x": {"oneOf": [{"type": "integer"}, {"type": "string"}]}},
    }
)
def plain(args: dict[str, Any]) -> str:
    """Says what it got."""
    return f"plain got {args.get('x')!r}"
