"""The typed tool builder, in corral's own process (see ``docs/toolkit.md``).

``from supervisor.toolkit import tool`` and ``from supervisor import toolkit`` name
the same builder: the standard-library-only ``corral_tools`` module that sandboxed
tool hosts import from the SDK directory (``supervisor.lowlevel.SDK_DIR``), re-exported here
so that code in the agent's process imports it like any other module.
"""

from __future__ import annotations

from ._sdk.corral_tools import (
    ArgumentError,
    Emit,
    Outcome,
    Repair,
    Tool,
    ToolError,
    image_block,
    provider_native,
    raw_tool,
    run,
    text_block,
    tool,
)

__all__ = [
    "ArgumentError",
    "Emit",
    "Outcome",
    "Repair",
    "Tool",
    "ToolError",
    "image_block",
    "provider_native",
    "raw_tool",
    "run",
    "text_block",
    "tool",
]
