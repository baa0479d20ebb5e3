"""Hooks against real extension processes: every intercept outcome, crashes, reload.

Each test opens a real agent session (:func:`agent._host.open_agent`) with
extension processes from ``examples/extensions`` or the probe fixture, drives it
with the scripted provider, and checks no process is left behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.agentkit import Collector, chaos, options, probe, script
from helpers.paths import EXAMPLES

from agent import (
    AgentOptions,
    ExtDisplay,
    ExtStatus,
    TextContent,
    ToolCallContent,
    TurnEnd,
    open_agent,
)
from agent._messages import text_of
from supervisor import identity_of, log_file

pytestmark = pytest.mark.usefixtures("no_leaks")

GUARD = str(EXAMPLES / "guard")
WEATHER = str(EXAMPLES / "weather")


async def run_prompts(opts: Any, *prompts: str) -> tuple[list[Collector], list[Any]]:
    """Open an agent, run ``prompts``, return the events of each and the transcript."""
    out: list[Collector] = []
    with trio.fail_after(60):
        async with open_agent(opts) as host:
            for text in prompts:
                events = Collector()
                await host.engine.prompt(text, [], events)
                out.append(events)
            return out, host.engine.messages()


def bash_call(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "args": {"command": command}, "id": "b1"}]}


async def test_guard_blocks_and_the_tool_does_not_run(
    tmp_path: Path, home: Path, work: Path
) -> None:
    path = script(tmp_path, bash_call("touch ran.txt; rm -rf stuff"), {"text": "ok"})
    (events,), _ = await run_prompts(
        options(home, work, ext_paths=[GUARD], script=path, provider="scripted"), "go"
    )
    (result,) = events.results()
    assert result.is_error
    assert events.result_texts() == [
        'blocked by extension guard: refused: matches danger pattern "rm -rf"'
    ]
    assert not (work / "ran.txt").exists()
    assert events.stops() == ["tool_use", "end_turn"]


async def test_guard_rewrites_args_the_model_never_sees(
    tmp_path: Path, home: Path, work: Path
) -> None:
    path = script(tmp_path, bash_call("touch created.txt"), {"text": "ok"})
    (events,), messages = await run_prompts(
        options(home, work, ext_paths=[GUARD], script=path, provider="scripted"), "go"
    )
    assert events.result_texts() == ["GUARDED: touch created.txt"]
    assert not (work / "created.txt").exists()
    assert events.calls()[0].args == {"command": "touch created.txt"}
    call = messages[1].content[0]
    assert isinstance(call, ToolCallContent)
    assert call.args == {"command": "touch created.txt"}
    assert "GUARDED" not in json.dumps([c.args for c in events.calls()])


async def test_guard_redacts_what_the_user_sees_only(
    tmp_path: Path, home: Path, work: Path
) -> None:
    path = script(tmp_path, {"text": "the SECRET is 42", "chunk": 3}, {"text": "SECRET again"})
    (first, second), messages = await run_prompts(
        options(home, work, ext_paths=[GUARD], script=path, provider="scripted"), "a", "b"
    )
    for events, original in ((first, "the SECRET is 42"), (second, "SECRET again")):
        assert "SECRET" not in events.streamed()
        assert events.shown() == [original.replace("SECRET", "[redacted]")]
    assert [text_of(m) for m in messages if m.role == "assistant"] == [
        "the SECRET is 42",
        "SECRET again",
    ]


async def test_turn_start_block_ends_the_turn_with_the_reason(
    tmp_path: Path, home: Path, work: Path, ext_dir: Path
) -> None:
    path = script(tmp_path, {"text": "never said"})
    (events,), messages = await run_prompts(
        options(
            home,
            work,
            ext_paths=[probe(ext_dir, "--block-turn")],
            script=path,
            provider="scripted",
        ),
        "go",
    )
    assert events.stops() == ["blocked"]
    assert events.of(TurnEnd)[-1].error == "blocked by extension probe: closed for lunch"
    assert [m.role for m in messages] == ["user"]


async def test_suppressed_assistant_message(
    tmp_path: Path, home: Path, work: Path, ext_dir: Path
) -> None:
    path = script(tmp_path, {"text": "chatter"})
    (events,), messages = await run_prompts(
        options(
            home,
            work,
            ext_paths=[probe(ext_dir, "--suppress")],
            script=path,
            provider="scripted",
        ),
        "go",
    )
    assert events.shown() == [""]
    assert events.streamed() == ""
    assert [d.text for d in events.of(ExtDisplay)] == ["assistant message hidden: too chatty"]
    assert text_of(messages[-1]) == "chatter"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "blocked"),
    [("block", True), ("allow", False), ("crash", False), ("badargs", False), ("garbage", False)],
)
@pytest.mark.slow  # each mode waits out the 5 s intercept deadline or a crash
async def test_chaos_intercept_modes(
    tmp_path: Path, home: Path, work: Path, ext_dir: Path, mode: str, blocked: bool
) -> None:
    call = {"tool_calls": [{"name": "chaos_echo", "args": {"text": "hi"}}]}
    path = script(tmp_path, call, {"text": "ok"})
    opts = options(
        home,
        work,
        ext_paths=[chaos(ext_dir, "--intercept", mode)],
        script=path,
        provider="scripted",
    )
    (events,), _ = await run_prompts(opts, "go")
    (result,) = events.results()
    if blocked:
        assert result.is_error
        assert events.result_texts() == ["blocked by extension chaos: chaos blocks"]
    elif mode == "crash":
        # The interceptor died, so the call is allowed, but the tool's owner is gone.
        assert result.is_error
        assert "chaos" in events.result_texts()[0]
    else:
        assert events.result_texts() == ["echo: hi"]


async def test_rewritten_args_from_the_probe(
    tmp_path: Path, home: Path, work: Path, ext_dir: Path
) -> None:
    call = {"tool_calls": [{"name": "echo_args", "args": {"original": 1}}]}
    path = script(tmp_path, call, {"text": "ok"})
    opts = options(
        home,
        work,
        ext_paths=[probe(ext_dir, "--rewrite-args")],
        script=path,
        provider="scripted",
    )
    (events,), _ = await run_prompts(opts, "go")
    assert events.result_texts() == ['{"rewritten": true}']
    assert events.calls()[0].args == {"original": 1}


def _scripted_chaos(
    tmp_path: Path, home: Path, work: Path, ext_dir: Path, flags: list[str], turns: list[Any]
) -> AgentOptions:
    """A scripted session with one chaos extension run with ``flags``."""
    return options(
        home,
        work,
        ext_paths=[chaos(ext_dir, *flags)],
        script=script(tmp_path, *turns),
        provider="scripted",
    )


async def test_extension_crash_mid_tool_call_and_the_session_goes_on(
    tmp_path: Path, home: Path, work: Path, ext_dir: Path
) -> None:
    call = {"tool_calls": [{"name": "chaos_echo", "args": {"text": "boom"}}]}
    turns = [call, {"text": "sorry"}, {"text": "still here"}]
    opts = _scripted_chaos(tmp_path, home, work, ext_dir, ["--crash-after", "1"], turns)
    with trio.fail_after(60):
        async with open_agent(opts) as host, trio.open_nursery() as nursery:
            statuses = Collector()
            await nursery.start(host.run_forwarder, statuses)
            first = Collector()
            await host.engine.prompt("call it", [], first)
            (result,) = first.results()
            assert result.is_error
            assert "chaos" in first.result_texts()[0]
            assert first.stops() == ["tool_use", "end_turn"]
            second = Collector()
            await host.engine.prompt("and now?", [], second)
            assert second.shown() == ["still here"]
            await statuses.wait_for(lambda e: isinstance(e, ExtStatus) and e.status == "restarted")
            nursery.cancel_scope.cancel()
    crashed = [e for e in statuses.of(ExtStatus) if e.status == "crashed"]
    assert crashed
    assert crashed[0].extension == "chaos"


async def test_a_reload_during_a_running_turn(
    tmp_path: Path, home: Path, work: Path, ext_dir: Path
) -> None:
    """The turn goes on: its slow call completes or fails cleanly (its extension is
    being replaced), the next turn's call reaches the new version, nothing hangs."""
    call = {"tool_calls": [{"name": "chaos_echo", "args": {"text": "slow"}}]}
    turns = [call, {"text": "first done"}, call, {"text": "second done"}]
    opts = _scripted_chaos(tmp_path, home, work, ext_dir, ["--tool-delay", "1"], turns)
    with trio.fail_after(60):
        async with open_agent(opts) as host, trio.open_nursery() as nursery:
            statuses = Collector()
            await nursery.start(host.run_forwarder, statuses)
            first = Collector()
            nursery.start_soon(host.engine.prompt, "call it", [], first)
            await first.wait_for(lambda e: type(e).__name__ == "ToolCallEvent")
            stats = await host.reload()
            await first.wait_for(lambda e: isinstance(e, TurnEnd) and e.stop == "end_turn")
            second = Collector()
            await host.engine.prompt("again", [], second)
            nursery.cancel_scope.cancel()
    assert (stats.stopped, stats.ready, stats.kept_old) == (1, 1, [])
    assert first.stops() == ["tool_use", "end_turn"]
    (slow,) = first.result_texts()
    assert slow == "echo: slow" or "being stopped" in slow
    assert second.result_texts() == ["echo: slow"]
    assert second.stops() == ["tool_use", "end_turn"]
    assert [e.status for e in statuses.of(ExtStatus)][-2:] == ["stopped", "started"]


