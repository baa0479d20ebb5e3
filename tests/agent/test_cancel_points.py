"""Cancel a turn at every checkpoint of the agent loop in turn; the transcript stays answerable.

A trio :class:`~trio.abc.Instrument` counts the steps of the prompt's tasks (the
task running :meth:`AgentLoop.prompt` and every task it starts) and cancels the
turn's scope at the N-th, so the cancellation is delivered at the N-th checkpoint;
the sweep runs N = 1, 2, ... until a turn ends before the N-th step. That covers
every await of the loop, the provider, the hooks, the tools, the emits and the
transcript, in the order they happen, for: a text reply, a reply with one tool
call, a reply with several, and a tool that is running.

After each cancelled turn: every tool call in the transcript has exactly one
result, in memory and in the session file read back; every ``tool_call`` event
has one ``tool_result`` event; the turn ended with ``turn_end``; and the next
prompt is accepted by a strict provider, which maps each request with the real
OpenAI and Anthropic mappings and refuses it as those services would
(``helpers.api_rules``).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from helpers.agentkit import Collector
from helpers.cancelkit import StrictModel, cancel_at_step, written_messages

from agent import (
    AgentLoop,
    Message,
    ScriptedProvider,
    TextContent,
    ToolCallEvent,
    ToolResultContent,
    ToolResultEvent,
    ToolSpec,
    TurnEnd,
    parse_script,
)
from agent._exchanges import ABORTED_BEFORE_RUN, ABORTED_WHILE_RUNNING, tool_call_problems
from agent._registry import ToolRegistry
from agent._sessions import SessionHeader, SessionStore
from agent._tools.base import Progress, ToolKind, ToolRunResult, text_result
from agent._transcript import Transcript
from supervisor import EmitEvent, InterceptOutcome

OBJ: dict[str, Any] = {"type": "object", "properties": {}}
#: Prompt text -> the tool calls of the model's first answer to it.
SCENARIOS: dict[str, list[str]] = {
    "text": [],
    "one call": ["look"],
    "several calls": ["look", "look", "work"],
    "a running tool": ["work"],
}


class Hooks:
    """An extension that intercepts everything and allows it, one round trip per hook."""

    def __init__(self) -> None:
        self.allow = InterceptOutcome(consulted=["guard"])

    async def intercept_turn_start(self, step: int) -> InterceptOutcome:
        await trio.lowlevel.checkpoint()
        return self.allow

    async def intercept_tool_call(
        self, tool_id: str, tool_name: str, tool_args: dict[str, Any], *, builtin: bool = True
    ) -> InterceptOutcome:
        await trio.lowlevel.checkpoint()
        return self.allow

    async def intercept_assistant_message(self, text: str) -> InterceptOutcome:
        await trio.lowlevel.checkpoint()
        return self.allow

    async def emit(self, event: EmitEvent) -> None:
        await trio.lowlevel.checkpoint()

    async def set_host_info(self, provider: str, model: str, cwd: str) -> None:
        await trio.lowlevel.checkpoint()


class Tool:
    """``look`` answers after a checkpoint; ``work`` runs for a few (progress included)."""

    def __init__(self, name: str, steps: int) -> None:
        self._spec = ToolSpec(name=name, description=name, schema=OBJ)
        self._steps = steps

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    kind = ToolKind.BUILTIN
    owner = ""

    async def run(self, call_id: str, args: dict[str, Any], progress: Progress) -> ToolRunResult:
        for step in range(self._steps):
            await progress(f"step {step}")
            await trio.sleep(0)
        return text_result(f"{self._spec.name} done")


async def prompt_cancelled_at(loop: AgentLoop, text: str, at: int) -> tuple[Collector, bool]:
    """Run one prompt, cancelled at step ``at`` of its tasks; its events and whether it was."""
    events = Collector()
    with cancel_at_step(at) as instrument:
        await loop.prompt(text, [], events)
    return events, instrument.fired


def make_loop(tmp_path: Path, model: StrictModel, store: SessionStore | None) -> AgentLoop:
    return AgentLoop(
        provider=model,
        model="m",
        cwd=str(tmp_path),
        registry=ToolRegistry([Tool("look", 1), Tool("work", 4)]),
        hooks=Hooks(),
        transcript=Transcript(store=store),
        compact_threshold=None,
    )


def check_events(events: Collector) -> None:
    assert events.of(TurnEnd), events.types()
    calls = [e.id for e in events.of(ToolCallEvent)]
    results = [e.id for e in events.of(ToolResultEvent)]
    assert sorted(calls) == sorted(results), events.types()


def aborted_texts(messages: list[Message]) -> set[str]:
    return {
        inner.text
        for m in messages
        for b in m.content
        if isinstance(b, ToolResultContent) and b.is_error
        for inner in b.content
        if isinstance(inner, TextContent)
    }


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_a_cancel_at_any_checkpoint_leaves_every_tool_call_answered(
    tmp_path: Path, scenario: str
) -> None:
    store = SessionStore.for_name(tmp_path, "s", SessionHeader(name="s"))
    model = StrictModel(SCENARIOS)
    loop = make_loop(tmp_path, model, store)
    cancelled = 0
    with trio.fail_after(60):
        for at in itertools.count(1):
            events, fired = await prompt_cancelled_at(loop, scenario, at)
            check_events(events)
            memory = loop.messages()
            assert tool_call_problems(memory) == [], (at, memory)
            assert written_messages(tmp_path, "s") == memory, at
            after = Collector()
            await loop.prompt("next", [], after)
            assert after.stops() == ["end_turn"], (at, after.events)
            assert model.refused == []
            if not fired:
                break
            cancelled += 1
            assert after.stops() == ["end_turn"]
    assert cancelled >= (8 if scenario == "text" else 20)
    saved = written_messages(tmp_path, "s")
    assert tool_call_problems(saved) == []
    store.close()
    if SCENARIOS[scenario]:
        # The sweep hit both windows: before the tools ran, and while they ran.
        assert {ABORTED_BEFORE_RUN, ABORTED_WHILE_RUNNING} <= aborted_texts(saved)


async def test_a_failure_after_the_stream_still_answers_every_call(tmp_path: Path) -> None:
    """Not only a cancellation: an exception at the same point (a hook's bug) too."""

    class Broken(Hooks):
        async def intercept_assistant_message(self, text: str) -> InterceptOutcome:
            raise RuntimeError("interceptor bug")

    model = StrictModel(SCENARIOS)
    loop = AgentLoop(
        provider=model,
        model="m",
        cwd=str(tmp_path),
        registry=ToolRegistry([Tool("look", 1)]),
        hooks=Broken(),
        compact_threshold=None,
    )
    with trio.fail_after(10), pytest.raises(RuntimeError, match="interceptor bug"):
        await loop.prompt("one call", [], Collector())
    assert [m.role for m in loop.messages()] == ["user", "assistant", "tool"]
    assert tool_call_problems(loop.messages()) == []
    loop._hooks = Hooks()  # the bug is gone; the session goes on
    after = Collector()
    await loop.prompt("next", [], after)
    assert after.stops() == ["end_turn"]
    assert model.refused == []


async def test_a_cancel_at_any_checkpoint_of_a_compaction(tmp_path: Path) -> None:
    """Compaction before a prompt (threshold passed), cancelled anywhere: the summary
    replaces the whole transcript or nothing, so it never cuts a call from its result."""
    store = SessionStore.for_name(tmp_path, "s", SessionHeader(name="s"))
    model = StrictModel(SCENARIOS)
    loop = make_loop(tmp_path, model, store)
    with trio.fail_after(60):
        await loop.prompt("several calls", [], Collector())
        loop.compact_threshold = 1  # every prompt compacts first
        for at in itertools.count(1):
            before = loop.messages()
            events, fired = await prompt_cancelled_at(loop, "one call", at)
            check_events(events)
            memory = loop.messages()
            assert tool_call_problems(memory) == [], (at, memory)
            assert written_messages(tmp_path, "s") == memory
            if fired and memory[: len(before)] == before:
                pass  # cancelled before the summary replaced anything
            else:
                assert memory[0].role == "user"
                assert "the summary" in memory[0].content[0].text  # type: ignore[union-attr]
            assert model.refused == []
            if not fired:
                break
    assert at > 20
    store.close()


async def test_a_model_that_repeats_a_call_id_cannot_break_the_pairing(tmp_path: Path) -> None:
    script = [
        {"tool_calls": [{"name": "look", "id": "dup"}, {"name": "look", "id": "dup"}]},
        {"text": "done"},
        {"text": "ok"},
    ]
    loop = AgentLoop(
        provider=ScriptedProvider(parse_script("\n".join(json.dumps(t) for t in script))),
        model="m",
        cwd=str(tmp_path),
        registry=ToolRegistry([Tool("look", 1)]),
        hooks=Hooks(),
        compact_threshold=None,
    )
    events = Collector()
    with trio.fail_after(10):
        await loop.prompt("go", [], events)
        assert sorted(e.id for e in events.of(ToolResultEvent)) == ["dup", "dup_1"]
        assert tool_call_problems(loop.messages()) == []
        after = Collector()
        await loop.prompt("next", [], after)  # the strict scripted provider accepts it
    assert after.stops() == ["end_turn"]
