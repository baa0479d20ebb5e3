"""Tool calls and commands over real pipes: results, errors, deadlines, bad input."""

from __future__ import annotations

import base64

import pytest
import trio
from helpers.supkit import CYCLE, Kit, capture_logs, wait_for

from supervisor import (
    CallTimeout,
    ExtensionGone,
    ExtensionInfo,
    ExtensionStarted,
    ImageBlock,
    Notified,
    ProtocolViolation,
    SupervisorClient,
    TextBlock,
    UnknownCommand,
    UnknownTool,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake image bytes").decode()

TOOLS = f"""\
emit({{"type": "hello", "name": NAME, "version": "1.0.0", "capabilities": ["tools"]}})
for t in ("rich", "liar", "fail"):
    emit({{"type": "register_tool", "name": t, "description": t,
          "schema": {{"type": "object"}}}})
emit({{"type": "ready"}})
for msg in frames():
    if msg["type"] == "tool_call":
        rid, name = msg["id"], msg["name"]
        if name == "rich":
            emit({{"type": "tool_result", "id": rid, "content": [
                {{"type": "text", "text": "args=" + json.dumps(msg["args"], sort_keys=True)}},
                {{"type": "image", "mime_type": "image/png", "data": "{PNG}"}},
            ]}})
        elif name == "liar":
            emit({{"type": "tool_result", "id": "never-sent",
                  "content": [{{"type": "text", "text": "forged"}}]}})
            emit({{"type": "command_response", "id": rid, "action": "display",
                  "display": "wrong kind"}})
            emit({{"type": "tool_result", "id": rid,
                  "content": [{{"type": "text", "text": "genuine"}}]}})
        else:
            emit({{"type": "tool_result", "id": rid, "is_error": True,
                  "content": [{{"type": "text", "text": "it failed"}}]}})
    elif msg["type"] == "shutdown":
        emit({{"type": "shutdown_ack"}})
        break
"""


async def _info(client: SupervisorClient, name: str) -> ExtensionInfo:
    return next(i for i in await client.list_extensions() if i.name == name)


async def test_tool_result_text_and_image_with_attribution(kit: Kit) -> None:
    ext = kit.inline("tools", TOOLS)
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            assert {t.name: t.extension for t in client.tools()} == {
                "rich": "tools",
                "liar": "tools",
                "fail": "tools",
            }
            out = await client.call_tool("rich", {"b": [1, 2], "a": "x"})
            failed = await client.call_tool("fail", {})
            info = await _info(client, "tools")
    assert out.extension == "tools"
    assert out.tool == "rich"
    assert out.is_error is False
    assert out.content == [
        TextBlock(text='args={"a": "x", "b": [1, 2]}'),
        ImageBlock(mime_type="image/png", data=PNG),
    ]
    image = out.content[1]
    assert isinstance(image, ImageBlock)
    assert base64.b64decode(image.data).startswith(b"\x89PNG")
    assert failed.is_error is True
    assert failed.content == [TextBlock(text="it failed")]
    assert info.stats.calls == 2
    assert info.stats.errors == 1


async def test_unknown_tool_and_command(kit: Kit) -> None:
    ext = kit.chaos("chaos")
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            with pytest.raises(UnknownTool) as tool_info:
                await client.call_tool("no_such_tool", {})
            with pytest.raises(UnknownCommand) as cmd_info:
                await client.invoke_command("no-such-command")
            # Built-in names are never routed to an extension.
            with pytest.raises(UnknownTool):
                await client.call_tool("bash", {"command": "ls"})
    assert tool_info.value.name == "no_such_tool"
    assert cmd_info.value.name == "no-such-command"


async def test_replies_to_ids_never_sent_are_dropped_and_counted(kit: Kit) -> None:
    ext = kit.inline("tools", TOOLS)
    with capture_logs() as logs, trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            out = await client.call_tool("liar", {})
            info = await _info(client, "tools")
    assert out.content == [TextBlock(text="genuine")]
    assert info.stats.bad_frames == 2
    assert info.stats.calls == 1
    bad = [e for e in logs if e["event"] == "bad_frame"]
    assert len(bad) == 2
    assert all(e["extension"] == "tools" for e in bad)
    assert "never-sent" in bad[0]["problem"]


async def test_tool_timeout_is_counted(kit: Kit) -> None:
    ext = kit.chaos("hang", "--hang")
    cfg = kit.config(tool_timeout=0.5)
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=cfg) as client:
            t0 = trio.current_time()
            with pytest.raises(CallTimeout) as exc:
                await client.call_tool("chaos_echo", {"text": "x"})
            waited = trio.current_time() - t0
            info = await _info(client, "hang")
    assert 0.5 <= waited < 0.5 + 2.0
    assert exc.value.extension == "hang"
    assert exc.value.seconds == 0.5
    assert "chaos_echo" in str(exc.value)
    assert info.stats.timeouts == 1
    assert info.stats.calls == 1
    assert info.state == "running"