async def test_hello_ack_carries_provider_model_and_cwd(
    tmp_path: Path, home: Path, work: Path, ext_dir: Path
) -> None:
    call = {"tool_calls": [{"name": "hostinfo", "args": {}}]}
    path = script(tmp_path, call, {"text": "ok"})
    opts = options(
        home,
        work,
        ext_paths=[probe(ext_dir)],
        script=path,
        provider="scripted",
        model="m-test",
    )
    (events,), _ = await run_prompts(opts, "go")
    ack = json.loads(events.result_texts()[0])
    assert ack["provider"] == "scripted"
    assert ack["model"] == "m-test"
    assert ack["cwd"] == str(work.resolve())


async def test_lifecycle_events_reach_subscribers(tmp_path: Path, home: Path, work: Path) -> None:
    path = script(tmp_path, bash_call("echo hi"), {"text": "done"})
    opts = options(home, work, ext_paths=[GUARD], script=path, provider="scripted")
    await run_prompts(opts, "go")
    log = log_file(home, identity_of("guard", GUARD)).read_text()
    for needle in (
        "event session_start",
        "event turn_start step=1",
        "event tool_call",
        "event turn_end stop='tool_use'",
        "event assistant_message",
        "event turn_end stop='end_turn'",
    ):
        assert needle in log, needle
    assert "GUARDED" in log  # the tool_call event carries the args that actually ran


