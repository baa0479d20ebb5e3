"""What an MCP server may register and what its results become (pure, no server)."""

from __future__ import annotations

import base64

import mcp_types as types

from agent._messages import ImageContent, TextContent
from agent._tools.base import ToolKind
from agent._tools.mcp import McpLimits, bound_tools, convert_result

OBJECT = {"type": "object", "properties": {}}


def tool(name: str, schema: object = OBJECT, description: str = "d") -> types.Tool:
    return types.Tool.model_construct(name=name, input_schema=schema, description=description)


def test_hostile_listings_are_bounded_and_every_refusal_named() -> None:
    listed = [
        tool("ok", description="fine\x1b[2J\x07 text " + "x" * 50),
        tool("bad name"),
        tool("read"),
        tool("ok"),
        tool("arr", schema={"type": "array"}),
        tool("big", schema={"type": "object", "description": "y" * 200}),
        tool("last"),
        tool("over"),
    ]
    limits = McpLimits(max_tools=2, max_description=20, max_schema=100)
    specs, skipped = bound_tools(listed, limits, {"read": ToolKind.BUILTIN})
    assert [s.name for s in specs] == ["ok", "last"]
    assert specs[0].description == "fine[2J text xxxxxx…"  # ESC and BEL removed
    assert skipped == [
        "'bad name': not a valid tool name",
        "read: the name is taken (builtin)",
        "ok: the name is taken (another tool of this server)",
        "arr: its input schema is not an object schema",
        "big: its input schema is 237 bytes (at most 100)",
        "over: over the limit of 2 tools",
    ]
    many = [tool(f"t{n}") for n in range(40)]
    _, skipped = bound_tools(many, McpLimits(max_tools=1), {})
    assert len(skipped) == 21
    assert skipped[-1] == "… and 19 more"


def test_results_are_converted_cut_and_checked() -> None:
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="a" * 8),
            types.ImageContent(type="image", data=png, mime_type="image/png"),
            types.TextContent(type="text", text="b" * 8),
        ]
    )
    converted = convert_result("srv", "t", result, limit=12)
    first, image, cut = converted.content
    assert first == TextContent(text="a" * 8)
    assert isinstance(image, ImageContent)
    assert isinstance(cut, TextContent)
    assert cut.text.startswith("bbbb\n[cut: the result is longer than 12 characters]")
    lying = types.CallToolResult(
        content=[types.ImageContent(type="image", data="not base64!", mime_type="image/png")]
    )
    refused = convert_result("srv", "t", lying, limit=100)
    assert refused.is_error
    assert "content block 1 is a bad image" in refused.content[0].text  # type: ignore[union-attr]
