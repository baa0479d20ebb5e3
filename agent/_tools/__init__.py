"""Built-in tools the agent offers the model."""

from __future__ import annotations

__all__ = ["BUILTIN_TOOLS"]

#: Names of the built-in tools, in the order the model sees them. The supervisor
#: reserves them (``SupervisorConfig.reserved_tools``): an extension never takes one.
BUILTIN_TOOLS = ("read", "write", "edit", "bash")
