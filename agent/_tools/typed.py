"""Built-in tools made with the typed tool builder (``supervisor.toolkit``).

A built-in tool is a ``toolkit.tool``: a typed ``async`` function whose arguments
are a msgspec Struct. The builder gives it its schema (from the Struct: names,
descriptions, defaults) and its repair-aware decoding (what small models get
wrong is repaired and logged; anything else is an error naming the field); the
function runs in the agent's trio loop (:meth:`toolkit.Tool.acall`) and reports
progress through ``emit``, here the loop's :data:`~agent._tools.base.Progress`.

Failures a tool means the model to see are :class:`~agent._exceptions.ToolError`
(confinement refusals, missing files) or ``toolkit.ToolError``; both become error
results, never exceptions.
"""

from __future__ import annotations

from typing import Any

from sandbox.log import get_logger
from supervisor import toolkit

from .._exceptions import ToolError
from .._messages import ImageContent, TextContent
from .._providers.base import ToolSpec
from .base import Progress, ToolKind, ToolRunResult, error_result, text_result

__all__ = ["BuiltinTool"]

log = get_logger(__name__)


class BuiltinTool:
    """A built-in tool around one typed function (see the module docstring)."""

    def __init__(self, made: toolkit.Tool) -> None:
        self._tool = made
        self._spec = ToolSpec(name=made.name, description=made.description, schema=made.schema)

    @property
    def spec(self) -> ToolSpec:
        """As the model sees it: the builder's schema of the arguments' Struct."""
        return self._spec

    #: corral's own.
    kind = ToolKind.BUILTIN
    owner = ""

    async def run(self, call_id: str, args: dict[str, Any], progress: Progress) -> ToolRunResult:
        """Decode the arguments (repairing what it can) and run the tool.

        Cancellation: the tool's own (see each tool).
        """
        name = self._tool.name
        try:
            outcome = await self._tool.acall(args, emit=progress)
        except ToolError as exc:
            return error_result(str(exc))
        if outcome.repairs:
            log.info("tool_args_repaired", tool=name, repairs=[r.value for r in outcome.repairs])
        if outcome.error is not None:
            return error_result(self._argument_error(args) or outcome.error)
        return _result(outcome.result)

    def _argument_error(self, args: dict[str, Any]) -> str | None:
        """The error naming the field when ``args`` do not fit (only on the error path)."""
        try:
            self._tool.decode(args)
        except toolkit.ArgumentError as exc:
            return f"{self._tool.name}: invalid arguments: {exc.message}"
        return None


def _result(value: Any) -> ToolRunResult:
    """A tool's return value: text, or ``text_block``/``image_block`` content."""
    if isinstance(value, str):
        return text_result(value)
    content: list[TextContent | ImageContent] = []
    for block in value if isinstance(value, list) else [value]:
        if isinstance(block, dict) and block.get("type") == "image":
            content.append(ImageContent(mime_type=block["mime_type"], data=block["data"]))
        elif isinstance(block, dict) and block.get("type") == "text":
            content.append(TextContent(text=block["text"]))
        else:
            content.append(TextContent(text=str(block)))
    return ToolRunResult(content=content)
