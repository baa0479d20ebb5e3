"""Wire frames: the seed's frame types and field names, error kinds, and hello_ack.

Decoding and encoding are pure (``supervisor._frames``); the hello_ack test runs a
real extension that reports the ack it received.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
import trio
from helpers.supkit import CYCLE, Kit, wait_for

from supervisor import PROTOCOL_VERSION, ExtensionStarted, HostInfo, Notified
from supervisor import _frames as f

# One example per extension -> host frame type, with the seed's field names.
SEED_EXT_FRAMES: list[tuple[dict[str, Any], type[Any], dict[str, Any]]] = [
    (
        {
            "type": "hello",
            "name": "weather",
            "version": "1.0.0",
            "capabilities": ["commands", "tools"],
        },
        f.Hello,
        {"name": "weather", "version": "1.0.0", "capabilities": ["commands", "tools"]},
    ),
    (
        {"type": "register_command", "name": "weather", "description": "current weather"},
        f.RegisterCommand,
        {"name": "weather", "description": "current weather"},
    ),
    (
        {
            "type": "register_tool",
            "name": "weather",
            "description": "Get weather.",
            "schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
        f.RegisterTool,
        {
            "name": "weather",
            "description": "Get weather.",
            "schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    ),
    ({"type": "ready"}, f.Ready, {}),
    (
        {
            "type": "tool_result",
            "id": "t1",
            "content": [
                {"type": "text", "text": "Berlin: 16°C, fog"},
                {"type": "image", "mime_type": "image/png", "data": "iVBORw0K"},
            ],
            "is_error": True,
        },
        f.ToolResult,
        {
            "id": "t1",
            "is_error": True,
            "content": [
                f.TextBlock(text="Berlin: 16°C, fog"),
                f.ImageBlock(mime_type="image/png", data="iVBORw0K"),
            ],
        },
    ),
    (
        {
            "type": "subscribe",
            "events": ["session_start", "turn_start", "tool_call", "turn_end", "assistant_message"],
            "intercept": ["tool_call", "turn_start", "assistant_message"],
        },
        f.Subscribe,
        {
            "events": ["session_start", "turn_start", "tool_call", "turn_end", "assistant_message"],
            "intercept": ["tool_call", "turn_start", "assistant_message"],
        },
    ),
    (
        {
            "type": "event_intercept_response",
            "id": "i1",
            "block": True,
            "reason": "no",
            "modified_args": {"command": "echo GUARDED: ls"},
            "replace_text": "[redacted]",
        },
        f.EventInterceptResponse,
        {
            "id": "i1",
            "block": True,
            "reason": "no",
            "modified_args": {"command": "echo GUARDED: ls"},
            "replace_text": "[redacted]",
        },
    ),
    (
        {
            "type": "command_response",
            "id": "c1",
            "action": "prompt",
            "prompt": "p",
            "insert": "i",
            "display": "d",
            "error": "e",
        },
        f.CommandResponse,
        {
            "id": "c1",
            "action": "prompt",
            "prompt": "p",
            "insert": "i",
            "display": "d",
            "error": "e",
        },
    ),
    (
        {"type": "notify", "level": "warn", "message": "refreshed cache (12 entries)"},
        f.Notify,
        {"level": "warn", "message": "refreshed cache (12 entries)"},
    ),
    ({"type": "shutdown_ack"}, f.ShutdownAck, {}),
]


def _line(obj: Any) -> bytes:
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    ("raw", "cls", "fields"), SEED_EXT_FRAMES, ids=[c[0]["type"] for c in SEED_EXT_FRAMES]
)
def test_every_seed_ext_frame_decodes(raw: dict[str, Any], cls: type[Any], fields: Any) -> None:
    frame = f.decode_ext_frame(_line(raw))
    assert type(frame) is cls
    for key, value in fields.items():
        assert getattr(frame, key) == value
    # Round trip: encoding gives back the seed's field names and values.
    assert {k: v for k, v in json.loads(f.encode_frame(frame)).items() if k in raw} == raw


def test_seed_frame_defaults() -> None:
    """Optional fields of the seed default to "allow / nothing"."""
    resp = f.decode_ext_frame(b'{"type":"event_intercept_response","id":"x"}')
    assert isinstance(resp, f.EventInterceptResponse)
    assert (resp.block, resp.modified_args, resp.replace_text) == (False, None, None)
    result = f.decode_ext_frame(b'{"type":"tool_result","id":"x"}')
    assert isinstance(result, f.ToolResult)
    assert (result.content, result.is_error) == ([], False)
    assert f.decode_ext_frame(b'{"type":"notify","message":"m"}') == f.Notify(message="m")


def test_unknown_fields_are_tolerated() -> None:
    frame = f.decode_ext_frame(
        b'{"type":"hello","name":"x","version":"1","future_field":{"a":[1]},"v2":true}'
    )
    assert frame == f.Hello(name="x", version="1")
    block = f.decode_ext_frame(
        b'{"type":"tool_result","id":"1","content":[{"type":"text","text":"t","lang":"en"}]}'
    )
    assert isinstance(block, f.ToolResult)
    assert block.content == [f.TextBlock(text="t")]


@pytest.mark.parametrize(
    ("line", "kind", "frame_type", "frame_id"),
    [
        (b"not json at all", "json", None, None),
        (b'{"type":"hello",', "json", None, None),
        (b"[1, 2, 3]", "json", None, None),
        (b'"hello"', "json", None, None),
        (b'{"type":"chaos_noise","n":1}', "unknown_type", "chaos_noise", None),
        (b'{"type":"tool_progress","id":"t9"}', "unknown_type", "tool_progress", "t9"),
        (b'{"name":"x"}', "invalid", None, None),
        (b'{"type":7,"id":"a"}', "invalid", None, "a"),
        (b'{"type":"hello"}', "invalid", "hello", None),
        (b'{"type":"hello","name":42}', "invalid", "hello", None),
        (b'{"type":"tool_result","id":"t3","content":"text"}', "invalid", "tool_result", "t3"),
        (b'{"type":"tool_result","id":"t4","is_error":"yes"}', "invalid", "tool_result", "t4"),
        (b'{"type":"notify","level":"shout","message":"m"}', "invalid", "notify", None),
        (
            b'{"type":"command_response","id":"c1","action":"explode"}',
            "invalid",
            "command_response",
            "c1",
        ),
        (
            b'{"type":"event_intercept_response","id":"i1","block":"no"}',
            "invalid",
            "event_intercept_response",
            "i1",
        ),
    ],
)
def test_bad_lines_raise_frame_error(
    line: bytes, kind: str, frame_type: str | None, frame_id: str | None
) -> None:
    with pytest.raises(f.FrameError) as info:
        f.decode_ext_frame(line)
    err = info.value
    assert (err.kind, err.frame_type, err.frame_id) == (kind, frame_type, frame_id)
    assert err.excerpt == line[:120].decode()
    assert err.detail


def test_frame_error_excerpt_is_short() -> None:
    with pytest.raises(f.FrameError) as info:
        f.decode_ext_frame(b"x" * 10_000)
    assert len(info.value.excerpt) <= 121
    assert info.value.excerpt.endswith("…")


def test_host_frames_encode_with_seed_names() -> None:
    def enc(frame: Any) -> dict[str, Any]:
        raw = f.encode_frame(frame)
        assert raw.endswith(b"\n")
        assert raw.count(b"\n") == 1
        return typing_cast_dict(json.loads(raw))

    ack = enc(f.HelloAck(zot_version="0.1", provider="anthropic", model="m", cwd="/w"))
    assert ack["type"] == "hello_ack"
    assert ack["protocol_version"] == 1 == PROTOCOL_VERSION
    assert {k: ack[k] for k in ("zot_version", "provider", "model", "cwd")} == {
        "zot_version": "0.1",
        "provider": "anthropic",
        "model": "m",
        "cwd": "/w",
    }
    assert enc(f.CommandInvoked(id="c1", name="weather", args="berlin")) == {
        "type": "command_invoked",
        "id": "c1",
        "name": "weather",
        "args": "berlin",
    }
    assert enc(f.ToolCall(id="t1", name="weather", args={"city": "Berlin"})) == {
        "type": "tool_call",
        "id": "t1",
        "name": "weather",
        "args": {"city": "Berlin"},
    }
    assert enc(f.Event(event="turn_start", step=1)) == {
        "type": "event",
        "event": "turn_start",
        "step": 1,
    }
    assert enc(f.Event(event="turn_end", stop="end_turn")) == {
        "type": "event",
        "event": "turn_end",
        "stop": "end_turn",
    }
    assert enc(
        f.Event(event="tool_call", tool_id="x", tool_name="read", tool_args={"path": "a"})
    ) == {
        "type": "event",
        "event": "tool_call",
        "tool_id": "x",
        "tool_name": "read",
        "tool_args": {"path": "a"},
    }
    assert enc(
        f.EventIntercept(
            id="i1",
            event="tool_call",
            tool_id="x",
            tool_name="bash",
            tool_args={"command": "rm -rf /tmp/foo"},
        )
    ) == {
        "type": "event_intercept",
        "id": "i1",
        "event": "tool_call",
        "tool_id": "x",
        "tool_name": "bash",
        "tool_args": {"command": "rm -rf /tmp/foo"},
    }
    assert enc(f.EventIntercept(id="i2", event="turn_start", step=3)) == {
        "type": "event_intercept",
        "id": "i2",
        "event": "turn_start",
        "step": 3,
    }
    assert enc(f.EventIntercept(id="i3", event="assistant_message", text="sk-...")) == {
        "type": "event_intercept",
        "id": "i3",
        "event": "assistant_message",
        "text": "sk-...",
    }
    assert enc(f.Shutdown()) == {"type": "shutdown"}


def typing_cast_dict(value: Any) -> dict[str, Any]:
    assert isinstance(value, dict)
    return value


def test_frame_structs_are_frozen_and_tolerant() -> None:
    """Wire frames never forbid unknown fields (peers may extend them)."""
    for cls in (*f.ExtFrame.__args__, *f.HostFrame.__args__):
        cfg = cls.__struct_config__
        assert cfg.frozen
        assert not cfg.forbid_unknown_fields
        assert cfg.tag_field == "type"
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"type":"hello"}', type=f.Hello)


ACK_ECHO = """\
emit({"type": "hello", "name": NAME, "version": "1.0.0"})
emit({"type": "register_command", "name": "ack", "description": "show the hello_ack"})
emit({"type": "ready"})
acks = []
for msg in frames():
    if msg["type"] == "hello_ack":
        acks.append(msg)
    elif msg["type"] == "command_invoked":
        emit({"type": "notify", "level": "info", "message": json.dumps(acks)})
        emit({"type": "command_response", "id": msg["id"], "action": "noop"})
    elif msg["type"] == "shutdown":
        emit({"type": "shutdown_ack"})
        break