async def test_command_timeout(kit: Kit) -> None:
    ext = kit.chaos("hang", "--hang")
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=kit.config(command_timeout=0.3)) as client:
            with pytest.raises(CallTimeout):
                await client.invoke_command("chaos")
            info = await _info(client, "hang")
    assert info.stats.timeouts == 1


@pytest.mark.slow
async def test_caller_cancellation_forgets_the_call(kit: Kit) -> None:
    ext = kit.chaos("slow", "--tool-delay", "0.5")
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            with trio.move_on_after(0.1):
                await client.call_tool("chaos_echo", {"text": "abandoned"})
            # The late reply of the abandoned call must not answer this one.
            out = await client.call_tool("chaos_echo", {"text": "second"})
            info = await _info(client, "slow")
    assert out.content == [TextBlock(text="echo: second")]
    assert info.stats.bad_frames == 1  # the late reply, dropped


@pytest.mark.slow
async def test_extension_that_stops_reading_cannot_block_the_host(kit: Kit) -> None:
    deaf = kit.chaos("deaf", "--stop-reading")
    cfg = kit.config(tool_timeout=1.0, write_backlog=4)
    big = "x" * 100_000  # one call is more than a pipe buffer
    outcomes: list[BaseException | None] = []
    with trio.fail_after(CYCLE):
        async with kit.open(deaf, config=cfg) as client:
            t0 = trio.current_time()
            async with trio.open_nursery() as nursery:
                for i in range(12):
                    nursery.start_soon(call_echo, client, big, i, outcomes)
            calls_done = trio.current_time() - t0
            t1 = trio.current_time()
        stop_took = trio.current_time() - t1
    assert len(outcomes) == 12
    assert all(isinstance(o, CallTimeout | ExtensionGone) for o in outcomes), outcomes
    assert any(isinstance(o, ExtensionGone) for o in outcomes)  # the backlog filled up
    assert calls_done < 1.0 + 2.0
    assert stop_took < 0.5 + 0.3 + 2.0


async def call_echo(
    client: SupervisorClient, text: str, i: int, out: list[BaseException | None]
) -> None:
    try:
        await client.call_tool("chaos_echo", {"text": text, "i": i})
    except (CallTimeout, ExtensionGone) as exc:
        out.append(exc)
    else:
        out.append(None)


@pytest.mark.slow
async def test_deaf_extension_does_not_slow_others(kit: Kit) -> None:
    deaf = kit.chaos("deaf", "--stop-reading", "--hello-delay", "0")
    healthy = kit.inline(
        "healthy",
        """\
        emit({"type": "hello", "name": NAME})
        emit({"type": "register_command", "name": "ping"})
        emit({"type": "ready"})
        for msg in frames():
            if msg["type"] == "command_invoked":
                emit({"type": "command_response", "id": msg["id"], "action": "display",
                      "display": "pong"})
        """,
    )
    cfg = kit.config(tool_timeout=1.0, write_backlog=2)
    out: list[BaseException | None] = []
    with trio.fail_after(CYCLE):
        async with kit.open(deaf, healthy, config=cfg) as client, trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(call_echo, client, "y" * 100_000, i, out)
            await trio.sleep(0.2)
            t0 = trio.current_time()
            pong = await client.invoke_command("ping")
            assert trio.current_time() - t0 < 0.5
    assert pong.display == "pong"
    assert len(out) == 6
    assert all(o is not None for o in out)


