"""A tool host's state under parallel calls: the shipped notes hosts, real runners.

A model asks for several tools in one step all the time. Calls that may change the
state of one host go one at a time, each with the state its predecessor left; a
call to a tool that takes no state runs beside them and answers no state, so no
answer can bring back an older state (issue 28, item 7).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.paths import REPO, TOOLHOST_EXAMPLES
from helpers.supkit import CYCLE, Kit

from supervisor import CallTimeout, ExtensionGone, ExtensionState, SupervisorClient, TextBlock
from supervisor._calls import CallKind, PendingCalls, Reply
from supervisor._hoststate import HostSession, StateTurns
from supervisor._requests import CallTool

EXAMPLES = {"py": "python-tools", "js": "node-tools"}


@pytest.fixture(params=sorted(EXAMPLES))
def notes_host(request: pytest.FixtureRequest, kit: Kit) -> Path:
    if request.param == "js" and shutil.which("node") is None:
        pytest.skip("node is not installed")
    d = kit.exts / EXAMPLES[request.param]
    shutil.copytree(TOOLHOST_EXAMPLES / EXAMPLES[request.param], d)
    return d


def text(outcome: Any) -> str:
    return "".join(b.text for b in outcome.content if isinstance(b, TextBlock))


async def _together(client: SupervisorClient, *calls: tuple[str, dict[str, Any]]) -> list[str]:
    """Run ``calls`` concurrently (one step's tool calls); their texts in call order."""
    out = [""] * len(calls)

    async def one(i: int, name: str, args: dict[str, Any]) -> None:
        out[i] = text(await client.call_tool(name, args))

    async with trio.open_nursery() as nursery:
        for i, (name, args) in enumerate(calls):
            nursery.start_soon(one, i, name, args)
    return out


async def test_a_note_added_beside_a_countdown_is_kept(kit: Kit, notes_host: Path) -> None:
    with trio.fail_after(CYCLE):
        async with kit.open(notes_host) as client:
            (info,) = await client.list_extensions()
            assert info.state is ExtensionState.RUNNING, info.problem
            # The countdown is under way (its first part came) when the note is added,
            # and answers last. It takes no state, so it answers none: it used to echo
            # the state it was sent, without the note, and that state was kept.
            ticking = trio.Event()
            counted: list[str] = []

            async def count() -> None:
                args = {"start": 3, "interval_ms": 50}
                outcome = await client.call_tool("countdown", args, on_part=lambda _: ticking.set())
                counted.append(text(outcome))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(count)
                await ticking.wait()
                assert text(await client.call_tool("add_note", {"text": "buy milk"})) == (
                    "noted (1 so far)"
                )
            assert counted == ["liftoff"]
            assert text(await client.call_tool("list_notes", {})) == "- buy milk"


async def test_parallel_calls_that_change_the_state_all_count(kit: Kit, notes_host: Path) -> None:
    with trio.fail_after(CYCLE):
        async with kit.open(notes_host) as client:
            answers = await _together(
                client,
                *[("add_note", {"text": f"n{i}"}) for i in range(4)],
                ("countdown", {"start": 1, "interval_ms": 0}),
                ("list_notes", {}),
            )
            # One at a time (in whichever order trio ran the callers): each call saw
            # the notes of the calls before it.
            assert sorted(answers[:4]) == [f"noted ({i} so far)" for i in range(1, 5)]
            listed = text(await client.call_tool("list_notes", {}))
            assert sorted(listed.splitlines()) == ["- n0", "- n1", "- n2", "- n3"]


SEED_HOST = Path(__file__).parent / "toolhost_fixtures" / "seed_counter_host.py"


def seed_host(kit: Kit) -> Path:
    """A host written from the seed alone: every tool answers the state it was sent."""
    d = kit.write("counter", sys.executable, [str(SEED_HOST)], kind="tool-host")
    return d


async def test_a_seed_host_s_calls_go_one_at_a_time_each_with_the_last_state(kit: Kit) -> None:
    with trio.fail_after(CYCLE):
        async with kit.open(seed_host(kit)) as client:
            answers = await _together(client, *[("incr", {})] * 5)
            assert sorted(answers) == [f"n={i}" for i in range(1, 6)]
            assert (await _together(client, ("peek", {})))[0].startswith("n=5 ")


async def test_a_hook_s_change_to_the_state_is_kept_when_no_call_changed_it(kit: Kit) -> None:
    with trio.fail_after(CYCLE):
        async with kit.open(seed_host(kit)) as client:
            for _ in range(3):
                await client.call_tool("incr", {})
            # format_tool_result counted each result it formatted (peek's own comes after).
            assert text(await client.call_tool("peek", {})) == "n=3 f=3"


async def test_a_call_that_times_out_gives_its_turn_to_the_next(kit: Kit) -> None:
    config = kit.config(tool_timeout=0.5)
    with trio.fail_after(CYCLE):
        async with kit.open(seed_host(kit), config=config) as client:
            hung: list[BaseException] = []

            async def hang() -> None:
                try:
                    await client.call_tool("hang", {})
                except CallTimeout as exc:
                    hung.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(hang)
                await trio.sleep(0.1)  # (the hang is in flight first; the incr waits)
                t0 = trio.current_time()
                assert text(await client.call_tool("incr", {})) == "n=1"
                # It waited for the hang's deadline, not for ever, and its own deadline
                # (counted from when it was asked) had room for the wait and the call.
                assert 0.3 < trio.current_time() - t0 < 0.5 + 0.3
            assert len(hung) == 1


async def test_calls_waiting_their_turn_fail_at_once_when_the_host_dies(kit: Kit) -> None:
    with trio.fail_after(CYCLE):
        async with kit.open(seed_host(kit)) as client:
            (info,) = await client.list_extensions()
            failed: list[str] = []

            async def call(name: str) -> None:
                with pytest.raises(ExtensionGone):
                    await client.call_tool(name, {})
                failed.append(name)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, "hang")
                await trio.sleep(0.1)
                nursery.start_soon(call, "incr")  # both wait behind the hang
                nursery.start_soon(call, "peek")
                await trio.sleep(0.1)
                assert failed == []
                t0 = trio.current_time()
                assert info.pid is not None
                os.kill(info.pid, signal.SIGKILL)
            # All three at once, not after their deadlines (3 s here).
            assert sorted(failed) == ["hang", "incr", "peek"]
            assert trio.current_time() - t0 < 1.5


