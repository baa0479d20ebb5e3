"""The client side of the tool-host wire (``supervisor/_hostwire.py``). Pure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from supervisor._hostwire import (
    OPTIONAL_METHODS,
    ErrorInfo,
    ErrorResponse,
    EventBody,
    ExecuteValue,
    HostErrorType,
    HostEvent,
    HostWireError,
    Method,
    NativeFormat,
    OkResponse,
    ProviderNativeToolResult,
    Request,
    Result,
    ToolSchema,
    WireErrorKind,
    decode_execute_value,
    decode_formatted_result,
    decode_host_message,
    decode_tool_schemas,
    encode_request,
)
from supervisor.lowlevel import SDK_DIR


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def test_requests_encode_as_one_seed_shaped_line() -> None:
    data = encode_request(Request(id="7", method=Method.EXECUTE_TOOL, params={"tool_name": "t"}))
    assert data.endswith(b"\n")
    assert data.count(b"\n") == 1
    assert json.loads(data) == {
        "v": 1,
        "id": "7",
        "method": "execute_tool",
        "params": {"tool_name": "t"},
    }
    assert json.loads(encode_request(Request(id="1", method="init")))["params"] == {}


def test_method_vocabulary() -> None:
    assert {m.value for m in OPTIONAL_METHODS} == {
        "get_config_schema",
        "get_ui_elements",
        "get_tags",
        "required_tags",
        "format_tool_result",
        "format_tool_call_preview",
        "to_display_format",
    }
    assert len(Method) == 10


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            {"v": 1, "id": "a", "ok": True, "result": {"value": [1], "state": {"n": 1}}},
            OkResponse(id="a", result=Result(value=[1], state={"n": 1})),
        ),
        ({"v": 1, "id": "a", "ok": True, "result": {"value": None}}, OkResponse(id="a")),
        ({"v": 1, "id": "a", "ok": True}, OkResponse(id="a")),
        (
            {"v": 1, "id": "a", "ok": False, "error": {"type": "E", "detail": "d", "stack": "s"}},
            ErrorResponse(id="a", error=ErrorInfo(type="E", detail="d", stack="s")),
        ),
        (
            {"v": 1, "id": "a", "ok": False},
            ErrorResponse(id="a", error=ErrorInfo(detail="the host gave no error details")),
        ),
        (
            {"v": 1, "id": "a", "event": {"type": "part", "payload": {"p": 1}}},
            HostEvent(id="a", event=EventBody(type="part", payload={"p": 1})),
        ),
        (
            {"v": 1, "id": "a", "event": {"type": "progress"}},
            HostEvent(id="a", event=EventBody(type="progress")),
        ),
        (
            # Peers may extend: unknown fields anywhere are ignored.
            {"v": 1, "id": "a", "ok": True, "result": {"value": 1, "extra": 2}, "trace": "x"},
            OkResponse(id="a", result=Result(value=1)),
        ),
    ],
)
def test_host_messages_decode(obj: dict[str, Any], expected: Any) -> None:
    assert decode_host_message(line(obj)) == expected


@pytest.mark.parametrize(
    ("data", "kind", "message_id", "detail"),
    [
        (b"not json", WireErrorKind.JSON, None, "not valid JSON"),
        (b'{"v": 1, "id": "a", "ok": tru', WireErrorKind.JSON, None, "not valid JSON"),
        (b'{"id": 5, "ok": tru', WireErrorKind.JSON, None, "not valid JSON"),
        (b"[1, 2]", WireErrorKind.JSON, None, "not a JSON object"),
        (b'{"v": 1, "ok": true}', WireErrorKind.NO_ID, None, "no id"),
        (b'{"v": 1, "id": 5, "ok": true}', WireErrorKind.NO_ID, None, "id must be a string"),
        (b'{"v": 2, "id": "a", "ok": true}', WireErrorKind.VERSION, "a", "protocol version 2"),
        (b'{"id": "a", "ok": true}', WireErrorKind.VERSION, "a", "protocol version None"),
        (b'{"v": "1", "id": "a", "ok": true}', WireErrorKind.VERSION, "a", "protocol version '1'"),
        (
            b'{"v": true, "id": "a", "ok": true}',
            WireErrorKind.VERSION,
            "a",
            "protocol version True",
        ),
        (b'{"v": 1, "id": "a"}', WireErrorKind.SHAPE, "a", "neither a response"),
        (b'{"v": 1, "id": "a", "method": "init"}', WireErrorKind.SHAPE, "a", "neither a response"),
        (b'{"v": 1, "id": "a", "ok": "yes"}', WireErrorKind.SHAPE, "a", "$.ok"),
        (b'{"v": 1, "id": "a", "ok": true, "result": 3}', WireErrorKind.SHAPE, "a", "$.result"),
        (b'{"v": 1, "id": "a", "event": {"payload": 1}}', WireErrorKind.SHAPE, "a", "type"),
    ],
)
def test_bad_lines_are_diagnosed(
    data: bytes, kind: WireErrorKind, message_id: str | None, detail: str
) -> None:
    with pytest.raises(HostWireError) as info:
        decode_host_message(data)
    assert info.value.kind is kind
    assert info.value.message_id == message_id
    assert detail in info.value.detail
    assert info.value.excerpt == data.decode()[:120]


def test_a_huge_bad_line_keeps_only_an_excerpt() -> None:
    with pytest.raises(HostWireError) as info:
        decode_host_message(b'{"v": 1, "id": "a", "ok": "' + b"x" * (1 << 20))
    assert len(info.value.excerpt) <= 121


def test_tool_schemas_keep_the_good_and_name_the_bad() -> None:
    obj = {"type": "object", "properties": {}}
    tools, problems = decode_tool_schemas(
        [
            {"name": "a", "description": "A", "parameters": obj, "extra": 1},
            {"name": "b", "input_schema": obj},
            {"name": "c", "schema": obj, "stateless": "yes"},  # only true counts
            {"name": "s", "parameters": obj, "stateless": True},
            {"name": "d", "parameters": {"type": "array"}},
            {"name": "e"},
            {"description": "no name"},
            "not an object",
            {"name": 5, "parameters": obj},
        ]
    )
    assert tools == [
        ToolSchema(name="a", description="A", parameters=obj),
        ToolSchema(name="b", parameters=obj),
        ToolSchema(name="c", parameters=obj),
        ToolSchema(name="s", parameters=obj, stateless=True),
    ]
    assert [(p.index, p.name) for p in problems] == [
        (4, "d"),
        (5, "e"),
        (6, None),
        (7, None),
        (8, None),
    ]
    assert "not a JSON object schema" in problems[0].detail


def test_tool_schemas_that_are_not_a_list() -> None:
    with pytest.raises(HostWireError) as info:
        decode_tool_schemas({"tools": []})
    assert info.value.kind is WireErrorKind.SHAPE


def test_execute_values() -> None:
    assert decode_execute_value({"success": True, "result": "r"}) == ExecuteValue(
        success=True, result="r"
    )
    failed = decode_execute_value({"success": False, "error": "e", "repairs": ["code_fence"]})
    assert (failed.success, failed.error, failed.repairs) == (False, "e", ["code_fence"])
    for bad in ({"result": 1}, "text", {"success": "yes"}):
        with pytest.raises(HostWireError) as info:
            decode_execute_value(bad)
        assert info.value.kind is WireErrorKind.SHAPE


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("text", "text"),
        ({"a": 1}, '{"a":1}'),
        ([1, "x"], '[1,"x"]'),
        (
            {
                "type": "provider_native_tool_result",
                "format": "openai.chat_completions",
                "content": "c",
            },
            ProviderNativeToolResult(format=NativeFormat.OPENAI_CHAT_COMPLETIONS, content="c"),
        ),
        (
            {"type": "provider_native_tool_result", "format": "openai.responses", "content": [1]},
            ProviderNativeToolResult(format=NativeFormat.OPENAI_RESPONSES, content=[1]),
        ),
        (
            # Only the explicit envelope of a known format is structured; the rest is text.
            {"type": "provider_native_tool_result", "format": "acme.v1"},
            '{"type":"provider_native_tool_result","format":"acme.v1"}',
        ),
    ],
)
def test_formatted_results(value: Any, expected: Any) -> None:
    assert decode_formatted_result(value) == expected


def test_runner_errors_match_the_codec() -> None:
    """Both runners answer with the codec's error types: one vocabulary on both sides."""
    node = (Path(SDK_DIR) / "host.cjs").read_text()
    python = (Path(SDK_DIR) / "corral_toolhost.py").read_text()
    for error_type in HostErrorType:
        assert f'"{error_type}"' in python, error_type
        assert f'"{error_type}"' in node, error_type


def test_an_error_s_stack_is_for_the_log_and_a_long_one_is_cut() -> None:
    short = decode_host_message(
        b'{"v":1,"id":"a","ok":false,"error":{"type":"E","detail":"d","stack":"at f\\n"}}'
    )
    assert isinstance(short, ErrorResponse)
    assert (short.describe(), short.logged()) == ("E: d", "E: d\nat f")
    stack = "".join(f"frame {i:05d}\n" for i in range(2000))  # 24,000 characters
    long = ErrorResponse(id="b", error=ErrorInfo(type="E", detail="d", stack=stack))
    logged = long.logged()
    assert logged.startswith("E: d\nframe 00000\n")
    assert logged.endswith("frame 01999")
    assert "[19999 characters]" in logged  # (the stripped stack is 23,999)
    assert len(logged) < 4100