async def test_32_concurrent_calls_are_matched_by_id(kit: Kit) -> None:
    ext = kit.chaos("chaos")
    results: dict[int, str] = {}

    async def one(client: SupervisorClient, i: int) -> None:
        out = await client.call_tool("chaos_echo", {"text": f"call-{i}"})
        block = out.content[0]
        assert isinstance(block, TextBlock)
        results[i] = block.text

    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            async with trio.open_nursery() as nursery:
                for i in range(32):
                    nursery.start_soon(one, client, i)
            info = await _info(client, "chaos")
    assert results == {i: f"echo: call-{i}" for i in range(32)}
    assert info.stats.calls == 32
    assert info.stats.errors == 0
    assert info.stats.bad_frames == 0


COMMANDS = """\
emit({"type": "hello", "name": NAME, "version": "1.0.0", "capabilities": ["commands"]})
for c in ("p", "i", "d", "n", "e", "empty", "null", "/slashed"):
    emit({"type": "register_command", "name": c, "description": "cmd " + c})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] != "command_invoked":
        continue
    rid, name, args = msg["id"], msg["name"], msg["args"]
    reply = {"type": "command_response", "id": rid}
    if name == "p":
        reply.update(action="prompt", prompt="prompt:" + args)
    elif name == "i":
        reply.update(action="insert", insert="insert:" + args)
    elif name == "d":
        reply.update(action="display", display="display:" + args)
    elif name == "n":
        reply.update(action="noop")
        emit({"type": "notify", "level": "success", "message": "did it myself"})
    elif name == "e":
        reply.update(action="display", display="partial", error="it went wrong")
    elif name in ("empty", "null"):
        # A Go extension's zero value: no action at all is "noop".
        reply.update(action="" if name == "empty" else None, display="ignored")
    else:
        reply.update(action="display", display="slashed:" + args)
    emit(reply)
"""


async def test_command_actions_and_error(kit: Kit) -> None:
    ext = kit.inline("cmds", COMMANDS)
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            assert {c.name: c.description for c in client.commands()} == {
                "p": "cmd p",
                "i": "cmd i",
                "d": "cmd d",
                "n": "cmd n",
                "e": "cmd e",
                "empty": "cmd empty",
                "null": "cmd null",
                "slashed": "cmd /slashed",
            }
            events = client.subscribe()
            p = await client.invoke_command("p", "  berlin  ")
            i = await client.invoke_command("i", "x y")
            d = await client.invoke_command("d")
            n = await client.invoke_command("n")
            note = await wait_for(events, Notified)
            e = await client.invoke_command("e", "z")
            s = await client.invoke_command("slashed", "ok")
            empty = await client.invoke_command("empty")
            null = await client.invoke_command("null")
            (info,) = await client.list_extensions()
    assert (p.action, p.prompt, p.extension) == ("prompt", "prompt:berlin", "cmds")
    assert (i.action, i.insert) == ("insert", "insert:x y")
    assert (d.action, d.display) == ("display", "display:")
    assert (n.action, n.error) == ("noop", "")
    assert (note.extension, note.level, note.message) == ("cmds", "success", "did it myself")
    assert (e.action, e.display, e.error) == ("display", "partial", "it went wrong")
    assert (s.action, s.display) == ("display", "slashed:ok")
    assert (empty.action, null.action) == ("noop", "noop")
    assert info.stats.bad_frames == 0