async def test_turns_keep_a_hook_s_state_only_when_nothing_changed_it() -> None:
    # The ordering itself, without a host: which answer's state is kept, who goes next.
    session = HostSession()
    session.initial({"n": 0}, None)
    calls = PendingCalls("h", dict.fromkeys(CallKind, 60.0))
    sent: list[str] = []
    turns = StateTurns(session, calls, lambda _reply, req: sent.append(req.name) is None)
    s0 = session.state
    assert turns.hook_answered(s0, {"n": 0, "f": 1})  # nothing else going on: kept
    s1 = session.state
    assert s1 == {"n": 0, "f": 1}

    first, second = Reply[Any](), Reply[Any]()
    assert not turns.queue("t1", CallTool(name="a", args={}), first)  # its turn: sent by the caller
    assert turns.queue("t2", CallTool(name="b", args={}), second)  # waits, tracked
    assert calls.peek("t2", CallKind.TOOL) is second
    # A call that may change the state is in flight: the hook's state would undo it.
    assert not turns.hook_answered(s1, {"n": 0, "f": 2})
    assert session.state is s1
    # The first answers: its state is kept and the second goes, with it.
    turns.answered(first, {"n": 1, "f": 1})
    assert (session.state, sent, turns.current) == ({"n": 1, "f": 1}, ["b"], second)
    # An answer to a call that took no state is not kept.
    turns.answered(Reply[Any](), {"n": 99})
    assert session.state == {"n": 1, "f": 1}
    # The second fails (say, its caller left): the turn passes, nothing waits.
    second.fail(RuntimeError("gone"))
    assert turns.current is None
    # A hook sent before the change answers after it: not kept; an unchanged echo is no loss.
    assert not turns.hook_answered(s1, {"n": 0, "f": 3})
    assert turns.hook_answered(s1, dict(s1))
    assert session.state == {"n": 1, "f": 1}


async def test_format_tool_result_gets_the_whole_value_as_documented(kit: Kit) -> None:
    with trio.fail_after(CYCLE):
        async with kit.open(seed_host(kit)) as client:
            shown = text(await client.call_tool("show", {}))
    assert shown == '{"result": "shown", "success": true}'
    # docs/toolkit.md says so where the hook is described (the client's table).
    docs = (REPO / "docs" / "toolkit.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `format_tool_result({"))
    assert "the whole value `execute_tool` answered, `{success: true, result, ...}`" in row
