"""The fast path of a call: a lone caller reading its own answer (the spin), and the
reader task that shares the extension's stdout with it."""

from __future__ import annotations

import pytest
import trio
from helpers.supkit import CYCLE, Kit

from supervisor import ExtensionGone, Notified, TextBlock

#: Every tool call is answered by a notify and then the result, in one write.
CHATTY = """\
emit({"type": "hello", "name": NAME, "version": "1.0.0"})
emit({"type": "register_tool", "name": "echo", "schema": {"type": "object"}})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "tool_call":
        n = msg["args"]["n"]
        sys.stdout.write(
            json.dumps({"type": "notify", "message": f"before {n}"}) + "\\n"
            + json.dumps({"type": "tool_result", "id": msg["id"],
                          "content": [{"type": "text", "text": f"result {n}"}]}) + "\\n"
        )
        sys.stdout.flush()
    elif msg["type"] == "shutdown":
        break
"""


@pytest.mark.parametrize("spin", [0.0, 1.0], ids=["parked", "spinning"])
async def test_every_frame_is_handled_once_in_order(kit: Kit, spin: float) -> None:
    # With a long spin the caller reads the answer itself (and the notify before
    # it); parked, the reader task does. Either way each frame counts once.
    ext = kit.inline("chatty", CHATTY)
    cfg = kit.config(reply_spin=spin)
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=cfg) as client:
            events = client.subscribe(buffer=1000)
            results = [await client.call_tool("echo", {"n": n}) for n in range(50)]
            info = next(i for i in await client.list_extensions() if i.name == "chatty")
            notes = []
            while len(notes) < 50:
                event = await events.receive()
                if isinstance(event, Notified):
                    notes.append(event.message)
    assert [r.content for r in results] == [[TextBlock(text=f"result {n}")] for n in range(50)]
    assert notes == [f"before {n}" for n in range(50)]
    assert info.stats.calls == 50
    assert info.stats.bad_frames == 0


async def test_a_crash_read_by_a_spinning_caller_fails_its_call_at_once(kit: Kit) -> None:
    # The caller may read the end of the pipe itself: the reader task must still
    # see it and fail the call now, not at the deadline.
    ext = kit.chaos("crashy", "--crash-after", "2", restart="never")
    cfg = kit.config(reply_spin=1.0, tool_timeout=60.0)
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=cfg) as client:
            first = await client.call_tool("chaos_echo", {"text": "one"})
            with pytest.raises(ExtensionGone) as exc:
                await client.call_tool("chaos_echo", {"text": "two"})
    assert first.content == [TextBlock(text="echo: one")]
    assert exc.value.returncode == 3


async def test_concurrent_callers_share_one_extension(kit: Kit) -> None:
    # Many callers at once: none spins (they would hold each other up), frames are
    # written in batches, and every answer reaches its own caller.
    ext = kit.inline("chatty", CHATTY)
    cfg = kit.config(reply_spin=1.0)
    got: dict[int, str] = {}
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=cfg) as client:

            async def caller(first: int) -> None:
                for n in range(first, first + 20):
                    out = await client.call_tool("echo", {"n": n})
                    block = out.content[0]
                    assert isinstance(block, TextBlock)
                    got[n] = block.text

            async with trio.open_nursery() as nursery:
                for i in range(16):
                    nursery.start_soon(caller, i * 20)
    assert got == {n: f"result {n}" for n in range(16 * 20)}
