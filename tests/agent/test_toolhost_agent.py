"""Tool hosts through the agent: the loop, the in-process runtime and ``corral rpc``.

Real tool-host processes (corral's Python runner on the example package and on the
runner tests' fixture module), run unsandboxed for speed; ``no_leaks`` checks that
none outlives its test.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.agentkit import options, script
from helpers.paths import TOOLHOST_EXAMPLES, TOOLHOST_FIXTURES
from helpers.rpc_harness import Frame, open_rpc, write_script

from agent import (
    TextContent,
    ToolCallEvent,
    ToolProgress,
    ToolResultContent,
    ToolResultEvent,
    open_runtime,
)
from agent._messages import NativeContent
from agent._providers.openai_messages import map_messages as _map_messages

TIMEOUT = 40

pytestmark = pytest.mark.usefixtures("no_leaks")


def notes_host(tmp_path: Path) -> str:
    """A copy of examples/toolhosts/python-tools (its manifest declares the tool host)."""
    where = tmp_path / "exts" / "python-tools"
    shutil.copytree(TOOLHOST_EXAMPLES / "python-tools", where)
    return str(where)


def of(frames: list[Frame], kind: str) -> list[Frame]:
    return [f for f in frames if f["type"] == kind]


async def test_rpc_streams_parts_previews_and_lists_the_host(tmp_path: Path) -> None:
    calls = {
        "tool_calls": [
            {"id": "c1", "name": "add_note", "args": {"text": "milk"}},
            {"id": "c2", "name": "countdown", "args": {"start": 2, "interval_ms": 0}},
        ]
    }
    listing = {"tool_calls": [{"id": "c3", "name": "list_notes", "args": {}}]}
    turns = write_script(tmp_path, calls, {"text": "done"}, listing, {"text": "again"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, turns, exts=(notes_host(tmp_path),)) as rpc:
            tools = {t["name"]: t for t in (await rpc.call("get_tools"))["data"]["tools"]}
            assert (tools["add_note"]["source"], tools["add_note"]["kind"]) == (
                "py-notes",
                "tool-host",
            )
            assert tools["add_note"]["schema"]["required"] == ["text"]

            await rpc.send({"id": 1, "type": "prompt", "message": "note milk, count down"})
            frames = await rpc.until_done()
            call = {f["id"]: f for f in of(frames, "tool_call")}
            assert call["c1"]["preview"] == 'add note: "milk"'
            assert "preview" not in call["c2"]  # the hook answered null for countdown
            parts = [f for f in of(frames, "tool_progress") if f["id"] == "c2"]
            assert [p["part"] for p in parts] == [{"left": 2}, {"left": 1}]
            assert [p["text"] for p in parts] == ['{"left":2}', '{"left":1}']
            results = {f["id"]: f for f in of(frames, "tool_result")}
            assert results["c1"]["content"] == [{"type": "text", "text": "noted (1 so far)"}]
            assert results["c2"]["content"] == [{"type": "text", "text": "liftoff"}]
            assert results["c2"]["extension"] == "py-notes"

            (host,) = (await rpc.call("ext_list"))["data"]["extensions"]
            assert host["kind"] == "tool-host"
            assert host["state"] == "running"
            assert host["tools"] == ["add_note", "countdown", "list_notes"]
            assert host["ui_elements"] == [
                {"kind": "status", "text": "notes live in this session's state"}
            ]
            assert host["stats"]["calls"] == 2

            # A reload swaps the tool host like an extension; the new one starts fresh.
            reloaded = await rpc.call("ext_reload")
            assert reloaded["data"] == {"stopped": 1, "loaded": 1, "ready": 1, "errors": []}
            await rpc.send({"id": 2, "type": "prompt", "message": "list them"})
            frames = await rpc.until_done()
            (listed,) = of(frames, "tool_result")
            assert listed["content"] == [{"type": "text", "text": "no notes"}]


def fixture_host(tmp_path: Path, **config: Any) -> str:
    where = tmp_path / "exts" / "fixture-host"
    where.mkdir(parents=True)
    shutil.copy(TOOLHOST_FIXTURES / "py_tools.py", where / "py_tools.py")
    manifest = {
        "name": "fixture-host",
        "kind": "tool-host",
        "runtime": "python",
        "config": {"modules": ["./py_tools.py"], **config},
    }
    (where / "extension.json").write_text(json.dumps(manifest))
    return str(where)


async def test_the_runtime_gets_parts_native_results_and_display_forms(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    turns = script(
        tmp_path,
        {
            "tool_calls": [
                {"id": "n1", "name": "echo", "args": {"text": "native", "parts": 2}},
                {"id": "b1", "name": "boom", "args": {}},
            ]
        },
        {"text": "ok"},
    )
    # The fixture's tools need the tag "tools", which get_tags gives a model of that id.
    opts = options(
        home,
        work,
        provider="scripted",
        script=turns,
        model="tools",
        sandbox="off",
        ext_paths=[fixture_host(tmp_path)],
    )
    with trio.fail_after(TIMEOUT):
        async with open_runtime(opts) as rt:
            events = await rt.prompt("go").collect()
            messages = rt.messages()
    calls = {e.id: e for e in events if isinstance(e, ToolCallEvent)}
    assert calls["n1"].preview == "py preview of echo"
    parts = [e for e in events if isinstance(e, ToolProgress) and e.id == "n1"]
    assert [(p.text, p.part) for p in parts] == [
        ('{"part":0}', {"part": 0}),
        ('{"part":1}', {"part": 1}),
    ]
    results = {e.id: e for e in events if isinstance(e, ToolResultEvent)}
    assert results["n1"].display == {"markdown": "**native**", "count": 0}
    assert results["n1"].content == [TextContent(text="native")]
    assert results["b1"].is_error
    assert results["b1"].display is None
    # The transcript keeps the provider-native form beside the text.
    (tool_message,) = [m for m in messages if m.role == "tool"]
    stored = {b.call_id: b for b in tool_message.content if isinstance(b, ToolResultContent)}
    native = [{"type": "input_text", "text": "native"}]
    assert stored["n1"].native == NativeContent(format="openai.responses", content=native)
    assert stored["b1"].native is None
    # ... which the OpenAI provider sends structurally, as Chat Completions text parts.
    sent = {m.get("tool_call_id"): m for m in _map_messages("", messages) if m["role"] == "tool"}
    assert sent["n1"]["content"] == [{"type": "text", "text": "native"}]
    assert isinstance(sent["b1"]["content"], str)
    assert "kaboom" in sent["b1"]["content"]


def test_the_terminal_shows_a_hosts_preview_and_display_form_made_safe() -> None:
    import io

    from agent._cli.render import HumanRenderer
    from agent._cli.screen import Terminal, make_console
    from agent._cli.term import ColorMode

    out = io.StringIO()
    renderer = HumanRenderer(Terminal(make_console(out, ColorMode.NEVER)))
    renderer.show(
        ToolCallEvent(id="c1", name="add_note", args={"text": "x"}, preview="add\x1b[2J note")
    )
    display = {"markdown": "**noted**\nsecond line", "count": 1}
    content = [TextContent(text="model text")]
    renderer.show(ToolResultEvent(id="c1", is_error=False, content=content, display=display))
    shown = out.getvalue()
    assert "→ add_note add\\x1b[2J note" in shown
    assert "← **noted** second line" in shown
    assert "model text" not in shown
    assert "\x1b" not in shown


async def test_a_flood_of_parts_keeps_the_latest_and_counts_the_rest() -> None:
    from agent._registry import PartRelay

    seen: list[tuple[str, Any]] = []

    async def progress(text: str, part: Any = None, /) -> None:
        seen.append((text, part))

    relay = PartRelay(progress)
    for i in range(1000):  # nobody reads while they arrive: memory stays bounded
        relay.put({"part": {"i": i}})
    await relay.flush()
    assert seen[0] == ("[… 936 more parts]", None)
    assert [p for _, p in seen[1:]] == [{"i": i} for i in range(936, 1000)]


def test_openai_sends_a_chat_completions_envelope_as_it_is() -> None:
    from agent import Message, ToolCallContent

    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    native = NativeContent(format="openai.chat_completions", content=parts)
    odd = NativeContent(format="openai.responses", content=[{"type": "input_image"}])
    call = [
        ToolCallContent(id="k1", name="t", args={}),
        ToolCallContent(id="k2", name="t", args={}),
    ]
    results = [
        ToolResultContent(
            call_id="k1", is_error=False, content=[TextContent(text="a b")], native=native
        ),
        ToolResultContent(
            call_id="k2", is_error=False, content=[TextContent(text="fallback")], native=odd
        ),
    ]
    messages = [
        Message(role="assistant", content=list(call), time=""),
        Message(role="tool", content=list(results), time=""),
    ]
    sent = {
        m.get("tool_call_id"): m["content"]
        for m in _map_messages("", messages)
        if m["role"] == "tool"
    }
    assert sent == {"k1": parts, "k2": "fallback"}


async def test_only_a_tool_hosts_tool_asks_for_a_preview() -> None:
    # An extension has no previews: its tools answer None without a request to the
    # supervisor (a round trip per call that always answered nothing).
    from agent._registry import ToolRegistry
    from supervisor import ChildKind, ToolInfo

    asked: list[str] = []

    class Caller:
        def tools(self) -> list[ToolInfo]:
            return [
                ToolInfo(name="ext_tool", description="", schema={}, extension="e"),
                ToolInfo(
                    name="host_tool",
                    description="",
                    schema={},
                    extension="h",
                    kind=ChildKind.TOOL_HOST,
                ),
            ]

        async def call_tool(self, name: str, args: dict[str, Any], **_: Any) -> Any:
            raise AssertionError("not called")

        async def preview_tool_call(self, name: str, args: dict[str, Any]) -> str | None:
            asked.append(name)
            return f"preview of {name}"

    registry = ToolRegistry([], Caller())
    registry.sync()
    assert await registry.preview("ext_tool", {}) is None
    assert await registry.preview("host_tool", {}) == "preview of host_tool"
    assert asked == ["host_tool"]
