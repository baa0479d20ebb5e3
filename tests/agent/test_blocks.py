"""Content blocks at the boundary: a bad image from an extension never poisons a session.

An extension (tests/agent/fixtures/image_ext.py) answers with whatever image block
the scripted model asks for; a session file written by an older corral holds a bad
block. Neither may break a prompt, ``get_messages``, a resume, or a model request.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.agentkit import write_ext
from helpers.http_fakes import OPENAI_FULL, Reply, open_fake_server
from test_runtime import opts

from agent import AgentOptions
from agent._events import Done, ToolResultEvent, TurnEnd
from agent._messages import (
    MAX_IMAGE_BYTES,
    ImageContent,
    Message,
    TextContent,
    ToolResultContent,
    image_problem,
    image_size,
    wire_message,
)
from agent._runtime import open_runtime

pytestmark = pytest.mark.usefixtures("no_leaks")

IMAGE_EXT = Path(__file__).resolve().parent / "fixtures" / "image_ext.py"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()


@pytest.mark.parametrize(
    ("mime", "data", "needle"),
    [
        ("image/png", "!!not base64!!", "not valid base64"),
        ("image/png", "abcde", "not valid base64"),
        ("text/html", PNG, "is not image/*"),
        ("image/png", "", "no image data"),
        ("image/png", "A" * (MAX_IMAGE_BYTES * 4 // 3 + 8), "limit"),
        ("image/png", PNG, None),
        ("image/svg+xml", PNG, None),
    ],
)
def test_image_problem(mime: str, data: str, needle: str | None) -> None:
    problem = image_problem(ImageContent(mime_type=mime, data=data))
    if needle is None:
        assert problem is None
    else:
        assert problem is not None
        assert needle in problem


@pytest.mark.parametrize("data", ["abcde", "====", "é", "", "A"])
def test_wire_form_is_total(data: str) -> None:
    message = Message(
        role="tool",
        content=[ToolResultContent(call_id="c", is_error=False, content=[ImageContent(data=data)])],
        time="t",
    )
    block = wire_message(message).content[0]
    assert isinstance(block, ToolResultContent)
    image = block.content[0]
    assert isinstance(image, ImageContent)
    assert image.data is None
    assert image.bytes == image_size(ImageContent(data=data)) >= 0


def snap(mime: str, data: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "snap", "args": {"mime_type": mime, "data": data}}]}


async def test_bad_image_from_an_extension_becomes_an_error_result(tmp_path: Path) -> None:
    ext = write_ext(tmp_path / "exts", "imager", IMAGE_EXT)
    turns = [snap("image/png", "Invalid!base64"), {"text": "noted"}]
    turns += [snap("image/png", PNG), {"text": "seen"}]
    with trio.fail_after(30):
        async with open_runtime(opts(tmp_path, *turns, ext_paths=[ext])) as rt:
            events = await rt.prompt("take a bad picture").collect()
            results = [e for e in events if isinstance(e, ToolResultEvent)]
            assert len(results) == 1
            assert results[0].is_error
            text = results[0].content[0]
            assert isinstance(text, TextContent)
            assert "extension imager, tool snap" in text.text
            assert "not valid base64" in text.text
            assert [e.stop for e in events if isinstance(e, TurnEnd)] == ["tool_use", "end_turn"]
            assert isinstance(events[-1], Done)
            # The session goes on, and reads work.
            assert [wire_message(m) for m in rt.messages()]
            events = await rt.prompt("take a good one").collect()
            good = [e for e in events if isinstance(e, ToolResultEvent)]
            assert not good[0].is_error
            assert isinstance(good[0].content[1], ImageContent)


def old_session(home: Path, work: Path) -> None:
    """A session file written before blocks were checked: a bad image is stored."""
    sessions = home / "sessions"
    sessions.mkdir(parents=True)
    bad = {"type": "image", "mime_type": "image/png", "data": "abcde"}
    lines = [
        {"type": "session", "name": "old", "cwd": str(work)},
        {
            "type": "message",
            "message": {
                "role": "user",
                "content": [{"type": "text", "text": "look"}, bad],
                "time": "t",
            },
        },
        {
            "type": "message",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": "ok"}],
                "time": "t",
            },
        },
    ]
    (sessions / "old.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


async def test_bad_block_in_an_old_session_breaks_no_read_and_no_request(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    old_session(home, work)
    async with open_fake_server() as server:
        server.queue(Reply(chunks=[OPENAI_FULL]))
        options = AgentOptions(
            provider="openai",
            model="m1",
            base_url=server.url,
            home=str(home),
            cwd=str(work),
            discover=False,
            sandbox="off",
            session="old",
        )
        with trio.fail_after(30):
            async with open_runtime(options) as rt:
                assert len([wire_message(m) for m in rt.messages()]) == 2
                events = await rt.prompt("again").collect()
                assert [e.stop for e in events if isinstance(e, TurnEnd)] == ["end_turn"]
        sent = server.last.body["messages"]
        first_user = next(m for m in sent if m["role"] == "user")
        assert first_user["content"].startswith("look[image omitted: data is not valid base64")
        assert "abcde" not in json.dumps(sent)
