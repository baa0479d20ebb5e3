"""The agent loop's pure logic, driven by the scripted provider.

The supervisor is replaced here only by :class:`FakeHooks`, the loop's ``Hooks``
seam, to pin down event order, concurrency, cancellation and compaction without
extension processes. ``test_hooks.py`` runs the same outcomes against real ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing
from helpers.agentkit import Collector

from agent import (
    AgentBusy,
    AgentLoop,
    CompactDone,
    ErrorEvent,
    ExtDisplay,
    LoopState,
    Message,
    OfflineProvider,
    ScriptedProvider,
    TextContent,
    TextDelta,
    ToolCallContent,
    ToolResultContent,
    ToolSpec,
    TurnEnd,
    Usage,
    parse_script,
)
from agent._providers.base import ModelRequest, ProviderEvent
from agent._registry import ToolRegistry
from agent._tools.base import Progress, ToolKind, ToolRunResult, error_result, text_result
from agent._transcript import SUMMARY_PREFIX, is_compaction
from supervisor import EmitEvent, InterceptOutcome

OBJ: dict[str, Any] = {"type": "object", "properties": {}}


class FakeHooks:
    """Allows everything unless told otherwise; records lifecycle events."""

    def __init__(self, consulted: list[str] | None = None) -> None:
        self.turn = InterceptOutcome(consulted=consulted or [])
        self.tool = InterceptOutcome(consulted=consulted or [])
        self.text = InterceptOutcome(consulted=consulted or [])
        self.emitted: list[EmitEvent] = []
        self.host_info: list[tuple[str, str, str]] = []
        #: (tool name, builtin) of every tool_call intercept.
        self.vetted: list[tuple[str, bool]] = []

    async def intercept_turn_start(self, step: int) -> InterceptOutcome:
        return self.turn

    async def intercept_tool_call(
        self, tool_id: str, tool_name: str, tool_args: dict[str, Any], *, builtin: bool = True
    ) -> InterceptOutcome:
        self.vetted.append((tool_name, builtin))
        return self.tool

    async def intercept_assistant_message(self, text: str) -> InterceptOutcome:
        return self.text

    async def emit(self, event: EmitEvent) -> None:
        self.emitted.append(event)

    async def set_host_info(self, provider: str, model: str, cwd: str) -> None:
        self.host_info.append((provider, model, cwd))


class Recorder:
    """A tool that records its arguments; can wait on a gate or fail."""

    def __init__(self, name: str, gate: trio.Event | None = None, fail: bool = False) -> None:
        self._spec = ToolSpec(name=name, description="records", schema=OBJ)
        self.calls: list[dict[str, Any]] = []
        self.gate = gate
        self.fail = fail
        self.running = 0
        self.peak = 0

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    kind = ToolKind.BUILTIN
    owner = ""

    async def run(self, call_id: str, args: dict[str, Any], progress: Progress) -> ToolRunResult:
        self.calls.append(args)
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await progress(f"working on {call_id}")
            if self.gate is not None:
                await self.gate.wait()
            if self.fail:
                raise RuntimeError("tool bug")
            return text_result(f"{self.spec.name} got {sorted(args.items())}")
        finally:
            self.running -= 1


def make_loop(script: str, *tools: Any, hooks: FakeHooks | None = None, **kw: Any) -> AgentLoop:
    return AgentLoop(
        provider=ScriptedProvider(parse_script(script)),
        model="scripted",
        cwd="/tmp",
        registry=ToolRegistry(list(tools)),
        hooks=hooks or FakeHooks(),
        **kw,
    )


async def prompt(loop: AgentLoop, text: str = "go") -> Collector:
    events = Collector()
    with trio.fail_after(10):
        await loop.prompt(text, [], events)
    return events


async def test_text_only_turn_event_order() -> None:
    loop = make_loop('{"text": "hello there", "chunk": 5}')
    loop.assume_no_interceptors()
    events = await prompt(loop)
    assert events.types() == [
        "UserMessage",
        "TurnStart",
        "AssistantStart",
        "TextDelta",
        "TextDelta",
        "TextDelta",
        "AssistantMessage",
        "Usage",
        "TurnEnd",
    ]
    assert events.streamed() == "hello there"
    assert events.stops() == ["end_turn"]
    assert [m.role for m in loop.messages()] == ["user", "assistant"]


async def test_text_is_held_until_interceptors_had_their_say() -> None:
    hooks = FakeHooks(consulted=["guard"])
    loop = make_loop('{"text": "aaa bbb", "chunk": 2}\n{"text": "ccc"}', hooks=hooks)
    first = await prompt(loop)
    assert [e.delta for e in first.of(TextDelta)] == ["aaa bbb"]
    second = await prompt(loop)
    assert [e.delta for e in second.of(TextDelta)] == ["ccc"]
    hooks_free = make_loop('{"text": "x1 y2", "chunk": 2}\n{"text": "zzzz", "chunk": 2}')
    await prompt(hooks_free)
    live = await prompt(hooks_free)
    assert [e.delta for e in live.of(TextDelta)] == ["zz", "zz"]


async def test_tool_call_flow_and_lifecycle_events() -> None:
    hooks = FakeHooks()
    tool = Recorder("probe")
    script = '{"tool_calls": [{"name": "probe", "args": {"a": 1}, "id": "c1"}]}\n{"text": "done"}'
    loop = make_loop(script, tool, hooks=hooks)
    events = await prompt(loop)
    assert tool.calls == [{"a": 1}]
    assert events.stops() == ["tool_use", "end_turn"]
    assert [c.name for c in events.calls()] == ["probe"]
    assert events.result_texts() == ["probe got [('a', 1)]"]
    assert "ToolProgress" in events.types()
    roles = [m.role for m in loop.messages()]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert [e.event for e in hooks.emitted] == [
        "turn_start",
        "tool_call",
        "turn_end",
        "turn_start",
        "assistant_message",
        "turn_end",
    ]
    assert hooks.emitted[1].tool_args == {"a": 1}


async def test_several_tool_calls_run_concurrently() -> None:
    gate = trio.Event()
    tool = Recorder("slow", gate=gate)
    calls = ", ".join(f'{{"name": "slow", "args": {{"n": {i}}}}}' for i in range(3))
    loop = make_loop(f'{{"tool_calls": [{calls}]}}\n{{"text": "ok"}}', tool)
    events = Collector()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(loop.prompt, "go", [], events)
        with trio.fail_after(10):
            while tool.running < 3:
                await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert tool.peak == 3
    results = loop.messages()[2]
    assert [b.call_id for b in results.content if isinstance(b, ToolResultContent)] == [
        "s1_0",
        "s1_1",
        "s1_2",
    ]


async def test_blocked_turn_ends_with_the_reason() -> None:
    hooks = FakeHooks()
    hooks.turn = InterceptOutcome(block=True, reason="closed", blocked_by="gate")
    loop = make_loop('{"text": "never"}', hooks=hooks)
    events = await prompt(loop)
    (end,) = events.of(TurnEnd)
    assert end.stop == "blocked"
    assert end.error == "blocked by extension gate: closed"
    assert "AssistantStart" not in events.types()
    assert [m.role for m in loop.messages()] == ["user"]


async def test_blocked_tool_call_is_an_error_result_and_does_not_run() -> None:
    hooks = FakeHooks()
    hooks.tool = InterceptOutcome(block=True, reason="no way", blocked_by="guard")
    tool = Recorder("probe")
    loop = make_loop('{"tool_calls": [{"name": "probe"}]}\n{"text": "ok"}', tool, hooks=hooks)
    events = await prompt(loop)
    assert tool.calls == []
    (result,) = events.results()
    assert result.is_error
    assert events.result_texts() == ["blocked by extension guard: no way"]
    assert "tool_call" not in [e.event for e in hooks.emitted]


async def test_rewritten_args_reach_the_tool_but_not_the_model() -> None:
    hooks = FakeHooks()
    hooks.tool = InterceptOutcome(args={"safe": True})
    tool = Recorder("probe")
    loop = make_loop(
        '{"tool_calls": [{"name": "probe", "args": {"rm": "-rf"}}]}\n{"text": "ok"}',
        tool,
        hooks=hooks,
    )
    events = await prompt(loop)
    assert tool.calls == [{"safe": True}]
    assert events.calls()[0].args == {"rm": "-rf"}
    call = loop.messages()[1].content[0]
    assert isinstance(call, ToolCallContent)
    assert call.args == {"rm": "-rf"}


async def test_rewritten_and_suppressed_assistant_text() -> None:
    hooks = FakeHooks(consulted=["guard"])
    hooks.text = InterceptOutcome(text="the [redacted]", consulted=["guard"])
    loop = make_loop('{"text": "the SECRET"}\n{"text": "hide me"}', hooks=hooks)
    events = await prompt(loop)
    assert events.shown() == ["the [redacted]"]
    assert events.streamed() == "the [redacted]"
    assert loop.messages()[-1].content == [TextContent(text="the SECRET")]
    assert hooks.emitted[1] == EmitEvent(event="assistant_message", text="the [redacted]")
    hooks.text = InterceptOutcome(block=True, reason="too chatty", blocked_by="g", consulted=["g"])
    events = await prompt(loop)
    assert events.shown() == [""]
    assert events.streamed() == ""
    assert [d.text for d in events.of(ExtDisplay)] == ["assistant message hidden: too chatty"]
    assert loop.messages()[-1].content == [TextContent(text="hide me")]


async def test_provider_error_ends_the_step_and_the_session_goes_on() -> None:
    loop = make_loop('{"error": "overloaded", "status": 529}\n{"text": "back"}')
    events = await prompt(loop)
    (end,) = events.of(TurnEnd)
    assert end.stop == "error"
    assert end.error == "scripted: overloaded"
    assert loop.state is LoopState.IDLE
    again = await prompt(loop)
    assert again.stops() == ["end_turn"]
    assert again.shown() == ["back"]


async def test_stream_breaking_mid_way() -> None:
    loop = make_loop('{"text": "partial answer", "break_after_chars": 7}\n{"text": "ok"}')
    loop.assume_no_interceptors()
    events = await prompt(loop)
    assert events.streamed() == "partial"
    end = events.of(TurnEnd)[0]
    assert end.stop == "error"
    assert "stream broke after 7" in (end.error or "")
    assert [m.role for m in loop.messages()] == ["user"]


async def test_cancelled_turn_emits_aborted_and_keeps_a_valid_transcript() -> None:
    gate = trio.Event()
    tool = Recorder("slow", gate=gate)
    hooks = FakeHooks()
    loop = make_loop('{"tool_calls": [{"name": "slow"}, {"name": "slow"}]}', tool, hooks=hooks)
    events = Collector()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(loop.prompt, "go", [], events)
            while tool.running < 2:
                await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert events.stops() == ["aborted"]
    assert events.types()[-1] == "TurnEnd"
    assert hooks.emitted[-1] == EmitEvent(event="turn_end", stop="aborted")
    results = loop.messages()[-1]
    assert results.role == "tool"
    assert all(
        isinstance(b, ToolResultContent) and b.is_error and "aborted" in b.content[0].text  # type: ignore[union-attr]
        for b in results.content
    )
    assert loop.state is LoopState.IDLE


async def test_cancel_during_model_delay(autojump_clock: trio.testing.MockClock) -> None:
    loop = make_loop('{"text": "slow", "delay": 100}')
    events = Collector()
    with trio.move_on_after(1):
        await loop.prompt("go", [], events)
    assert events.stops() == ["aborted"]
    assert [m.role for m in loop.messages()] == ["user"]


async def test_step_limit() -> None:
    tool = Recorder("probe")
    loop = make_loop('{"tool_calls": [{"name": "probe"}]}\n' * 5, tool, max_steps=3)
    events = await prompt(loop)
    assert events.stops() == ["tool_use"] * 3
    (error,) = events.of(ErrorEvent)
    assert "stopped after 3 steps" in error.message


async def test_unknown_tool_and_crashing_tool_become_error_results() -> None:
    loop = make_loop(
        '{"tool_calls": [{"name": "nope"}, {"name": "buggy"}]}\n{"text": "ok"}',
        Recorder("buggy", fail=True),
    )
    events = await prompt(loop)
    texts = events.result_texts()
    assert "unknown tool 'nope'; available tools: buggy" in texts
    assert any("tool buggy failed unexpectedly: RuntimeError('tool bug')" in t for t in texts)
    assert events.stops() == ["tool_use", "end_turn"]


async def test_usage_totals_accumulate() -> None:
    loop = make_loop(
        '{"text": "a", "usage": {"input": 10, "output": 2, "cost_usd": 0.5}}\n'
        '{"text": "b", "usage": {"input": 5, "output": 1, "cost_usd": 0.25}}'
    )
    await prompt(loop)
    events = await prompt(loop)
    (usage,) = events.of(Usage)
    assert usage.input == 5
    assert usage.cumulative.input == 15
    assert loop.usage().cost_usd == pytest.approx(0.75)


async def test_manual_and_automatic_compaction() -> None:
    loop = make_loop('{"text": "answer"}', compact_threshold=None)
    loop._provider = ScriptedProvider(parse_script('{"text": "answer"}'), cycle=True)
    for i in range(3):
        await prompt(loop, f"question {i}")
    events = Collector()
    summary = await loop.compact(events)
    assert "question 2" in summary
    assert events.of(CompactDone)[0].summary == summary
    (only,) = loop.messages()
    assert only.role == "user"
    assert only.content[0].text.startswith(SUMMARY_PREFIX)  # type: ignore[union-attr]
    loop.compact_threshold = 500
    sizes = []
    compactions = 0
    for i in range(30):
        events = await prompt(loop, f"question {i} " + "padding " * 10)
        sizes.append(loop.transcript.size)
        compactions += len(events.of(CompactDone))
    assert compactions >= 5
    assert max(sizes) < 2000


async def test_busy_clear_set_model_and_host_info() -> None:
    hooks = FakeHooks()
    gate = trio.Event()
    loop = make_loop('{"tool_calls": [{"name": "slow"}]}\n{"text": "ok"}', Recorder("slow", gate))
    loop._hooks = hooks
    async with trio.open_nursery() as nursery:
        nursery.start_soon(loop.prompt, "go", [], Collector())
        await trio.testing.wait_all_tasks_blocked()
        assert loop.state is LoopState.RUNNING
        with pytest.raises(AgentBusy):
            await loop.prompt("again", [], Collector())
        with pytest.raises(AgentBusy):
            loop.clear()
        gate.set()
    loop.clear()
    assert loop.messages() == []
    with pytest.raises(ValueError, match="unknown model"):
        loop.set_model("gpt-9")
    loop._provider = OfflineProvider()
    loop.set_model("offline")
    await prompt(loop, "hi")
    assert hooks.host_info == [("offline", "offline", "/tmp")]


async def test_offline_end_to_end_with_builtin_like_tool() -> None:
    tool = Recorder("weather")
    tool._spec = ToolSpec(
        name="weather",
        description="",
        schema={"type": "object", "properties": {"city": {}}, "required": ["city"]},
    )
    loop = AgentLoop(
        provider=OfflineProvider(),
        model="offline",
        cwd="/tmp",
        registry=ToolRegistry([tool]),
        hooks=FakeHooks(),
    )
    events = await prompt(loop, "weather in Berlin and Paris")
    assert sorted(c["city"] for c in tool.calls) == ["Berlin", "Paris"]
    assert "Here is what I found." in events.shown()[-1]


def test_error_result_helpers() -> None:
    assert error_result("x").is_error
    assert not text_result("x").is_error
    assert isinstance(Message, type)


class _EmptySummaries(ScriptedProvider):
    """The scripted model, answering a compaction request with nothing at all."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        if not is_compaction(request):
            async for event in super().stream(request):
                yield event


async def test_an_empty_model_summary_is_replaced_by_a_local_one_and_said() -> None:
    loop = make_loop('{"text": "answer"}', compact_threshold=None)
    await prompt(loop, "build the parser")
    loop._provider = _EmptySummaries(parse_script('{"text": "answer"}'))
    events = Collector()
    summary = await loop.compact(events)
    assert "build the parser" in summary
    [error] = events.of(ErrorEvent)
    assert (
        error.message == "compaction: the model's summary was empty; used a local summary instead"
    )
