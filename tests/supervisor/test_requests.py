"""The request layer as data: the tagged union, the call bookkeeping, enums on the wire."""

from __future__ import annotations

import typing

import msgspec
import pytest
import trio

from supervisor import (
    CallTimeout,
    ChildKind,
    EmitEvent,
    ExtensionGone,
    ExtensionInfo,
    ExtensionSpec,
    ExtensionState,
    ExtensionStopping,
    Manifest,
)
from supervisor._calls import CallKind, PendingCalls, Reply
from supervisor._requests import (
    CallTool,
    ClosePanel,
    EnableExtension,
    Intercept,
    InvokeCommand,
    ListExtensions,
    PanelInput,
    PreviewToolCall,
    Reload,
    Request,
    SetHostInfo,
    StartChild,
    StopChild,
)

EVERY_REQUEST: list[Request] = [
    CallTool(name="weather", args={"city": "Lyon"}, call_id="c1"),
    PreviewToolCall(name="add_note", args={"text": "milk"}),
    InvokeCommand(name="clock", args="utc"),
    Intercept(event="tool_call", tool_id="t1", tool_name="bash", tool_args={"command": "ls"}),
    EmitEvent(event="turn_end", step=2, stop="end_turn"),
    Reload(),
    ListExtensions(),
    EnableExtension(name="weather"),
    SetHostInfo(provider="offline", model="m", cwd="/w"),
    StartChild(
        spec=ExtensionSpec(
            manifest=Manifest(name="mcp-fx", exec="/usr/bin/python3", kind=ChildKind.MCP_SERVER),
            dir="/h/mcp/fx-1",
            manifest_path="",
            source="mcp",
            exec_path="/usr/bin/python3",
            identity="fx-1",
            manifest_sha256="",
            env={"TOKEN": "t"},
        )
    ),
    StopChild(name="mcp-fx"),
    PanelInput(extension="todo", panel_id="todos-main", key="rune", text="x"),
    ClosePanel(extension="todo", panel_id="todos-main", reason="closed by the user"),
]


def test_the_union_covers_every_request_and_each_round_trips_as_json() -> None:
    assert {type(r) for r in EVERY_REQUEST} == set(typing.get_args(Request))
    for request in EVERY_REQUEST:
        line = msgspec.json.encode(request)
        assert msgspec.json.decode(line, type=Request) == request
    assert msgspec.json.decode(b'{"type": "reload"}', type=Request) == Reload()


def test_extension_state_is_an_enum_that_encodes_as_before() -> None:
    running = ExtensionState.RUNNING
    info = ExtensionInfo(name="x", version="1", source="g", path="/x", state=running, enabled=True)
    encoded = msgspec.json.encode(info)
    assert b'"state":"running"' in encoded
    assert msgspec.json.decode(encoded, type=ExtensionInfo).state is ExtensionState.RUNNING


def _sent(calls: PendingCalls, kind: CallKind, name: str) -> Reply[typing.Any]:
    reply: Reply[typing.Any] = Reply()
    reply.kind, reply.name = kind, name
    calls.add(PendingCalls.new_id(kind), reply)
    return reply


async def test_failing_every_call_keeps_type_message_and_status() -> None:
    calls = PendingCalls("ext", dict.fromkeys(CallKind, 60.0))
    tool = _sent(calls, CallKind.TOOL, "weather")
    command = _sent(calls, CallKind.COMMAND, "clock")
    assert tool.rid.startswith("t")
    assert command.rid.startswith("c")
    exited = "the extension exited (exit status 3); stderr: Error: x"
    calls.fail_all(ExtensionGone, exited, returncode=3)
    for reply, what in ((tool, "tool weather"), (command, "command /clock")):
        with pytest.raises(ExtensionGone) as caught:
            await reply.wait()
        assert type(caught.value) is ExtensionGone
        assert caught.value.what == what
        assert caught.value.returncode == 3
        assert str(caught.value) == f"{what} in extension 'ext': {exited}"
    assert calls.counts["errors"] == 2
    assert len(calls) == 0

    stopping = _sent(calls, CallKind.INTERCEPT, "tool_call")
    calls.fail_all(ExtensionStopping, "the extension is being stopped")
    with pytest.raises(ExtensionStopping, match="intercept tool_call"):
        await stopping.wait()


async def test_a_reply_answers_once_and_an_abandoned_call_is_forgotten() -> None:
    calls = PendingCalls("ext", dict.fromkeys(CallKind, 0.05))
    late = _sent(calls, CallKind.TOOL, "slow")
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(calls.run_timer)
            with pytest.raises(CallTimeout):
                await late.wait()
            nursery.cancel_scope.cancel()
    late.set("too late")  # ignored: already answered
    with pytest.raises(CallTimeout):
        await late.wait()
    assert calls.counts["timeouts"] == 1

    left = _sent(calls, CallKind.TOOL, "abandoned")
    left.abandon()
    assert len(calls) == 0
    assert calls.take(left.rid, CallKind.TOOL) is None


async def test_the_deadline_timer_starts_with_the_first_call_of_each_incarnation() -> None:
    calls = PendingCalls("ext", dict.fromkeys(CallKind, 0.05))
    with trio.fail_after(5):
        for incarnation in (1, 2):  # attached again after a restart, it works again
            async with trio.open_nursery() as nursery:
                with calls.timer_in(nursery):
                    await trio.lowlevel.checkpoint()
                    assert nursery.child_tasks == frozenset()  # never called: no timer task
                    late = _sent(calls, CallKind.TOOL, f"slow{incarnation}")
                    assert len(nursery.child_tasks) == 1
                    with pytest.raises(CallTimeout):
                        await late.wait()
                nursery.cancel_scope.cancel()
    assert calls.counts["timeouts"] == 2


async def test_each_kind_times_out_by_its_own_deadline_and_answered_calls_never() -> None:
    timeouts = dict.fromkeys(CallKind, 60.0) | {CallKind.INTERCEPT: 0.05, CallKind.HOOK: 0.1}
    calls = PendingCalls("ext", timeouts)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            with calls.timer_in(nursery):
                tool = _sent(calls, CallKind.TOOL, "slow")  # 60 s: outlives this test
                await trio.sleep(0.01)  # the timer now waits for the tool call's deadline
                hooks = [_sent(calls, CallKind.HOOK, f"h{i}") for i in range(3)]
                # Sent after a call with a later deadline, it still times out first.
                intercept = _sent(calls, CallKind.INTERCEPT, "tool_call")
                answered = calls.take(hooks[1].rid, CallKind.HOOK)
                assert answered is hooks[1]
                answered.set("done")
                t0 = trio.current_time()
                with pytest.raises(CallTimeout, match="intercept tool_call"):
                    await intercept.wait()
                assert trio.current_time() - t0 < 0.1
                for late in (hooks[0], hooks[2]):
                    with pytest.raises(CallTimeout):
                        await late.wait()
                assert await hooks[1].wait() == "done"
                assert not tool.done
                assert len(calls) == 1
                assert calls.take(tool.rid, CallKind.TOOL) is tool
                assert len(calls) == 0
            nursery.cancel_scope.cancel()
    assert calls.counts["timeouts"] == 3
    assert calls.stats().latency_p50_ms is not None  # two answered: latencies recorded
