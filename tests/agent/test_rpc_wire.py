"""Wire pieces of ``corral rpc`` without a process: lines, encoding, the ``--rpc`` flag,
and :func:`serve_rpc` over in-memory streams."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
import trio
import trio.testing
from helpers.rpc_harness import write_script

from agent import (
    AgentOptions,
    ImageContent,
    TextContent,
    ToolProgress,
    ToolResultEvent,
    UserMessage,
    open_runtime,
    serve_rpc,
)
from agent._cli.argv import rewrite_shortcuts
from agent._rpc.commands import COMMANDS, Response
from agent._rpc.server import encode_line


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--rpc"], ["rpc"]),
        (["-v", "--rpc", "--provider", "offline"], ["-v", "rpc", "--provider", "offline"]),
        (["run", "--rpc"], ["run", "--rpc"]),
        (["rpc", "--model", "x"], ["rpc", "--model", "x"]),
        (["--help"], ["--help"]),
        ([], []),
        (["--color", "never", "--rpc"], ["--color", "never", "rpc"]),
        (["-e", "x"], ["chat", "-e", "x"]),
        (["-v", "--ext=x", "--model", "m"], ["-v", "chat", "--ext=x", "--model", "m"]),
        (["--color=always", "-ex"], ["--color=always", "chat", "-ex"]),
        (["run", "-e", "x", "hi"], ["run", "-e", "x", "hi"]),
    ],
)
def test_rewrite_shortcuts(argv: list[str], expected: list[str]) -> None:
    assert rewrite_shortcuts(argv) == expected


def test_command_names_are_the_seed_then_corral_additions() -> None:
    seed = "hello prompt abort compact get_state get_messages clear set_model get_models ping"
    added = (
        "get_tools ext_list ext_command ext_panel_key ext_panel_close ext_reload ext_enable"
        " tools_clear set_reasoning"
    )
    assert list(COMMANDS) == seed.split() + added.split()


def test_response_frame_shape() -> None:
    ok = Response(id=msgspec.Raw(b'"a"'), command="ping", success=True, data={"pong": True})
    assert encode_line(ok) == (
        b'{"type":"response","id":"a","command":"ping","success":true,"data":{"pong":true}}\n'
    )
    bad = Response(id=msgspec.Raw(b"1.50"), command=None, success=False, error="nope")
    assert encode_line(bad) == (
        b'{"type":"response","id":1.50,"command":null,"success":false,"error":"nope"}\n'
    )


def test_events_on_the_wire_carry_image_sizes_not_data() -> None:
    image = ImageContent(mime_type="image/png", data="aGVsbG8=", bytes=5)
    user = UserMessage(content=[TextContent(text="see"), image], time="2026-01-01T00:00:00Z")
    line = json.loads(encode_line(user))
    assert line["content"][1] == {"type": "image", "mime_type": "image/png", "bytes": 5}
    result = ToolResultEvent(id="c", is_error=False, content=[image])
    assert json.loads(encode_line(result))["content"] == [
        {"type": "image", "mime_type": "image/png", "bytes": 5}
    ]
    assert json.loads(encode_line(ToolProgress(id="c", text="50%"))) == {
        "type": "tool_progress",
        "id": "c",
        "text": "50%",
    }


async def test_serve_rpc_over_memory_streams_and_a_closed_stdout(tmp_path: Path) -> None:
    options = AgentOptions(
        provider="scripted",
        script=write_script(tmp_path, {"text": "hi"}),
        home=str(tmp_path / "home"),
        cwd=str(tmp_path),
        discover=False,
        sandbox="off",
    )
    with trio.fail_after(10):
        async with open_runtime(options) as runtime:
            to_server, server_in = trio.testing.memory_stream_one_way_pair()
            server_out, from_server = trio.testing.memory_stream_one_way_pair()
            async with trio.open_nursery() as nursery:
                statuses: list[int] = []

                async def serve() -> None:
                    statuses.append(await serve_rpc(runtime, server_in, server_out))

                nursery.start_soon(serve)
                await to_server.send_all(b'{"id":1,"type":"ping"}\n')
                line = await from_server.receive_some()
                assert json.loads(line)["data"] == {"pong": True}
                # The client goes away without closing its end of stdin: serving stops,
                # with status 0 (the reader's choice, as `| head` is).
                await from_server.aclose()
                await to_server.send_all(b'{"id":2,"type":"ping"}\n')
            assert statuses == [0]