async def test_reserved_names_and_first_loaded_wins(kit: Kit) -> None:
    greedy = kit.inline(
        "greedy",
        """\
        emit({"type": "hello", "name": NAME})
        for t in ("read", "write", "edit", "bash", "greedy_tool"):
            emit({"type": "register_tool", "name": t, "schema": {"type": "object"}})
        for c in ("help", "ext", "reload-ext", "greedy"):
            emit({"type": "register_command", "name": c})
        emit({"type": "ready"})
        for msg in frames():
            pass
        """,
    )
    # "first" says hello later than "second", but it is loaded first: it owns the names.
    first = kit.chaos("first", "--hello-delay", "0.3")
    second = kit.chaos("second")
    builtins = ("read", "write", "edit", "bash")
    with capture_logs() as logs, trio.fail_after(CYCLE):
        async with kit.open(
            greedy, first, second, config=kit.config(reserved_tools=builtins)
        ) as client:
            tools = {t.name: t.extension for t in client.tools()}
            commands = {c.name: c.extension for c in client.commands()}
            out = await client.call_tool("chaos_echo", {"text": "who"})
            cmd = await client.invoke_command("chaos")
    assert tools == {"greedy_tool": "greedy", "chaos_echo": "first"}
    assert commands == {"greedy": "greedy", "chaos": "first"}
    assert out.extension == "first"
    assert cmd.extension == "first"
    clashes = {
        (e["kind"], e["name"], e["shadowed"], e["winner"])
        for e in logs
        if e["event"] == "name_clash"
    }
    assert clashes == {
        ("tool", "read", "greedy", "built-in"),
        ("tool", "write", "greedy", "built-in"),
        ("tool", "edit", "greedy", "built-in"),
        ("tool", "bash", "greedy", "built-in"),
        ("command", "help", "greedy", "built-in"),
        ("command", "ext", "greedy", "built-in"),
        ("command", "reload-ext", "greedy", "built-in"),
        ("tool", "chaos_echo", "second", "first"),
        ("command", "chaos", "second", "first"),
    }


async def test_register_tool_validation(kit: Kit) -> None:
    ext = kit.inline(
        "picky",
        """\
        def tool(name, schema):
            emit({"type": "register_tool", "name": name, "description": "d",
                  "schema": schema})
        emit({"type": "hello", "name": NAME})
        tool("good", {"type": "object", "properties": {"a": {"type": "string"}}})
        tool("array_schema", {"type": "array"})
        tool("string_schema", "object")
        tool("list_schema", [{"type": "object"}])
        tool("no_type", {"properties": {}})
        emit({"type": "register_tool", "name": "no_schema"})
        tool("", {"type": "object"})
        tool("has space", {"type": "object"})
        tool("9lives", {"type": "object"})
        tool("semi;colon", {"type": "object"})
        tool("also_good", {"type": "object"})
        emit({"type": "register_command", "name": ""})
        emit({"type": "register_command", "name": "two words"})
        emit({"type": "register_command", "name": "fine"})
        emit({"type": "ready"})
        for msg in frames():
            if msg["type"] == "tool_call":
                emit({"type": "tool_result", "id": msg["id"],
                      "content": [{"type": "text", "text": msg["name"]}]})
        """,
    )
    with capture_logs() as logs, trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            tools = {t.name: t for t in client.tools()}
            commands = [c.name for c in client.commands()]
            out = await client.call_tool("also_good", {})
    assert sorted(tools) == ["also_good", "good"]
    assert tools["good"].schema == {"type": "object", "properties": {"a": {"type": "string"}}}
    assert commands == ["fine"]
    assert out.content == [TextBlock(text="also_good")]
    rejected = {e["tool"] for e in logs if e["event"] == "tool_rejected"}
    assert rejected == {
        "array_schema",
        "string_schema",
        "list_schema",
        "no_type",
        "no_schema",
        "",
        "has space",
        "9lives",
        "semi;colon",
    }
    assert all(e["extension"] == "picky" for e in logs if e["event"] == "tool_rejected")


