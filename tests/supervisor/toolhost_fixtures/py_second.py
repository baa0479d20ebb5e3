"""Python tool module for the runner tests: a second module with its own preview."""

from __future__ import annotations

from corral_tools import tool


@tool
def second() -> str:
    """The second module's tool."""
    return "second"


def format_tool_call_preview(tool_name: str) -> str | None:
    return "second's own preview" if tool_name == "second" else None
