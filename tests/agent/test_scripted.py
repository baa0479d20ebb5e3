"""The scripted provider: script parsing, streaming, errors, broken streams, delays."""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path

import pytest
import trio
import trio.testing

from agent import (
    Message,
    ModelRequest,
    ProviderError,
    ProviderEvent,
    ScriptedProvider,
    ScriptError,
    ScriptTurn,
    TextContent,
    load_script,
    parse_script,
)
from agent._messages import now_iso
from agent._providers.base import ProviderStop, ProviderTextDelta, ProviderToolCall, ProviderUsage
from agent._transcript import COMPACT_SYSTEM

REQUEST = ModelRequest(
    model="scripted",
    system="sys",
    messages=[Message(role="user", content=[TextContent(text="hi")], time=now_iso())],
    tools=[],
)


async def collect(
    provider: ScriptedProvider, request: ModelRequest = REQUEST
) -> list[ProviderEvent]:
    events: list[ProviderEvent] = []
    async with aclosing(provider.stream(request)) as stream:
        async for event in stream:
            events.append(event)
    return events


def text(events: list[ProviderEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, ProviderTextDelta))


def test_parse_skips_comments_and_blank_lines() -> None:
    turns = parse_script('# a comment\n\n{"text": "one"}\n  \n{"tool_calls": [{"name": "x"}]}\n')
    assert [t.text for t in turns] == ["one", ""]
    assert turns[1].tool_calls[0].name == "x"


@pytest.mark.parametrize(
    ("body", "line", "needle"),
    [
        ('{"text": "ok"}\n{"text": \n', 2, "script.jsonl:2"),
        ('{"text": "ok"}\n\n{"txet": "typo"}\n', 3, "txet"),
        ('{"delay": -1}\n', 1, "delay must be >= 0"),
        ('{"tool_calls": [{"args": {}}]}\n', 1, "name"),
        ('{"tool_calls": [{"name": ""}]}\n', 1, "non-empty name"),
        ('{"stop": "tool_use"}\n', 1, "stop"),
        ('{"break_after_chars": -3}\n', 1, "break_after_chars"),
        ("[1, 2]\n", 1, "script.jsonl:1"),
    ],
)
def test_malformed_script_names_file_and_line(body: str, line: int, needle: str) -> None:
    with pytest.raises(ScriptError) as info:
        parse_script(body, "script.jsonl")
    assert info.value.path == "script.jsonl"
    assert info.value.line == line
    assert needle in str(info.value)
    assert str(info.value).startswith(f"script.jsonl:{line}:")


def test_empty_script_is_an_error() -> None:
    with pytest.raises(ScriptError, match="no turns"):
        parse_script("# nothing\n", "empty.jsonl")


def test_load_script_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(ScriptError, match="cannot read script") as info:
        load_script(str(missing))
    assert str(missing) in str(info.value)


async def test_text_tool_calls_usage_and_stop() -> None:
    turn = ScriptTurn(
        text="Let me look at that.",
        chunk=5,
        tool_calls=[
            *parse_script('{"tool_calls": [{"name": "read", "args": {"path": "a"}, "id": "c1"}]}')[
                0
            ].tool_calls,
            *parse_script('{"tool_calls": [{"name": "bash", "args": {"command": "ls"}}]}')[
                0
            ].tool_calls,
        ],
    )
    events = await collect(ScriptedProvider([turn]))
    deltas = [e for e in events if isinstance(e, ProviderTextDelta)]
    assert [d.text for d in deltas] == ["Let m", "e loo", "k at ", "that."]
    calls = [e for e in events if isinstance(e, ProviderToolCall)]
    assert [(c.id, c.name, c.args) for c in calls] == [
        ("c1", "read", {"path": "a"}),
        ("s1_1", "bash", {"command": "ls"}),
    ]
    assert isinstance(events[-2], ProviderUsage)
    assert events[-1] == ProviderStop(reason="tool_use")


async def test_explicit_stop_and_usage() -> None:
    turns = parse_script('{"text": "cut", "stop": "length", "usage": {"input": 7, "output": 2}}')
    events = await collect(ScriptedProvider(turns))
    assert ProviderUsage(input=7, output=2) in events
    assert events[-1] == ProviderStop(reason="length")


async def test_error_turn_raises_provider_error() -> None:
    provider = ScriptedProvider(parse_script('{"error": "rate limited", "status": 429}'))
    with pytest.raises(ProviderError) as info:
        await collect(provider)
    assert info.value.provider == "scripted"
    assert info.value.status == 429
    assert "rate limited" in str(info.value)


async def test_stream_breaks_mid_way() -> None:
    provider = ScriptedProvider(parse_script('{"text": "abcdefghij", "break_after_chars": 4}'))
    seen: list[ProviderEvent] = []

    async def consume() -> None:
        async with aclosing(provider.stream(REQUEST)) as stream:
            async for event in stream:
                seen.append(event)

    with pytest.raises(ProviderError, match="stream broke after 4") as info:
        await consume()
    assert text(seen) == "abcd"
    assert info.value.retryable
    assert not any(isinstance(e, ProviderStop) for e in seen)


async def test_delay_is_cancellable(autojump_clock: trio.testing.MockClock) -> None:
    provider = ScriptedProvider(parse_script('{"text": "late", "delay": 1000}'))
    with trio.move_on_after(5) as scope:
        await collect(provider)
    assert scope.cancelled_caught
    assert provider.position == 1


async def test_delay_then_text(autojump_clock: trio.testing.MockClock) -> None:
    provider = ScriptedProvider(parse_script('{"text": "late", "delay": 2}'))
    start = trio.current_time()
    events = await collect(provider)
    assert text(events) == "late"
    assert trio.current_time() - start >= 2


async def test_script_runs_out_with_a_clear_error() -> None:
    provider = ScriptedProvider(parse_script('{"text": "only"}'))
    await collect(provider)
    with pytest.raises(ProviderError, match="script ended after 1 turns"):
        await collect(provider)


async def test_cycle_starts_over() -> None:
    provider = ScriptedProvider(parse_script('{"text": "a"}\n{"text": "b"}'), cycle=True)
    got = [text(await collect(provider)) for _ in range(5)]
    assert got == ["a", "b", "a", "b", "a"]
    assert (provider.position, provider.played) == (1, 5)


async def test_compaction_is_answered_locally_without_consuming() -> None:
    provider = ScriptedProvider(parse_script('{"text": "real turn"}'))
    request = ModelRequest(model="m", system=COMPACT_SYSTEM, messages=REQUEST.messages, tools=[])
    summary = text(await collect(provider, request))
    assert "hi" in summary
    assert provider.position == 0
    assert text(await collect(provider)) == "real turn"


def test_model_name_and_repr() -> None:
    provider = ScriptedProvider(parse_script('{"text": "x"}'), model="m1")
    assert provider.name == "scripted"
    assert [m.id for m in provider.models()] == ["m1"]
    assert "turn=0/1" in repr(provider)
