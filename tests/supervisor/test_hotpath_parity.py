"""Each fast path of a tool call answers exactly as the general path it shortcuts.

The call path is tuned in several places (``supervisor/_seams.py`` lists them, and
docs/architecture.md, "The hot path"): each shortcut has a general twin, and a
change to one that the other does not follow would only show in a benchmark. Here
both run side by side, on a real extension, and must agree:

* ``Backend.call_tool`` (the client's hot path) and ``Backend.submit`` of the same
  ``CallTool``: a tool's answer, an unknown tool, a tool whose extension is
  restarting, a closed supervisor; ``SupervisorClient.call_tool`` and its ``_ask``;
* ``Extension.call_tool`` (``_opened`` and ``_send`` inlined) and the general
  ``_opened`` + ``_send`` with the same frame: answers, request ids, counters;
* a caller that spins for its answer and one that parks (``reply_spin=0``);
* the bare frame decoder and encoder and the diagnosing ones;
* ``LineReader.lines_nowait`` (one split per read) and ``next_nowait``.
"""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest
import trio
from helpers.supkit import CYCLE, Kit, wait_for

from supervisor import ExtensionCrashed, SupervisorClient, SupervisorError, ToolOutcome
from supervisor import _frames as f
from supervisor._calls import CallKind, PendingCalls, Reply
from supervisor._extension import Extension
from supervisor._lines import MORE, LineReader
from supervisor._requests import CallTool
from supervisor._supervisor import _Supervisor

Answer = tuple[str, Any]


async def _answer(reply: Reply[Any]) -> Answer:
    try:
        value: ToolOutcome = await reply.wait()
    except SupervisorError as exc:
        return (type(exc).__name__, str(exc))
    return ("value", value)


def _backend(client: SupervisorClient) -> _Supervisor:
    backend = client._backend
    assert isinstance(backend, _Supervisor)
    return backend


def _owner(client: SupervisorClient, tool: str) -> Extension:
    owner = _backend(client)._registry.tool_owner(tool)
    assert owner is not None
    return owner


async def _both(client: SupervisorClient, req: CallTool) -> tuple[Answer, Answer]:
    backend = _backend(client)
    return await _answer(backend.call_tool(req)), await _answer(backend.submit(req))


async def _through_client(client: SupervisorClient, req: CallTool) -> tuple[Answer, Answer]:
    """``SupervisorClient.call_tool`` (the reply's wait, returned) and its ``_ask``."""

    async def ask(step: Any) -> Answer:
        try:
            value = await step
        except SupervisorError as exc:
            return (type(exc).__name__, str(exc))
        return ("value", value)

    return (
        await ask(client.call_tool(req.name, req.args, call_id=req.call_id)),
        await ask(client._ask(req)),
    )


async def test_a_routed_call_and_a_submitted_one_answer_alike(kit: Kit) -> None:
    # Restarts wait long: the extension stays in BACKOFF (listed, not serving).
    config = kit.config(restart_backoff=30.0, restart_backoff_max=30.0)
    ext = kit.chaos("chaos", "--crash-after", "5")
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=config) as client:
            echo = CallTool(name="chaos_echo", args={"text": "hi"}, call_id="c1")
            fast, general = await _both(client, echo)
            assert fast == general == ("value", fast[1])
            assert fast[1].content == general[1].content
            fast, general = await _both(client, CallTool(name="nope", args={}))
            assert fast == general
            assert fast[0] == "UnknownTool"
            for req in (echo, CallTool(name="nope", args={})):
                fast, general = await _through_client(client, req)
                assert fast == general
            # The 5th call crashes it; then it is restarting, its tool still listed.
            events = client.subscribe()
            fast, general = await _both(client, echo)
            assert "ExtensionGone" in (fast[0], general[0])
            await wait_for(events, ExtensionCrashed)
            fast, general = await _both(client, echo)
            assert fast == general
            assert fast[0] == "ExtensionGone"
            assert "restarting" in fast[1]
        fast, general = await _both(client, echo)
    assert fast == general
    assert fast[0] == "SupervisorClosed"


