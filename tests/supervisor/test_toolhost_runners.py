"""Both tool-host runners (``corral_toolhost.py`` and ``host.cjs``), run for real: the protocol.

Each test starts a runner as a subprocess and drives it over real pipes with the
client codec (``supervisor._hostwire``, through ``helpers.runnerkit``). The tool
modules under ``toolhost_fixtures/`` give both runners the same tools and hooks, so
every test runs against both. Concurrency is proven without timing: ``meet`` calls
wait until n of them run at once, which only a concurrent runner can satisfy.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest
import trio
from helpers.runnerkit import RUNNERS, STEP, both_runners, open_host

from supervisor._hostwire import (
    HostErrorType,
    Method,
    NativeFormat,
    OkResponse,
    ProviderNativeToolResult,
    Request,
    decode_execute_value,
    decode_formatted_result,
    decode_tool_schemas,
    encode_request,
)

pytest_generate_tests = both_runners


async def test_init_returns_state_and_calls_round_trip_it(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            init = await host.init(start=41)
            assert init.result.value == {"count": 41}
            assert init.result.state == {"count": 41}

            response = await host.ok(
                Method.EXECUTE_TOOL, {"tool_name": "count", "arguments": {}, "state": {"count": 7}}
            )
            assert decode_execute_value(response.result.value).result == 8
            assert response.result.state == {"count": 8}

            # Without a state in the request, the host's own state is used and kept.
            first = await host.execute("count")
            second = await host.execute("count")
            assert (first.result, second.result) == (42, 43)

            schemas = await host.ok(Method.GET_TOOL_SCHEMAS, {"state": {"count": 1}})
            assert schemas.result.state == {"count": 1}
            plain = await host.ok(Method.GET_TOOL_SCHEMAS)
            assert plain.result.state is None


async def test_start_up_requests_sent_at_once_are_answered_in_order(lang: str) -> None:
    # What the supervisor relies on to start corral's runners in one round trip.
    config = {"modules": [RUNNERS[lang]["tools"]], "start": 5}
    asked = [
        (Method.GET_CONFIG_SCHEMA, {}),
        (Method.INIT, {"config": config}),
        (Method.GET_CONFIG_SCHEMA, {}),
        (Method.GET_TOOL_SCHEMAS, {}),  # no state: the one init made
        (Method.GET_UI_ELEMENTS, {}),
        (Method.GET_TAGS, {"config": config, "models": []}),
        (Method.REQUIRED_TAGS, {}),
    ]
    lines = [
        encode_request(Request(id=f"s{i}", method=m, params=p)) for i, (m, p) in enumerate(asked)
    ]
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.send_raw(b"".join(lines))
            answers = [await host.recv() for _ in asked]
            assert (
                decode_execute_value(
                    (
                        await host.ok(Method.EXECUTE_TOOL, {"tool_name": "count", "arguments": {}})
                    ).result.value
                ).result
                == 6
            )
    assert [a.id for a in answers] == [f"s{i}" for i in range(len(asked))]
    assert all(isinstance(a, OkResponse) for a in answers), answers
    before, init, after, schemas = (a.result.value for a in answers[:4])  # type: ignore[union-attr]
    assert "start" not in before["properties"]
    assert init == {"count": 5}
    assert "start" in after["properties"]
    tools, _ = decode_tool_schemas(schemas)
    assert "count" in [t.name for t in tools]


async def test_tool_schemas(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init("tools", "plain")
            response = await host.ok(Method.GET_TOOL_SCHEMAS, {})
    tools, problems = decode_tool_schemas(response.result.value)
    assert problems == []
    by_name = {t.name: t for t in tools}
    assert list(by_name)[:3] == ["echo", "count", "meet"]
    assert "plain" in by_name
    echo = by_name["echo"]
    assert echo.description == "Echo the text, streaming `parts` parts first."
    assert echo.parameters["type"] == "object"
    assert echo.parameters["properties"]["text"]["type"] == "string"
    assert echo.parameters["required"] == ["text"]
    assert by_name["count"].parameters == {"type": "object", "properties": {}}
    assert by_name["plain"].parameters["properties"]["x"]["oneOf"][0] == {"type": "integer"}


async def test_parts_arrive_before_the_final_response(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init()
            events, response = await host.call(
                Method.EXECUTE_TOOL, {"tool_name": "echo", "arguments": {"text": "hi", "parts": 3}}
            )
    assert [e.event.type for e in events] == ["part"] * 3
    assert [e.event.payload for e in events] == [{"part": 0}, {"part": 1}, {"part": 2}]
    assert isinstance(response, OkResponse)
    value = decode_execute_value(response.result.value)
    assert (value.success, value.result) == (True, "hi")


async def test_concurrent_executes_overlap(lang: str) -> None:
    n = 8
    with trio.fail_after(STEP + 5):
        async with open_host(lang) as host:
            await host.init()
            ids = {}
            for i in range(n):
                params = {"tool_name": "meet", "arguments": {"n": n, "tag": f"t{i}"}}
                ids[await host.send(Method.EXECUTE_TOOL, params)] = f"t{i}"
            answers = {}
            for _ in range(n):
                msg = await host.recv()
                assert isinstance(msg, OkResponse), msg
                answers[msg.id] = decode_execute_value(msg.result.value).result
    assert answers == ids


OPTIONAL_CALLS: list[tuple[Method, dict[str, Any]]] = [
    (Method.GET_CONFIG_SCHEMA, {}),
    (Method.GET_UI_ELEMENTS, {}),
    (Method.GET_TAGS, {"config": {}, "models": [{"id": "m1"}]}),
    (Method.REQUIRED_TAGS, {}),
    (Method.FORMAT_TOOL_RESULT, {"result": {"success": True, "result": "r"}, "state": {}}),
    (Method.FORMAT_TOOL_CALL_PREVIEW, {"tool_name": "echo", "arguments": {}, "state": {}}),
    (Method.TO_DISPLAY_FORMAT, {"text": "t", "result": {}, "state": {"count": 5}}),
]


async def test_every_optional_method_is_answered(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init()
            values = {m: (await host.ok(m, p)).result.value for m, p in OPTIONAL_CALLS}
            native = await host.ok(
                Method.FORMAT_TOOL_RESULT, {"result": {"success": True, "result": "native"}}
            )
    assert values[Method.GET_CONFIG_SCHEMA]["required"] == ["modules"]
    assert set(values[Method.GET_CONFIG_SCHEMA]["properties"]) == {"modules", "start"}
    assert values[Method.GET_UI_ELEMENTS] == [{"kind": "status", "text": f"{lang} tools"}]
    assert values[Method.GET_TAGS] == [lang, "m1"]
    assert values[Method.REQUIRED_TAGS] == ["tools"]
    assert decode_formatted_result(values[Method.FORMAT_TOOL_RESULT]) == "formatted: r"
    assert values[Method.FORMAT_TOOL_CALL_PREVIEW] == f"{lang} preview of echo"
    assert values[Method.TO_DISPLAY_FORMAT] == {"markdown": "**t**", "count": 5}
    envelope = decode_formatted_result(native.result.value)
    assert isinstance(envelope, ProviderNativeToolResult)
    assert envelope.format is NativeFormat.OPENAI_RESPONSES
    assert envelope.content == [{"type": "input_text", "text": "native"}]


@pytest.mark.parametrize(("method", "params"), OPTIONAL_CALLS[1:])
async def test_optional_method_no_module_provides_is_unknown(
    lang: str, method: Method, params: dict[str, Any]
) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init("plain")
            error = await host.error(method, params)
    assert error.error.type == HostErrorType.UNKNOWN_METHOD
    assert method in error.error.detail


async def test_config_schema_before_init_is_the_runners_own(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            schema = (await host.ok(Method.GET_CONFIG_SCHEMA)).result.value
            # A hook before init is not "unknown": the client must not stop asking.
            early = await host.error(Method.GET_UI_ELEMENTS)
    assert schema["required"] == ["modules"]
    assert set(schema["properties"]) == {"modules"}
    assert early.error.type == HostErrorType.NOT_INITIALIZED


async def test_preview_asks_the_tools_own_module_first(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init("tools", "second")
            own = await host.ok(Method.FORMAT_TOOL_CALL_PREVIEW, {"tool_name": "second"})
            other = await host.ok(Method.FORMAT_TOOL_CALL_PREVIEW, {"tool_name": "echo"})
    assert own.result.value == "second's own preview"
    assert other.result.value == f"{lang} preview of echo"


async def test_calls_before_init_and_unknown_tools_and_second_init(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            early = await host.error(Method.EXECUTE_TOOL, {"tool_name": "echo"})
            assert early.error.type == HostErrorType.NOT_INITIALIZED
            schemas = await host.error(Method.GET_TOOL_SCHEMAS)
            assert schemas.error.type == HostErrorType.NOT_INITIALIZED
            bad = await host.error(Method.INIT, {"config": {"modules": "py_tools.py"}})
            assert bad.error.type == HostErrorType.INVALID_CONFIG
            await host.init()
            unknown = await host.error(Method.EXECUTE_TOOL, {"tool_name": "nope"})
            assert unknown.error.type == HostErrorType.UNKNOWN_TOOL
            again = await host.error(Method.INIT, {"config": {"modules": [host.module("tools")]}})
            assert again.error.type == HostErrorType.INVALID_REQUEST


async def test_a_module_that_fails_to_load_names_itself_and_init_can_retry(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            broken = host.module("broken")
            error = await host.error(Method.INIT, {"config": {"modules": [broken]}})
            assert broken in error.error.detail
            assert "broken on purpose" in error.error.detail
            missing = await host.error(Method.INIT, {"config": {"modules": ["./nowhere.js"]}})
            assert "nowhere" in missing.error.detail
            both = [host.module("tools"), broken]
            assert (
                broken
                in (await host.error(Method.INIT, {"config": {"modules": both}})).error.detail
            )
            await host.init()
            assert (await host.execute("echo", {"text": "ok"})).result == "ok"


async def test_a_raising_tool_answers_type_detail_and_stack(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init()
            error = await host.error(Method.EXECUTE_TOOL, {"tool_name": "boom"})
            refused = await host.execute("refuse")
            assert (await host.execute("echo", {"text": "alive"})).result == "alive"
    expected_type = {"py": "RuntimeError", "js": "RangeError"}[lang]
    assert error.error.type == expected_type
    assert error.error.detail == "boom: kaboom"
    assert host.module("tools") in error.error.stack
    assert "kaboom" in error.error.stack
    assert (refused.success, refused.error) == (False, "refused on purpose")


async def test_string_arguments_are_parsed(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init()
            value = await host.execute("echo", '{"text": "from a string"}')
            wrong = await host.execute("echo", "[1]")
    assert value.result == "from a string"
    assert not wrong.success
    assert "expected an object" in wrong.error


async def test_only_tools_that_take_the_state_answer_it(lang: str) -> None:
    # A tool without state (Python: no `state` parameter; JavaScript: `stateless:
    # true`) is listed as stateless and answers no state, even when sent one.
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init()
            schemas = await host.ok(Method.GET_TOOL_SCHEMAS, {})
            echo = await host.ok(
                Method.EXECUTE_TOOL,
                {"tool_name": "echo", "arguments": {"text": "hi"}, "state": {"count": 7}},
            )
            count = await host.ok(
                Method.EXECUTE_TOOL, {"tool_name": "count", "arguments": {}, "state": {"count": 7}}
            )
    stateless = {t.name: t.stateless for t in decode_tool_schemas(schemas.result.value)[0]}
    assert (stateless["echo"], stateless["meet"], stateless["count"]) == (True, True, False)
    assert echo.result.state is None
    assert count.result.state == {"count": 8}


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_a_stateless_javascript_tool_that_reads_the_state_fails_loudly() -> None:
    # (JavaScript only: a Python tool without a state parameter cannot reach the state.)
    with trio.fail_after(STEP):
        async with open_host("js") as host:
            await host.init()
            _, answer = await host.call(
                Method.EXECUTE_TOOL,
                {"tool_name": "misdeclared", "arguments": {}, "state": {"count": 7}},
            )
    assert answer.error.type == "StatelessTool"  # type: ignore[union-attr]
    assert "misdeclared is declared stateless" in answer.error.detail  # type: ignore[union-attr]
