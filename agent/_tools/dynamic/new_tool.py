"""The built-in ``new_tool``: the agent extends its own tool surface.

A tool call like any other: extensions may intercept it (as a built-in, with the
``intercept_builtin`` permission), the transcript keeps its arguments (the code in
full) and the audit log records the tool it created. The new tool is offered to
the model from the next step on.
"""

from __future__ import annotations

import typing
from typing import Any

import msgspec

from ..._exceptions import ToolError
from ..._providers.base import ToolSpec
from ..base import Progress, ToolKind, ToolRunResult, error_result, text_result
from ..files import decode_args
from .registrar import DynamicTools
from .template import MAX_CODE, ToolDraft

__all__ = ["NewTool"]


class _Args(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str
    parameters: dict[str, Any]
    code: str
    replace: bool = False
    network: list[str] = []


_DESCRIPTION = (
    "Create a new tool for yourself: a Python function you write, kept across sessions. "
    "`code` is the body of `def tool(args):` where `args` is a dict of the arguments; "
    "return a string or any JSON value, or `raise ToolError('...')` for a failure. "
    "Only the Python standard library is available. Every call runs {where}, 60 s and "
    "1 MiB of output at most. To reach a web API, ask for it in `network` (the user "
    "sees it): the calls then reach those destinations only, through a proxy that "
    "urllib uses by itself. The tool is available from your next step."
)
_SANDBOXED = "sandboxed: no network unless asked, no files but a scratch directory ($HOME)"
_UNSANDBOXED = "WITHOUT a sandbox (none available here), in a scratch directory ($HOME)"


@typing.final
class NewTool:
    """``new_tool``: create (or with ``replace: true``, replace) a dynamic tool."""

    def __init__(self, tools: DynamicTools) -> None:
        self._tools = tools
        self._spec = ToolSpec(
            name="new_tool",
            description=_DESCRIPTION.format(
                where=_SANDBOXED if tools.runner.sandboxed else _UNSANDBOXED
            ),
            schema={
                "type": "object",
                "properties": {
                    "name": {
                        "type": "string",
                        "description": "Tool name: letters, digits, _ or -, at most 64.",
                    },
                    "description": {
                        "type": "string",
                        "description": "What the tool does, for the model that will call it.",
                    },
                    "parameters": {
                        "type": "object",
                        "description": 'JSON Schema of the arguments ({"type": "object", ...}).',
                    },
                    "code": {
                        "type": "string",
                        "description": f"Body of `def tool(args):` (at most {MAX_CODE} chars).",
                    },
                    "replace": {
                        "type": "boolean",
                        "description": "Replace the dynamic tool of the same name.",
                    },
                    "network": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Destinations its calls may reach: host names "
                        '("api.github.com", "*.example.com" for names below it), with '
                        'a port if not 80/443 ("api.example.com:8443"), or public '
                        "addresses. Nothing else, never this machine or its network.",
                    },
                },
                "required": ["name", "description", "parameters", "code"],
            },
        )

    def __repr__(self) -> str:
        return f"<NewTool {self._tools!r}>"

    @property
    def spec(self) -> ToolSpec:
        """As the model sees it."""
        return self._spec

    #: corral's own (``--tools +dynamic``); what it makes is ``DYNAMIC``.
    kind = ToolKind.BUILTIN
    owner = ""

    async def run(self, call_id: str, args: dict[str, Any], progress: Progress) -> ToolRunResult:
        """Create the tool; every refusal is an error result naming the field at fault.

        Cancellation: nothing is stored; a running ``--describe`` is killed first.
        """
        try:
            parsed = decode_args(args, _Args, "new_tool")
            draft = ToolDraft(
                name=parsed.name,
                description=parsed.description,
                parameters=parsed.parameters,
                code=parsed.code,
                network=parsed.network,
            )
            tool = await self._tools.create(draft, replace=parsed.replace)
        except ToolError as exc:
            return error_result(str(exc))
        where = "sandboxed" if self._tools.runner.sandboxed else "UNSANDBOXED (no sandbox backend)"
        net = f", may reach {', '.join(tool.draft.network)}" if tool.draft.network else ""
        return text_result(
            f"created tool {tool.draft.name} ({tool.digest[:19]}…); it runs {where}{net} and "
            "is available from your next step"
        )
