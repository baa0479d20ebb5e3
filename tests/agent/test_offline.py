"""The offline provider's rules, and its determinism."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import pytest
import trio

from agent import (
    Message,
    ModelRequest,
    OfflineProvider,
    TextContent,
    ToolCallContent,
    ToolResultContent,
    ToolSpec,
)
from agent._messages import now_iso
from agent._providers.base import ProviderStop, ProviderTextDelta, ProviderToolCall
from agent._providers.offline import plan_reply
from agent._transcript import COMPACT_SYSTEM, SUMMARY_PREFIX

OBJ: dict[str, Any] = {"type": "object", "properties": {}}
BUILTINS = [ToolSpec(name=n, description="", schema=OBJ) for n in ("read", "write", "edit", "bash")]
WEATHER = ToolSpec(
    name="weather",
    description="",
    schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
ECHO = ToolSpec(
    name="chaos_echo",
    description="",
    schema={"type": "object", "properties": {"text": {"type": "string"}}},
)
TOOLS = [*BUILTINS, WEATHER, ECHO]


def user(text: str) -> Message:
    return Message(role="user", content=[TextContent(text=text)], time=now_iso())


def request(text: str, tools: list[ToolSpec] = TOOLS) -> ModelRequest:
    return ModelRequest(model="offline", system="", messages=[user(text)], tools=tools)


def calls(text: str, tools: list[ToolSpec] = TOOLS) -> list[tuple[str, dict[str, Any]]]:
    return plan_reply(request(text, tools))[1]


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("What's the weather in Berlin?", [("weather", {"city": "Berlin"})]),
        (
            "weather in Berlin and Paris",
            [("weather", {"city": "Berlin"}), ("weather", {"city": "Paris"})],
        ),
        ("weather for 'New York'", [("weather", {"city": "New York"})]),
        ("please run `ls -la`", [("bash", {"command": "ls -la"})]),
        ("read README.md", [("read", {"path": "README.md"})]),
        ("show the file src/app.py", [("read", {"path": "src/app.py"})]),
        ("write `hello` to notes.txt", [("write", {"path": "notes.txt", "content": "hello"})]),
        (
            "replace `a` with `b` in x.txt",
            [("edit", {"path": "x.txt", "old_text": "a", "new_text": "b"})],
        ),
        ('call chaos_echo {"text": "one"}', [("chaos_echo", {"text": "one"})]),
        ('use weather with {"city": "Rome"}', [("weather", {"city": "Rome"})]),
        (
            "read a.txt and run `wc -l a.txt`",
            [("read", {"path": "a.txt"}), ("bash", {"command": "wc -l a.txt"})],
        ),
        ("chaos_echo please", [("chaos_echo", {})]),
        ("chaos_echo with hello", [("chaos_echo", {"text": "hello"})]),
    ],
)
def test_tool_rules(prompt: str, expected: list[tuple[str, dict[str, Any]]]) -> None:
    assert calls(prompt) == expected


def test_tools_not_offered_are_not_called() -> None:
    assert calls("run `ls` and weather in Oslo", tools=[]) == []
    assert calls("run `ls`", tools=[WEATHER]) == []


def test_say_answers_exactly() -> None:
    assert plan_reply(request('say "the code is SECRET"')) == ("the code is SECRET", [])
    assert plan_reply(request("repeat: weather in Berlin")) == ("weather in Berlin", [])


def test_greeting_and_plain_answer() -> None:
    greeting, none = plan_reply(request("Greet me very briefly. Add one emoji."))
    assert greeting.startswith("Hello!")
    assert none == []
    plain, none = plan_reply(request("what is the meaning of life"))
    assert "offline model" in plain
    assert "`weather`" in plain
    assert none == []


def test_after_tool_results_it_summarises() -> None:
    assistant = Message(
        role="assistant",
        content=[
            ToolCallContent(id="a", name="weather", args={"city": "Berlin"}),
            ToolCallContent(id="b", name="bash", args={"command": "rm -rf /"}),
        ],
        time=now_iso(),
    )
    results = Message(
        role="tool",
        content=[
            ToolResultContent(
                call_id="a", is_error=False, content=[TextContent(text="Berlin: 3°C")]
            ),
            ToolResultContent(call_id="b", is_error=True, content=[TextContent(text="refused")]),
        ],
        time=now_iso(),
    )
    req = ModelRequest(model="o", system="", messages=[user("x"), assistant, results], tools=TOOLS)
    text, none = plan_reply(req)
    assert none == []
    assert "1 of 2 tool calls succeeded" in text
    assert "`weather`: Berlin: 3°C" in text
    assert "`bash` failed: refused" in text


def test_compaction_and_summary_prompt() -> None:
    req = ModelRequest(model="o", system=COMPACT_SYSTEM, messages=[user("fix the bug")], tools=[])
    summary, none = plan_reply(req)
    assert "fix the bug" in summary
    assert none == []
    after = plan_reply(request(f"{SUMMARY_PREFIX}\nearlier stuff"))
    assert after[1] == []


async def test_stream_is_deterministic() -> None:
    async def run() -> list[Any]:
        provider = OfflineProvider()
        async with aclosing(provider.stream(request("weather in Berlin and Paris"))) as s:
            return [e async for e in s]

    first, second = await run(), await run()
    assert first == second
    assert (
        "".join(e.text for e in first if isinstance(e, ProviderTextDelta))
        == "Let me use `weather`."
    )
    assert [e.args for e in first if isinstance(e, ProviderToolCall)] == [
        {"city": "Berlin"},
        {"city": "Paris"},
    ]
    assert first[-1] == ProviderStop(reason="tool_use")


def test_models() -> None:
    provider = OfflineProvider()
    assert provider.name == "offline"
    assert [m.id for m in provider.models()] == ["offline"]


async def test_cancelled_mid_stream() -> None:
    provider = OfflineProvider()
    seen: list[Any] = []
    with trio.CancelScope() as scope:
        async with aclosing(provider.stream(request("tell me a long story please"))) as stream:
            async for event in stream:
                seen.append(event)
                scope.cancel()
    assert scope.cancelled_caught
    assert len(seen) == 1
    assert isinstance(seen[0], ProviderTextDelta)
