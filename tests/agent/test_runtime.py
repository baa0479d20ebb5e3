"""The in-process runtime: event streams, the FIFO queue, abort, done, and closing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.rpc_harness import chaos_ext, write_script

from agent import (
    AgentBusy,
    AgentEvent,
    AgentOptions,
    AssistantMessage,
    AssistantStart,
    CompactDone,
    Done,
    ErrorEvent,
    ExtDisplay,
    ExtStatus,
    ImageContent,
    JobState,
    RuntimeClosed,
    TextContent,
    TextDelta,
    ToolCallEvent,
    ToolProgress,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    Usage,
    UserMessage,
    open_runtime,
)
from agent._tools.base import ToolRunResult
from agent._tools.bash import BashTool

TIMEOUT = 20


def opts(tmp_path: Path, *turns: dict[str, Any], **kw: Any) -> AgentOptions:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    base: dict[str, Any] = {
        "provider": "scripted",
        "script": write_script(tmp_path, *turns),
        "home": str(tmp_path / "home"),
        "cwd": str(work),
        "discover": False,
        "sandbox": "off",
    }
    base.update(kw)
    return AgentOptions(**base)


def kinds(events: list[AgentEvent]) -> list[type[Any]]:
    return [type(e) for e in events]


def shown(events: list[AgentEvent]) -> list[str]:
    return [
        "".join(b.text for b in e.content if isinstance(b, TextContent))
        for e in events
        if isinstance(e, AssistantMessage)
    ]


async def test_prompt_yields_the_wire_events_and_ends_after_done(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_runtime(opts(tmp_path, {"text": "hello"})) as rt:
            stream = rt.prompt("hi", [ImageContent(mime_type="image/png", data="aGk=", bytes=2)])
            events = await stream.collect()
            assert kinds(events) == [
                UserMessage,
                TurnStart,
                AssistantStart,
                TextDelta,
                AssistantMessage,
                Usage,
                TurnEnd,
                Done,
            ]
            user = events[0]
            assert isinstance(user, UserMessage)
            assert user.content[1] == ImageContent(mime_type="image/png", data="aGk=", bytes=2)
            assert [e async for e in stream] == []  # over after done
            assert stream.job.state is JobState.FINISHED
            assert not stream.job.aborted


async def test_a_failed_prompt_ends_with_error_before_done(tmp_path: Path) -> None:
    options = opts(tmp_path, {"text": "partial ", "error": "upstream exploded", "status": 400})
    with trio.fail_after(TIMEOUT):
        async with open_runtime(options) as rt:
            events = await rt.prompt("hi").collect()
    assert kinds(events)[-3:] == [TurnEnd, ErrorEvent, Done]
    end, error = events[-3], events[-2]
    assert isinstance(end, TurnEnd)
    assert isinstance(error, ErrorEvent)
    assert end.stop == "error"
    assert error.message == end.error == "scripted: upstream exploded"


async def test_jobs_run_first_in_first_out(tmp_path: Path) -> None:
    options = opts(tmp_path, {"text": "one"}, {"text": "two"})
    with trio.fail_after(TIMEOUT):
        async with open_runtime(options) as rt:
            first, second, third = rt.prompt("1"), rt.prompt("2"), rt.compact()
            state = rt.state()
            assert (state.busy, state.queued) == (True, 2)
            assert [s.job.seq for s in (first, second, third)] == [1, 2, 3]
            finished: list[int] = []

            async def drain(stream: Any, into: list[list[AgentEvent]]) -> None:
                into.append(await stream.collect())
                finished.append(stream.job.seq)

            results: list[list[AgentEvent]] = []
            async with trio.open_nursery() as nursery:
                # Read in reverse order: the queue, not the reader, sets the order.
                for stream in (third, second, first):
                    nursery.start_soon(drain, stream, results)
            assert sorted(finished) == [1, 2, 3]
            assert [shown(r) for r in results if shown(r)] in (
                [["two"], ["one"]],
                [["one"], ["two"]],
            )
            compaction = next(r for r in results if any(isinstance(e, CompactDone) for e in r))
            assert kinds(compaction)[-2:] == [CompactDone, Done]
            assert len(rt.messages()) == 1  # both prompts were in before the compaction
            assert rt.state().busy is False


async def test_abort_cancels_the_running_job_only(tmp_path: Path) -> None:
    options = opts(tmp_path, {"text": "slow", "delay": 60}, {"text": "second"})
    with trio.fail_after(TIMEOUT):
        async with open_runtime(options) as rt:
            first, second = rt.prompt("1"), rt.prompt("2")
            async for event in first:
                if isinstance(event, AssistantStart):
                    break
            assert first.job.state is JobState.RUNNING
            assert rt.abort() is True
            rest = await first.collect()
            assert rest == [TurnEnd(stop="aborted"), Done()]
            assert first.job.aborted
            assert shown(await second.collect()) == ["second"]
            assert not second.job.aborted
            assert rt.abort() is False


async def test_abort_before_start_leaves_the_transcript_alone(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_runtime(opts(tmp_path, {"text": "never"})) as rt:
            stream = rt.prompt("x")
            assert rt.abort() is True  # it is the head of the queue: the running job
            assert await stream.collect() == [TurnEnd(stop="aborted"), Done()]
            assert rt.messages() == []


async def test_aborted_compaction_ends_with_an_error_and_done(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_runtime(opts(tmp_path, {"text": "kept"})) as rt:
            await rt.prompt("hi").collect()
            stream = rt.compact()
            rt.abort()
            events = await stream.collect()
            assert kinds(events) == [ErrorEvent, Done]
            assert isinstance(events[0], ErrorEvent)
            assert "transcript unchanged" in events[0].message
            assert len(rt.messages()) == 2


async def test_session_operations(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_runtime(opts(tmp_path, {"text": "a"}, model="m1", tools=["read"])) as rt:
            state = rt.state()
            assert (state.provider, state.model, state.message_count) == ("scripted", "m1", 0)
            assert [m.id for m in rt.models()] == ["m1"]
            assert [t.name for t in rt.tools()] == ["read"]
            assert rt.tool_sources() == {"read": "builtin"}
            with pytest.raises(ValueError, match="other"):
                rt.set_model("other")
            rt.set_model("m1")
            pending = rt.prompt("hi")
            with pytest.raises(AgentBusy):
                rt.clear()
            await pending.collect()
            assert [m.role for m in rt.messages()] == ["user", "assistant"]
            assert rt.state().usage.output > 0
            rt.clear()
            assert rt.messages() == []
            assert await rt.extensions() == []


async def test_tool_progress_reaches_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def run(self: BashTool, call_id: str, args: dict[str, Any], progress: Any) -> Any:
        await progress("halfway")
        return ToolRunResult(content=[TextContent(text="done")])

    monkeypatch.setattr(BashTool, "run", run)
    options = opts(
        tmp_path,
        {"tool_calls": [{"name": "bash", "args": {"command": "true"}, "id": "b1"}]},
        {"text": "ok"},
    )
    with trio.fail_after(TIMEOUT):
        async with open_runtime(options) as rt:
            events = await rt.prompt("go").collect()
            calls = [
                e for e in events if isinstance(e, ToolCallEvent | ToolProgress | ToolResultEvent)
            ]
            assert calls == [
                ToolCallEvent(id="b1", name="bash", args={"command": "true"}),
                ToolProgress(id="b1", text="halfway"),
                ToolResultEvent(id="b1", is_error=False, content=[TextContent(text="done")]),
            ]


async def test_closing_ends_every_pending_job_with_done(tmp_path: Path) -> None:
    options = opts(tmp_path, {"text": "slow", "delay": 60})
    with trio.fail_after(TIMEOUT):
        async with open_runtime(options) as rt:
            first, second = rt.prompt("1"), rt.prompt("2")
            ext_events = rt.events()
            async for event in first:
                if isinstance(event, AssistantStart):
                    break
        assert await first.collect() == [TurnEnd(stop="aborted"), Done()]
        rest = await second.collect()
        assert kinds(rest) == [ErrorEvent, Done]
        with ext_events:
            assert [e async for e in ext_events] == []  # ended, not hanging
        with pytest.raises(RuntimeClosed):
            rt.prompt("late")


async def test_a_closed_stream_does_not_stop_its_job(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_runtime(opts(tmp_path, {"text": "one"}, {"text": "two"})) as rt:
            async with rt.prompt("1") as first:
                pass
            second = rt.prompt("2")
            await second.collect()
            await first.job.wait()
            assert first.job.state is JobState.FINISHED
            assert len(rt.messages()) == 4


async def test_join_waits_for_every_accepted_job(tmp_path: Path) -> None:
    options = opts(tmp_path, {"text": "a", "delay": 0.2}, {"text": "b"})
    with trio.fail_after(TIMEOUT):
        async with open_runtime(options) as rt:
            streams = [rt.prompt("1"), rt.prompt("2")]
            await rt.join()
            assert all(s.job.state is JobState.FINISHED for s in streams)
            assert len(rt.messages()) == 4


@pytest.mark.usefixtures("no_leaks")
async def test_extension_events_and_operations(tmp_path: Path) -> None:
    options = opts(tmp_path, {"text": "unused"}, ext_paths=[chaos_ext(tmp_path)])
    with trio.fail_after(TIMEOUT):
        async with open_runtime(options) as rt:
            with rt.events() as events:
                outcome = await rt.ext_command("/chaos")
                assert (outcome.action, outcome.display) == ("display", "chaos ok")
                assert await events.receive() == ExtDisplay(extension="chaos", text="chaos ok")
                stats = await rt.ext_reload()
                assert (stats.stopped, stats.loaded, stats.ready) == (1, 1, 1)
                statuses: list[str] = []
                async for event in events:
                    if isinstance(event, ExtStatus):
                        statuses.append(event.status)
                        if event.status == "started":
                            break
                assert statuses == ["stopped", "started"]
            infos = await rt.extensions()
            assert [(i.name, i.state) for i in infos] == [("chaos", "running")]
            assert "chaos_echo" in rt.tool_sources()
