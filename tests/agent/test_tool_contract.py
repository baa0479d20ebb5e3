"""The tool contract (``agent._tools.base``): below the registry, and ``kind`` the one origin.

Pure logic and the source tree: fakes behind the registry's ``ToolCaller`` seam and
the loop's ``Hooks`` seam, no processes.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

import agent
from agent._providers.base import ProviderToolCall
from agent._registry import ToolRegistry
from agent._toolround import ToolRound
from agent._tools.base import ToolKind, source_of
from agent._tools.confine import Workspace
from agent._tools.files import ReadTool
from supervisor import ChildKind, InterceptOutcome, TextBlock, ToolInfo, ToolOutcome

_TOOLS = Path(agent.__file__).parent / "_tools"


def test_no_tool_imports_the_registry() -> None:
    # The tools stand below the registry that collects them: they take the contract
    # from agent._tools.base, never from agent._registry.
    offenders = []
    for path in sorted(_TOOLS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("_registry"):
                offenders.append(f"{path.relative_to(_TOOLS.parent)}:{node.lineno}")
    assert offenders == []


def test_the_source_is_derived_from_kind_and_owner() -> None:
    assert source_of(ToolKind.BUILTIN) == "builtin"
    assert source_of(ToolKind.DYNAMIC) == "dynamic"
    assert source_of(ToolKind.EXTENSION, "weather") == "weather"
    assert source_of(ToolKind.TOOL_HOST, "pyhost") == "pyhost"
    assert source_of(ToolKind.MCP, "files") == "mcp:files"


class _Caller:
    """The supervisor client's side the registry needs; answers every call."""

    def __init__(self, infos: list[ToolInfo]) -> None:
        self.infos = infos

    def tools(self) -> list[ToolInfo]:
        return self.infos

    async def call_tool(
        self,
        name: str,
        args: dict[str, Any],
        *,
        call_id: str = "",
        on_part: Callable[[dict[str, Any]], None] | None = None,
    ) -> ToolOutcome:
        return ToolOutcome(content=[TextBlock(text=f"{name} ran")])

    async def preview_tool_call(self, name: str, args: dict[str, Any]) -> str | None:
        return None


class _Hooks:
    """The intercept chain, recording whether each call was asked about as built-in."""

    def __init__(self) -> None:
        self.asked: dict[str, bool] = {}

    async def intercept_turn_start(self, step: int) -> InterceptOutcome:
        return InterceptOutcome()

    async def intercept_tool_call(
        self, tool_id: str, tool_name: str, tool_args: dict[str, Any], *, builtin: bool = True
    ) -> InterceptOutcome:
        self.asked[tool_name] = builtin
        return InterceptOutcome()

    async def intercept_assistant_message(self, text: str) -> InterceptOutcome:
        return InterceptOutcome()

    async def emit(self, event: Any) -> None:
        pass

    async def set_host_info(self, provider: str, model: str, cwd: str) -> None:
        pass


def _info(name: str, extension: str, kind: ChildKind = ChildKind.EXTENSION) -> ToolInfo:
    return ToolInfo(
        name=name, description="", schema={"type": "object"}, extension=extension, kind=kind
    )


async def test_an_extension_named_builtin_is_still_an_extension(tmp_path: Path) -> None:
    # Its name reads like corral's own source; its kind says what it is, and only
    # corral's own tools are vetted as built-in.
    caller = _Caller([_info("spoof", "builtin"), _info("hosted", "pyhost", ChildKind.TOOL_HOST)])
    registry = ToolRegistry([ReadTool(Workspace(str(tmp_path)))], caller)
    registry.sync()
    assert registry.kinds() == {
        "read": ToolKind.BUILTIN,
        "spoof": ToolKind.EXTENSION,
        "hosted": ToolKind.TOOL_HOST,
    }
    assert registry.sources() == {"read": "builtin", "spoof": "builtin", "hosted": "pyhost"}
    hooks = _Hooks()
    calls = [
        ProviderToolCall(id=f"c{n}", name=name, args={"path": "x"} if name == "read" else {})
        for n, name in enumerate(["read", "spoof", "hosted"])
    ]

    async def emit(event: Any) -> None:
        pass

    with trio.fail_after(10):
        tools = ToolRound(calls, registry=registry, hooks=hooks, audit=None)
        await tools.run(emit)
    assert hooks.asked == {"read": True, "spoof": False, "hosted": False}
    answered = tools.answer().content
    assert [r.call_id for r in answered] == ["c0", "c1", "c2"]  # type: ignore[union-attr]
