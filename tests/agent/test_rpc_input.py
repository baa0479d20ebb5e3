"""``corral rpc`` and bad input: malformed lines, oversize lines, and the token handshake."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from helpers.rpc_harness import open_rpc, rpc_env, write_script

TIMEOUT = 30

# (line, expected id, expected command, a piece of the error)
BAD_LINES: list[tuple[bytes, object, object, str]] = [
    (b"not json", None, None, "not valid JSON"),
    (b"\xff\xfe{", None, None, "not valid JSON"),
    (b'{"id":1,"type":"ping"', None, None, "not valid JSON"),
    (b"[1, 2]", None, None, "must be a JSON object, not list"),
    (b'"ping"', None, None, "must be a JSON object, not str"),
    (b'{"id":5,"type":"fly"}', 5, "fly", "unknown command type 'fly'; known: hello, prompt"),
    (b'{"id":"x"}', "x", None, "missing field `type`"),
    (b'{"id":6,"type":7}', 6, None, "`type` must be a string"),
    (b'{"id":8,"type":"prompt","message":42}', 8, "prompt", "Expected `str`, got `int`"),
    (b'{"id":9,"type":"prompt"}', 9, "prompt", "missing required field `message`"),
    (b'{"id":10,"type":"set_model","model":null}', 10, "set_model", "got `null`"),
    (b'{"id":11,"type":"ext_command","name":["a"]}', 11, "ext_command", "`$.name`"),
    (b'{"id":[1],"type":"ping"}', None, "ping", "id must be a string or a number, not [1]"),
    (b'{"id":true,"type":"ping"}', None, "ping", "id must be a string or a number, not true"),
    (
        b'{"id":"i","type":"prompt","message":"x","images":[{"data":"!!"}]}',
        "i",
        "prompt",
        "images[0]: data is not valid base64",
    ),
    (
        b'{"id":"j","type":"prompt","message":"x","images":[{"mime_type":"text/plain",'
        b'"data":"aGk="}]}',
        "j",
        "prompt",
        "images[0]: mime_type 'text/plain' is not image/*",
    ),
    (b'{"id":"k","type":"prompt","message":"x","images":"no"}', "k", "prompt", "`$.images`"),
]


async def test_each_bad_line_gets_an_error_and_serving_goes_on(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "still here"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script) as rpc:
            # Blank lines are ignored; a CRLF line ending is accepted.
            await rpc.send_raw(b"\n   \n" + b"\n".join(line for line, *_ in BAD_LINES) + b"\n")
            for line, ident, command, problem in BAD_LINES:
                frame = await rpc.read()
                assert frame["type"] == "response", line
                assert frame["success"] is False, line
                assert frame["id"] == ident, line
                assert frame["command"] == command, line
                assert problem in frame["error"], (line, frame["error"])
                assert "data" not in frame
            await rpc.send_raw(b'{"id":"ok","type":"ping"}\r\n')
            assert (await rpc.read())["id"] == "ok"
            await rpc.send({"id": "p", "type": "prompt", "message": "hi"})
            frames = await rpc.until_done()
            assert frames[-1]["type"] == "done"
            # Nothing bad reached the transcript.
            state = (await rpc.call("get_state"))["data"]
            assert state["message_count"] == 2


async def test_oversize_lines_are_refused_and_skipped(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "unused"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, "--line-limit", "1024") as rpc:
            # One write, over the limit: the id is read from the start of the line.
            big = b'{"id":"big","type":"prompt","message":"' + b"x" * 5000 + b'"}\n'
            await rpc.send_raw(big + b'{"id":1,"type":"ping"}\n')
            frame = await rpc.read()
            assert frame["id"] == "big"
            assert frame["success"] is False
            assert f"line of {len(big) - 1} bytes exceeds the limit of 1024 bytes" in frame["error"]
            assert (await rpc.read())["id"] == 1
            # Over the limit in several writes (never buffered whole), without an id.
            await rpc.send_raw(b'{"type":"prompt","message":"')
            for _ in range(4):
                await rpc.send_raw(b"y" * 100_000)
                await trio.sleep(0.01)
            await rpc.send_raw(b'"}\n{"id":2,"type":"ping"}\n')
            frame = await rpc.read()
            assert frame["id"] is None
            assert frame["success"] is False
            assert "exceeds the limit" in frame["error"]
            assert (await rpc.read())["id"] == 2
            # Exactly at the limit is fine.
            padded = b'{"id":3,"type":"ping"}'
            padded = padded[:-1] + b" " * (1024 - len(padded)) + b"}"
            assert len(padded) == 1024
            await rpc.send_raw(padded + b"\n")
            assert (await rpc.read())["success"] is True


async def test_line_without_newline_at_end_of_input_is_served(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "unused"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script) as rpc:
            await rpc.send_raw(b'{"id":"last","type":"ping"}')
            await rpc.close_stdin()
            frames = await rpc.read_all()
            assert [f["id"] for f in frames] == ["last"]
            assert await rpc.wait() == 0


def token_env(tmp_path: Path, token: str) -> dict[str, str]:
    return rpc_env(tmp_path / "home", CORRAL_RPC_TOKEN=token)


@pytest.mark.parametrize(
    "first",
    [
        b'{"id":0,"type":"ping"}',
        b'{"id":0,"type":"hello"}',
        b'{"id":0,"type":"hello","token":"wrong"}',
        b'{"id":0,"type":"hello","token":"s3cret-but-longer"}',
        b'{"id":0,"type":"hello","token":7}',
        b"garbage",
    ],
    ids=["ping", "no-token", "wrong", "longer", "not-a-string", "garbage"],
)
async def test_token_set_and_first_command_not_the_right_hello(
    tmp_path: Path, first: bytes
) -> None:
    script = write_script(tmp_path, {"text": "unused"})
    env = token_env(tmp_path, "s3cret")
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, env=env) as rpc:
            await rpc.send_raw(first + b'\n{"id":1,"type":"ping"}\n')
            frames = await rpc.read_all()
            assert len(frames) == 1, frames
            assert frames[0]["success"] is False
            assert frames[0]["type"] == "response"
            assert "s3cret" not in rpc.raw[0].decode()
            assert await rpc.wait() == 1


async def test_right_token_opens_the_session(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "authorised"})
    env = token_env(tmp_path, "s3cret")
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, env=env) as rpc:
            hello = await rpc.call("hello", token="s3cret")
            assert hello["success"] is True
            assert hello["data"]["protocol_version"] == 1
            assert (await rpc.call("ping"))["data"] == {"pong": True}
            again = await rpc.call("hello")  # once authenticated, hello is just hello
            assert again["success"] is True
            await rpc.send({"id": "p", "type": "prompt", "message": "hi"})
            frames = await rpc.until_done()
            assert frames[-1]["type"] == "done"
            await rpc.close_stdin()
            await rpc.read_all()
            assert await rpc.wait() == 0


async def test_empty_token_is_a_usage_error(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "unused"})
    env = token_env(tmp_path, "")
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, env=env) as rpc:
            assert await rpc.read_all() == []
            assert await rpc.wait() == 1
            assert "CORRAL_RPC_TOKEN is set but empty" in rpc.stderr


async def test_unusable_options_fail_before_serving(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": 5}\n', encoding="utf-8")
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, str(bad)) as rpc:
            assert await rpc.read_all() == []
            assert await rpc.wait() == 1
            assert "bad.jsonl:1" in rpc.stderr
            assert "Traceback" not in rpc.stderr
