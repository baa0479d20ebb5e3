"""The turn invariant through the runtime, with a real extension process behind the tools.

* ``abort`` (the RPC command's path, :meth:`Job.abort`) at every checkpoint of a
  job whose tool calls run in the chaos extension, counted by a trio instrument
  over the job task's tree, as in ``test_cancel_points.py``;
* ``ext_reload`` while an extension tool runs, with the same manifest and with a
  broken one (the running generation is kept).

After each: every tool call in the transcript (memory and session file) has one
result, every job ended with exactly one ``done``, and the next prompt is accepted
by a model as strict as the real APIs.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import trio
from helpers.agentkit import options
from helpers.cancelkit import StrictModel, cancel_at_step, written_messages
from helpers.rpc_harness import chaos_ext

from agent import AgentEvent, Done, ToolCallEvent, ToolResultEvent, TurnEnd, open_runtime
from agent._exchanges import tool_call_problems
from agent._runtime import Runtime

pytestmark = pytest.mark.usefixtures("no_leaks")

SCENARIOS = {"one": ["chaos_echo"], "two": ["chaos_echo", "chaos_echo"]}
ECHO = {"text": "hi"}


def _jobs_task() -> trio.lowlevel.Task:
    """The runtime's job task (it runs every prompt of the queue)."""
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        assert task is not None
        if task.name.endswith("Runtime._run_jobs"):
            return task
        todo += [t for n in task.child_nurseries for t in n.child_tasks]
    raise AssertionError("no job task")


async def _job(rt: Runtime, text: str, at: int | None = None) -> tuple[list[AgentEvent], bool]:
    stream = rt.prompt(text)
    if at is None:
        return await stream.collect(), False
    with cancel_at_step(at, root=_jobs_task(), cancel=stream.job.abort) as instrument:
        events = await stream.collect()
    return events, instrument.fired


def _check(rt: Runtime, home: Path, events: list[AgentEvent]) -> None:
    assert sum(isinstance(e, Done) for e in events) == 1
    assert isinstance(events[-1], Done)
    assert any(isinstance(e, TurnEnd) for e in events)
    calls = sorted(e.id for e in events if isinstance(e, ToolCallEvent))
    assert calls == sorted(e.id for e in events if isinstance(e, ToolResultEvent))
    memory = rt.messages()
    assert tool_call_problems(memory) == []
    assert written_messages(home, "s") == memory


async def _next_is_accepted(rt: Runtime, model: StrictModel) -> None:
    events, _ = await _job(rt, "next")
    stops = [e.stop for e in events if isinstance(e, TurnEnd)]
    assert stops == ["end_turn"], events
    assert model.refused == []


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_abort_at_every_checkpoint_of_a_job_with_extension_tools(
    tmp_path: Path, home: Path, work: Path, scenario: str
) -> None:
    model = StrictModel(SCENARIOS, ECHO)
    opts = options(home, work, ext_paths=[chaos_ext(tmp_path)], sandbox="off", session="s")
    aborted = 0
    with trio.fail_after(120):
        async with open_runtime(opts, provider=model, compact_threshold=None) as rt:
            for at in itertools.count(1):
                events, fired = await _job(rt, scenario, at)
                _check(rt, home, events)
                await _next_is_accepted(rt, model)
                if not fired:
                    break
                aborted += 1
    assert aborted >= 15


@pytest.mark.parametrize("broken", [False, True], ids=["same", "broken-manifest"])
async def test_ext_reload_while_an_extension_tool_runs(
    tmp_path: Path, home: Path, work: Path, broken: bool
) -> None:
    model = StrictModel(SCENARIOS, ECHO)
    ext = Path(chaos_ext(tmp_path, "--tool-delay", "0.5"))
    manifest = (ext / "extension.json").read_text()
    opts = options(home, work, ext_paths=[str(ext)], sandbox="off", session="s")
    with trio.fail_after(60):
        async with open_runtime(opts, provider=model, compact_threshold=None) as rt:
            stream = rt.prompt("two")
            events: list[AgentEvent] = []
            async for event in stream:
                events.append(event)
                if isinstance(event, ToolCallEvent) and event.id == "call_2":
                    if broken:
                        (ext / "extension.json").write_text(manifest[:-5])
                    stats = await rt.ext_reload()
                    assert stats.errors if broken else stats.ready == 1
            _check(rt, home, events)
            results = [e for e in events if isinstance(e, ToolResultEvent)]
            assert len(results) == 2
            (ext / "extension.json").write_text(manifest)
            await _next_is_accepted(rt, model)
            events, _ = await _job(rt, "one")  # the extension still answers
            _check(rt, home, events)
            assert [e.is_error for e in events if isinstance(e, ToolResultEvent)] == [False]