"""


async def test_hello_ack_carries_protocol_version_and_host_info(kit: Kit) -> None:
    ext = kit.inline("acker", ACK_ECHO)
    host = HostInfo(provider="anthropic", model="claude-test", cwd="/work/project")
    with trio.fail_after(CYCLE):
        async with kit.open(ext, host=host) as client:
            events = client.subscribe()
            outcome = await client.invoke_command("ack")
            assert outcome.action == "noop"
            note = await wait_for(events, Notified, lambda e: e.extension == "acker")
    acks = json.loads(note.message)
    assert len(acks) == 1, "exactly one hello_ack"
    ack = acks[0]
    assert ack["protocol_version"] == 1
    assert (ack["provider"], ack["model"], ack["cwd"]) == (
        "anthropic",
        "claude-test",
        "/work/project",
    )
    assert isinstance(ack["zot_version"], str)


async def test_set_host_info_reaches_later_hello_acks(kit: Kit) -> None:
    ext = kit.inline("acker", ACK_ECHO)
    with trio.fail_after(CYCLE):
        async with kit.open(ext, host=HostInfo(provider="p1", model="m1", cwd="/a")) as client:
            await client.set_host_info("p2", "m2", "/b")
            await client.reload()
            events = client.subscribe()
            await client.invoke_command("ack")
            note = await wait_for(events, Notified)
    (ack,) = json.loads(note.message)
    assert (ack["provider"], ack["model"], ack["cwd"]) == ("p2", "m2", "/b")


async def test_a_host_change_while_an_extension_starts_reaches_its_hello_ack(kit: Kit) -> None:
    """The answer to hello is made before the hello comes: a change of host that
    comes in between is in it all the same."""
    ext = kit.inline("acker", "import time\ntime.sleep(1.0)\n" + ACK_ECHO)
    cfg = kit.config(late_after=0.1)
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=cfg, host=HostInfo(provider="p1", cwd="/a")) as client:
            events = client.subscribe()
            assert (await client.list_extensions())[0].state == "starting"
            await client.set_host_info("p2", "m2", "/b")
            await wait_for(events, ExtensionStarted)
            await client.invoke_command("ack")
            note = await wait_for(events, Notified)
    (ack,) = json.loads(note.message)
    assert (ack["provider"], ack["model"], ack["cwd"]) == ("p2", "m2", "/b")


NOTIFIER = """\
emit({"type": "hello", "name": NAME, "version": "1.0.0"})
emit({"type": "register_command", "name": "levels", "description": "one note per level"})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "command_invoked":
        for level in ("info", "success", "warn", "warning", "error"):
            emit({"type": "notify", "level": level, "message": level})
        emit({"type": "command_response", "id": msg["id"], "action": "noop"})
"""


async def test_notify_levels_are_the_seed_s_and_warning_is_warn(kit: Kit) -> None:
    # The seed names `info`, `success`, `warn`, `error`; docs/rpc.md once listed
    # `warning`, so an extension written from it sends that: it is read as `warn`.
    ext = kit.inline("notifier", NOTIFIER)
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            events = client.subscribe()
            await client.invoke_command("levels")
            notes = [await wait_for(events, Notified) for _ in range(5)]
            (info,) = await client.list_extensions()
    assert [(n.message, n.level) for n in notes] == [
        ("info", "info"),
        ("success", "success"),
        ("warn", "warn"),
        ("warning", "warn"),
        ("error", "error"),
    ]
    assert info.stats.bad_frames == 0