async def test_the_inlined_send_and_the_general_one_agree(kit: Kit) -> None:
    config = kit.config(restart_backoff=30.0, restart_backoff_max=30.0)
    ext = kit.chaos("chaos", "--crash-after", "3")

    async def general(owner: Extension, req: CallTool) -> tuple[Answer, str]:
        # Extension.call_tool without its inlining: the path commands and intercepts take.
        reply: Reply[Any] = Reply()
        if owner._opened(reply, CallKind.TOOL, req.name):
            rid = PendingCalls.new_id(CallKind.TOOL)
            owner._send(
                rid, f.encode_frame(f.ToolCall(id=rid, name=req.name, args=req.args)), reply
            )
        return await _answer(reply), reply.rid

    async def inlined(owner: Extension, req: CallTool) -> tuple[Answer, str]:
        reply: Reply[Any] = Reply()
        owner.call_tool(req, reply)
        return await _answer(reply), reply.rid

    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=config) as client:
            owner = _owner(client, "chaos_echo")
            counts = owner.calls.counts
            req = CallTool(name="chaos_echo", args={"text": "x"})
            results = []
            for send in (inlined, general):
                before = dict(counts)
                answer, rid = await send(owner, req)
                results.append((answer, {k: counts[k] - before[k] for k in counts}))
                assert rid[0] == "t"
                assert rid[1:].isdigit()
            assert results[0] == results[1]
            assert results[0][1] == {"calls": 1, "errors": 0, "timeouts": 0, "bad_frames": 0}
            events = client.subscribe()
            await inlined(owner, req)  # the 3rd call: it crashes
            await wait_for(events, ExtensionCrashed)
            results = []
            for send in (inlined, general):
                before = dict(counts)
                answer, rid = await send(owner, req)
                results.append((answer, {k: counts[k] - before[k] for k in counts}))
                assert rid == ""  # never sent
            assert results[0] == results[1]
            assert results[0][0][0] == "ExtensionGone"
            assert results[0][1] == {"calls": 1, "errors": 1, "timeouts": 0, "bad_frames": 0}


@pytest.mark.parametrize("flags", [(), ("--tool-delay", "0.01")], ids=["fast", "slow"])
async def test_a_spinning_caller_and_a_parked_one_get_the_same_answers(
    kit: Kit, flags: tuple[str, ...]
) -> None:
    ext = kit.chaos("chaos", *flags)
    answers: dict[float, list[Answer]] = {}
    for spin in (kit.config().reply_spin or 50e-6, 0.0):
        with trio.fail_after(CYCLE):
            async with kit.open(ext, config=kit.config(reply_spin=spin)) as client:
                backend = _backend(client)
                got = []
                for i in range(20):
                    req = CallTool(name="chaos_echo", args={"text": str(i)})
                    got.append(await _answer(backend.call_tool(req)))
                got.append(await _answer(backend.call_tool(CallTool(name="nope", args={}))))
                answers[spin] = got
    spun, parked = answers.values()
    assert [(k, v.content if k == "value" else v) for k, v in spun] == [
        (k, v.content if k == "value" else v) for k, v in parked
    ]
    assert spun[3][1].content == parked[3][1].content


#: One line of every frame an extension sends (a new type must be added here).
_FRAMES = [
    b'{"type":"hello","name":"x","version":"1","capabilities":["tools"]}',
    b'{"type":"register_command","name":"c","description":"d"}',
    b'{"type":"register_tool","name":"t","description":"d","schema":{"type":"object"}}',
    b'{"type":"ready"}',
    b'{"type":"tool_result","id":"t1","content":[{"type":"text","text":"hi"}],"is_error":false}',
    b'{"type":"subscribe","events":["turn_start"],"intercept":["tool_call"]}',
    b'{"type":"event_intercept_response","id":"i2","block":true,"reason":"no"}',
    b'{"type":"command_response","id":"c3","action":"display","display":"ok"}',
    b'{"type":"notify","message":"m","level":"info"}',
    b'{"type":"panel_render","panel_id":"p","title":"t","lines":["a"],"footer":"f"}',
    b'{"type":"panel_close","panel_id":"p"}',
    b'{"type":"shutdown_ack"}',
]
_BAD = [
    b"not json",
    b"[1,2]",
    b'{"no":"type"}',
    b'{"type":"nonsense"}',
    b'{"type":"tool_result","id":7,"content":"x"}',
    b'{"type":"panel_render","panel_id":"p","lines":"not a list"}',
]


def test_the_bare_frame_codec_and_the_diagnosing_one_agree() -> None:
    assert {msgspec.json.decode(line)["type"] for line in _FRAMES} == f._EXT_TYPES
    for line in _FRAMES:
        frame = f.decode_ext_bare(line)
        assert frame == f.decode_ext_frame(line)
        assert f.encode_bare(frame) + b"\n" == f.encode_frame(frame)
    for line in _BAD:
        with pytest.raises(msgspec.DecodeError):
            f.decode_ext_bare(line)
        with pytest.raises(f.FrameError):
            f.decode_ext_frame(line)


async def test_lines_taken_at_once_are_the_lines_taken_one_by_one() -> None:
    rng = random.Random(26)
    lines = [b"x" * rng.choice([0, 1, 5, 40, 99, 100, 101, 300]) for _ in range(400)]
    data = b"".join(line + b"\n" for line in lines) + b"tail"
    cuts = sorted(rng.sample(range(1, len(data)), 60))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]

    async def read(batched: bool) -> list[Any]:
        send, receive = trio.testing.memory_stream_one_way_pair()
        reader = LineReader(receive, 100)
        out: list[Any] = []
        for chunk in chunks:
            await send.send_all(chunk)
            await reader.fill()
            if batched:
                out += reader.lines_nowait()
            while (item := reader.next_nowait()) is not MORE:
                out.append(item)
        await send.aclose()
        while (item := await reader.next()) is not None:
            out.append(item)
        return out

    assert await read(batched=True) == await read(batched=False)
