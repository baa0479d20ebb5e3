"""Many callers on one extension at once: their requests are written together
(coalesced), and each answer, failure or cancellation stays with its own call."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from helpers.supkit import CYCLE, Kit

from supervisor import ExtensionGone, SupervisorClient, TextBlock

#: Answers the calls of each read in reverse order (so only the ids match them);
#: holds a ``hold`` call until a ``release`` call comes, and answers a release last;
#: a read with a ``crash`` call in it exits 3 after ``delay`` seconds without
#: answering any of it.
BATCHY = """\
import time
emit({"type": "hello", "name": NAME, "version": "1.0.0"})
emit({"type": "register_tool", "name": "echo", "schema": {"type": "object"}})
emit({"type": "ready"})
rest, held = b"", []
while True:
    chunk = os.read(0, 65536)
    if not chunk:
        break
    *lines, rest = (rest + chunk).split(b"\\n")
    calls = [m for m in map(json.loads, filter(None, lines)) if m["type"] == "tool_call"]
    for msg in calls:
        if msg["args"].get("crash"):
            time.sleep(msg["args"]["delay"])
            sys.exit(3)
    held += [m["id"] for m in calls if m["args"].get("hold")]  # before any release
    # Reverse order, a release last (after whatever it read with it).
    for msg in sorted(reversed(calls), key=lambda m: bool(m["args"].get("release"))):
        args = msg["args"]
        if args.get("hold"):
            continue
        answer = [msg["id"]]
        if args.get("release"):
            answer = held + answer
        for rid in answer:
            text = json.dumps(args["n"])
            emit({"type": "tool_result", "id": rid, "content": [{"type": "text", "text": text}]})
"""


def _text(out: object) -> str:
    content = getattr(out, "content", None)
    assert content is not None
    block = content[0]
    assert isinstance(block, TextBlock)
    return block.text


async def _stats(client: SupervisorClient) -> tuple[int, int, int]:
    info = next(i for i in await client.list_extensions() if i.name == "batchy")
    return info.stats.calls, info.stats.errors, info.stats.bad_frames


async def test_many_concurrent_callers_each_get_their_own_answer(kit: Kit) -> None:
    ext = kit.inline("batchy", BATCHY)
    got: dict[int, str] = {}
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:

            async def caller(first: int) -> None:
                for n in range(first, first + 10):
                    got[n] = _text(await client.call_tool("echo", {"n": n}))

            async with trio.open_nursery() as nursery:
                for i in range(32):
                    nursery.start_soon(caller, i * 10)
            stats = await _stats(client)
    assert got == {n: str(n) for n in range(320)}
    assert stats == (320, 0, 0)


async def test_a_caller_cancelled_among_many_in_flight_loses_only_its_own_call(
    kit: Kit,
) -> None:
    ext = kit.inline("batchy", BATCHY)
    got: dict[int, str] = {}
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            async with trio.open_nursery() as nursery:
                with trio.CancelScope() as held:

                    async def caller(first: int) -> None:
                        for n in range(first, first + 20):
                            got[n] = _text(await client.call_tool("echo", {"n": n}))
                            held.cancel()  # while the others are still in flight

                    for i in range(1, 16):
                        nursery.start_soon(caller, i * 100)
                    await client.call_tool("echo", {"n": 0, "hold": True})
            assert held.cancelled_caught
            assert len(got) == 15 * 20
            # The held call's answer comes now, late: dropped, never given to this call.
            released = await client.call_tool("echo", {"n": -1, "release": True})
            stats = await _stats(client)
    assert got == {n: str(n) for i in range(1, 16) for n in range(i * 100, i * 100 + 20)}
    assert _text(released) == "-1"
    assert stats == (1 + 15 * 20 + 1, 0, 1)


async def test_a_crash_with_a_coalesced_batch_in_flight_fails_every_call_at_once(
    kit: Kit,
) -> None:
    ext = kit.inline("batchy", BATCHY, restart="never")
    errors: list[ExtensionGone] = []
    cfg = kit.config(tool_timeout=60.0)  # the crash, not a deadline, must end them
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=cfg) as client:

            async def caller(args: dict[str, Any]) -> None:
                with pytest.raises(ExtensionGone) as exc:
                    await client.call_tool("echo", args)
                errors.append(exc.value)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(caller, {"n": 0, "crash": True, "delay": 0.3})
                await trio.testing.wait_all_tasks_blocked()  # it is in flight
                # These are sent together while the extension sleeps, then it dies.
                for n in range(1, 16):
                    nursery.start_soon(caller, {"n": n})
            stats = await _stats(client)
    assert len(errors) == 16
    assert {e.returncode for e in errors} == {3}
    assert stats == (16, 16, 0)


async def test_a_caller_cancelled_before_its_coalesced_line_is_written(kit: Kit) -> None:
    ext = kit.inline("batchy", BATCHY)
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            async with trio.open_nursery() as nursery:
                # A call in flight: the next line waits to be written with others.
                nursery.start_soon(client.call_tool, "echo", {"n": 0, "hold": True})
                await trio.testing.wait_all_tasks_blocked()
                with trio.CancelScope() as scope:
                    scope.cancel()
                    await client.call_tool("echo", {"n": 1})  # queued, then abandoned
                assert scope.cancelled_caught
                released = await client.call_tool("echo", {"n": 2, "release": True})
            stats = await _stats(client)
    assert _text(released) == "2"
    # The abandoned line was still written whole; its answer is dropped, not misdelivered.
    assert stats == (3, 0, 1)