async def test_garbage_and_unknown_frames_are_skipped_and_counted(kit: Kit) -> None:
    ext = kit.chaos("noisy", "--flood", "200")
    with capture_logs() as logs, trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            # chaos writes the flood before it reads stdin, so the reply comes after it.
            out = await client.call_tool("chaos_echo", {"text": "still serving"})
            info = await _info(client, "noisy")
            again = await client.call_tool("chaos_echo", {"text": "again"})
    assert out.content == [TextBlock(text="echo: still serving")]
    assert again.content == [TextBlock(text="echo: again")]
    assert info.stats.bad_frames == 400
    assert info.state == "running"
    bad = [e for e in logs if e["event"] == "bad_frame"]
    assert 1 <= len(bad) <= 20  # logged, but not 400 times
    assert all(e["extension"] == "noisy" for e in bad)
    assert "chaos garbage line 1" in bad[0]["excerpt"]


async def test_oversize_line_fails_its_call_promptly(kit: Kit) -> None:
    ext = kit.chaos("big", "--oversize", "1000000")
    cfg = kit.config(max_frame_bytes=64 * 1024, tool_timeout=4.0)
    with capture_logs() as logs, trio.fail_after(CYCLE):
        async with kit.open(ext, config=cfg) as client:
            t0 = trio.current_time()
            with pytest.raises(ProtocolViolation) as exc:
                await client.call_tool("chaos_echo", {"text": "first"})
            took = trio.current_time() - t0
            out = await client.call_tool("chaos_echo", {"text": "second"})
            info = await _info(client, "big")
    assert took < 4.0 / 2
    assert exc.value.extension == "big"
    assert "65536" in str(exc.value)
    assert exc.value.excerpt.startswith('{"type":"tool_result"')
    assert out.content == [TextBlock(text="echo: second")]
    assert info.stats.bad_frames == 1
    assert info.state == "running"
    (bad,) = [e for e in logs if e["event"] == "bad_frame"]
    assert bad["extension"] == "big"


async def test_slow_subscriber_loses_events_but_never_blocks(kit: Kit) -> None:
    ext = kit.inline(
        "loud",
        """\
        emit({"type": "hello", "name": NAME})
        emit({"type": "register_command", "name": "shout"})
        emit({"type": "ready"})
        for msg in frames():
            if msg["type"] == "command_invoked":
                for i in range(50):
                    emit({"type": "notify", "level": "info", "message": f"n{i}"})
                emit({"type": "command_response", "id": msg["id"], "action": "noop"})
        """,
    )
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            # Each subscription opens with an ExtensionStarted for "loud" (already running).
            slow = client.subscribe(buffer=3)
            fast = client.subscribe()
            await client.invoke_command("shout")
            await client.invoke_command("shout")  # still answered: nobody waits on "slow"
            got_fast = [await wait_for(fast, Notified) for _ in range(100)]
            got_slow = [slow.receive_nowait() for _ in range(3)]
            with pytest.raises(trio.WouldBlock):
                slow.receive_nowait()
    assert [e.message for e in got_fast] == [f"n{i}" for i in range(50)] * 2
    assert isinstance(got_slow[0], ExtensionStarted)
    assert got_slow[0].extension == "loud"
    assert [e.message for e in got_slow if isinstance(e, Notified)] == ["n0", "n1"]


IDS = """\
emit({"type": "hello", "name": NAME})
emit({"type": "register_tool", "name": NAME + "_id", "schema": {"type": "object"}})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "tool_call":
        emit({"type": "tool_result", "id": msg["id"],
              "content": [{"type": "text", "text": msg["id"]}]})
    elif msg["type"] == "shutdown":
        break
"""


async def test_request_ids_are_unique_per_host(kit: Kit) -> None:
    """SPEC: ids are unique per host, across extensions and across reloads."""
    a, b = kit.inline("a", IDS), kit.inline("b", IDS)
    ids: list[str] = []

    async def collect(client: SupervisorClient) -> None:
        for tool in ("a_id", "b_id", "a_id", "b_id"):
            block = (await client.call_tool(tool, {})).content[0]
            assert isinstance(block, TextBlock)
            ids.append(block.text)

    with trio.fail_after(CYCLE):
        async with kit.open(a, b) as client:
            await collect(client)
            await client.reload()
            await collect(client)
    assert len(ids) == 8
    assert len(set(ids)) == 8, ids