async def test_reload_rebuilds_the_registry_in_place(
    tmp_path: Path, home: Path, work: Path, ext_dir: Path
) -> None:
    where = Path(probe(ext_dir, "--tool", "first_tool"))
    opts = options(home, work, ext_paths=[str(where), WEATHER])
    with trio.fail_after(60):
        async with open_agent(opts) as host:
            registry = host.engine.registry
            names = [t.name for t in host.engine.tools()]
            assert names[:4] == ["read", "write", "edit", "bash"]
            assert {"first_tool", "weather", "hostinfo"} <= set(names)
            manifest = json.loads((where / "extension.json").read_text())
            manifest["args"] = ["--tool", "second_tool"]
            (where / "extension.json").write_text(json.dumps(manifest))
            stats = await host.reload()
            assert stats.ready == 2
            assert host.engine.registry is registry
            names = [t.name for t in host.engine.tools()]
            assert "second_tool" in names
            assert "first_tool" not in names
            events = Collector()
            await host.engine.prompt('call second_tool {"x": 1}', [], events)
            assert events.result_texts() == ["second_tool ok"]
            weather = Collector()
            await host.engine.prompt("weather in Oslo", [], weather)
            assert weather.result_texts()[0].startswith("Oslo: ")


async def test_extension_tool_named_like_a_builtin_loses(
    tmp_path: Path, home: Path, work: Path, ext_dir: Path
) -> None:
    opts = options(home, work, ext_paths=[probe(ext_dir, "--tool", "read")])
    with trio.fail_after(60):
        async with open_agent(opts) as host:
            assert host.engine.registry.sources()["read"] == "builtin"
            (work / "f.txt").write_text("builtin wins")
            events = Collector()
            await host.engine.prompt("read f.txt", [], events)
            assert events.result_texts() == ["builtin wins"]


async def test_commands_through_the_host(home: Path, work: Path, ext_dir: Path) -> None:
    with trio.fail_after(60):
        async with open_agent(options(home, work, ext_paths=[probe(ext_dir)])) as host:
            names = {c.name for c in host.commands()}
            assert {"ins", "disp", "nop", "ask", "oops"} <= names
            outcome = await host.invoke_command("disp", "there")
            assert (outcome.action, outcome.display) == ("display", "probe says there")
            assert (await host.invoke_command("ins")).insert == "prefilled by probe"
            assert (await host.invoke_command("oops")).error == "probe failed on purpose"
            infos = await host.extensions()
            assert [i.name for i in infos] == ["probe"]
            assert infos[0].pid is not None


def test_text_content_helper() -> None:
    assert TextContent(text="x").text == "x"
