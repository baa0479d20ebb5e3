"""The hot path of a tool call (client -> supervisor -> extension -> protocol):
a call racing a restart never reaches the dead incarnation's protocol, and a
call whose line the pipe refuses is answered once and leaves nothing pending."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from helpers.supkit import CYCLE, Kit

from supervisor import CallTimeout, ExtensionGone, TextBlock
from supervisor._calls import CallKind, PendingCalls, Reply

#: ``pid`` answers with the process id; ``die`` exits 3 without answering.
PIDS = """\
emit({"type": "hello", "name": NAME, "version": "1.0.0"})
emit({"type": "register_tool", "name": "pid", "schema": {"type": "object"}})
emit({"type": "register_tool", "name": "die", "schema": {"type": "object"}})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "tool_call":
        if msg["name"] == "die":
            sys.exit(3)
        text = str(os.getpid())
        emit({"type": "tool_result", "id": msg["id"], "content": [{"type": "text", "text": text}]})
"""


async def _pid(client: object) -> int:
    out = await client.call_tool("pid", {})  # type: ignore[attr-defined]
    block = out.content[0]
    assert isinstance(block, TextBlock)
    return int(block.text)


async def test_calls_racing_a_restart_never_land_on_the_dead_incarnation(kit: Kit) -> None:
    ext = kit.inline("pids", PIDS)
    # A call left on the dead incarnation's protocol would wait for this deadline.
    cfg = kit.config(tool_timeout=60.0)
    seen: list[list[int | str]] = []
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=cfg) as client:
            first = await _pid(client)

            async def caller(log: list[int | str]) -> None:
                # No pause between calls: each goes out in the pass its last one ended.
                while not log or log[-1] in (first, "gone"):
                    try:
                        with trio.fail_after(5):  # far below the deadline
                            log.append(await _pid(client))
                    except ExtensionGone:
                        log.append("gone")

            async with trio.open_nursery() as nursery:
                for _ in range(8):
                    seen.append([])
                    nursery.start_soon(caller, seen[-1])
                with pytest.raises(ExtensionGone) as died:
                    await client.call_tool("die", {})
            second = await _pid(client)
    assert died.value.returncode == 3
    assert second != first
    for log in seen:
        # Answered by the first process, then failed at once, then the second: never
        # an answer from the first after a failure, and never a hang.
        ranks = [0 if x == first else 1 if x == "gone" else 2 for x in log]
        assert ranks == sorted(ranks), log
        assert log[-1] == second, log


async def test_a_line_the_pipe_refuses_is_answered_once_and_not_left_pending(kit: Kit) -> None:
    deaf = kit.chaos("deaf", "--stop-reading")
    cfg = kit.config(tool_timeout=0.5, write_backlog=1)
    big = "x" * 100_000  # more than a pipe buffer: the rest of it waits in the queue
    with trio.fail_after(CYCLE):
        async with kit.open(deaf, config=cfg) as client:
            async with trio.open_nursery() as nursery:
                timed_out: list[CallTimeout] = []

                async def waits(text: str) -> None:
                    with pytest.raises(CallTimeout) as exc:
                        await client.call_tool("chaos_echo", {"text": text})
                    timed_out.append(exc.value)

                # The first fills the pipe, the writer task waits with the rest of
                # it, the second fills the backlog of one line.
                nursery.start_soon(waits, big)
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(waits, "queued")
                await trio.testing.wait_all_tasks_blocked()
                with pytest.raises(ExtensionGone, match="backlog full"):
                    await client.call_tool("chaos_echo", {"text": "refused"})
            await trio.sleep(0.6)  # past the refused call's deadline too
            info = next(i for i in await client.list_extensions() if i.name == "deaf")
    assert len(timed_out) == 2
    # The refused call was not tracked: no third timeout, one error (its own).
    assert (info.stats.calls, info.stats.timeouts, info.stats.errors) == (3, 2, 1)


async def test_pending_calls_say_when_a_call_is_alone_and_forget_a_dropped_one() -> None:
    calls = PendingCalls("x", dict.fromkeys(CallKind, 60.0))
    first, second, third = Reply[None](), Reply[None](), Reply[None]()
    assert calls.add("t1", first)  # nothing else in flight
    assert not calls.add("t2", second)
    calls.drop("t2")  # its line was never written
    assert len(calls) == 1
    assert not second.done  # the sender answers it, with why it was not sent
    assert calls.take("t2", CallKind.TOOL) is None
    assert calls.take("t1", CallKind.TOOL) is first
    assert calls.add("t3", third)
    second.abandon()  # a caller that gives up on a dropped call forgets nothing else
    assert len(calls) == 1
