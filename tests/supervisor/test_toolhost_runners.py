"""Both tool-host runners (``corral_toolhost.py`` and ``host.mjs``), run for real.

Each test starts a runner as a subprocess and drives it over real pipes with the
client codec (``supervisor._hostwire``). The tool modules under
``toolhost_fixtures/`` give both runners the same tools and hooks, so every test
runs against both. Concurrency is proven without timing: ``meet`` calls wait until
n of them run at once, which only a concurrent runner can satisfy.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import venv
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.paths import TOOLHOST_FIXTURES as FIXTURES

from supervisor import SDK_DIR
from supervisor._hostwire import (
    ErrorResponse,
    HostErrorType,
    HostEvent,
    HostMessage,
    Method,
    NativeFormat,
    OkResponse,
    ProviderNativeToolResult,
    Request,
    decode_execute_value,
    decode_formatted_result,
    decode_host_message,
    decode_tool_schemas,
    encode_request,
)
from supervisor._spawn import PYTHON_RUNNER

STEP = 20  # seconds: bound of one exchange; normal runs take milliseconds
MiB = 1 << 20

RUNNERS = {
    "py": {
        "argv": [sys.executable, *PYTHON_RUNNER],
        "tools": "py_tools.py",
        "plain": "py_plain.py",
        "second": "py_second.py",
        "broken": "py_broken.py",
    },
    "js": {
        "argv": [shutil.which("node") or "node", str(Path(SDK_DIR) / "host.mjs")],
        "tools": "js_tools.mjs",
        "plain": "js_plain.cjs",
        "second": "js_second.mjs",
        "broken": "js_broken.mjs",
    },
}


class Host:
    """One runner process: send requests, read decoded messages, watch stderr."""

    def __init__(self, proc: trio.Process, lang: str) -> None:
        self.proc = proc
        self.lang = lang
        self.stderr = bytearray()
        self.stderr_changed = trio.Event()
        self._buf = bytearray()
        self._ids = itertools.count(1)

    def module(self, role: str) -> str:
        return RUNNERS[self.lang][role]

    async def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(data)

    async def send(self, method: str, params: dict[str, Any] | None = None) -> str:
        rid = f"r{next(self._ids)}"
        request = Request(id=rid, method=method, params=params or {})
        await self.send_raw(encode_request(request))
        return rid

    async def line(self) -> bytes:
        assert self.proc.stdout is not None
        while b"\n" not in self._buf:
            chunk = await self.proc.stdout.receive_some(1 << 20)
            if not chunk:
                raise EOFError(f"stdout closed; stderr: {self.stderr.decode(errors='replace')}")
            self._buf += chunk
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf = bytearray(rest)
        return line

    async def recv(self) -> HostMessage:
        return decode_host_message(await self.line())

    async def call(
        self, method: str, params: dict[str, Any] | None = None
    ) -> tuple[list[HostEvent], OkResponse | ErrorResponse]:
        """Send one request; its events and its response (nothing else may arrive)."""
        rid = await self.send(method, params)
        events: list[HostEvent] = []
        while True:
            msg = await self.recv()
            assert msg.id == rid, msg
            if isinstance(msg, HostEvent):
                events.append(msg)
            else:
                return events, msg

    async def ok(self, method: str, params: dict[str, Any] | None = None) -> OkResponse:
        _, response = await self.call(method, params)
        assert isinstance(response, OkResponse), response
        return response

    async def error(self, method: str, params: dict[str, Any] | None = None) -> ErrorResponse:
        _, response = await self.call(method, params)
        assert isinstance(response, ErrorResponse), response
        return response

    async def init(self, *roles: str, **config: Any) -> OkResponse:
        modules = [self.module(r) for r in roles or ("tools",)]
        return await self.ok(Method.INIT, {"config": {"modules": modules, **config}})

    async def execute(self, tool: str, arguments: Any = None, **params: Any) -> Any:
        response = await self.ok(
            Method.EXECUTE_TOOL, {"tool_name": tool, "arguments": arguments or {}, **params}
        )
        return decode_execute_value(response.result.value)

    async def stderr_text(self, wanted: str) -> str:
        """stderr once it holds ``wanted`` (waits for the drain task to read it)."""
        while wanted.encode() not in self.stderr:
            await self.stderr_changed.wait()
        return self.stderr.decode(errors="replace")


@asynccontextmanager
async def open_host(
    lang: str, argv: list[str] | None = None, cwd: Path = FIXTURES
) -> AsyncIterator[Host]:
    """Start a runner (in the fixtures directory unless ``cwd`` says otherwise; the
    language's own argv unless ``argv`` says otherwise); on exit close stdin and reap it."""
    if lang == "js" and shutil.which("node") is None:
        pytest.skip("node is not installed")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env |= {"PYTHONPATH": SDK_DIR, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = await trio.lowlevel.open_process(
        argv or RUNNERS[lang]["argv"],
        stdin=-1,
        stdout=-1,
        stderr=-1,
        cwd=str(cwd),
        env=env,
    )
    host = Host(proc, lang)

    async def drain() -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.receive_some(1 << 16):
            host.stderr += chunk
            host.stderr_changed.set()
            host.stderr_changed = trio.Event()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            yield host
            assert proc.stdin is not None
            await proc.stdin.aclose()
            with trio.fail_after(STEP):
                await proc.wait()
    finally:
        with trio.move_on_after(STEP) as cleanup:  # kill if still running, close every pipe
            cleanup.shield = True
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    await stream.aclose()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes ``lang`` runs against both runners; one that does not names
    its runner itself (what only one of them does)."""
    if "lang" in metafunc.fixturenames:
        metafunc.parametrize("lang", ["py", "js"])


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


async def test_bad_lines_are_answered_or_logged_and_serving_goes_on(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init()
            await host.send_raw(b"this is not json\n")
            await host.send_raw(b'{"v": 1, "id": "broken", "method": \n')
            msg = await host.recv()
            assert isinstance(msg, ErrorResponse)
            assert (msg.id, msg.error.type) == ("broken", HostErrorType.INVALID_REQUEST)

            await host.send_raw(b'{"v": 2, "id": "v2", "method": "init", "params": {}}\n')
            msg = await host.recv()
            assert isinstance(msg, ErrorResponse)
            assert (msg.id, msg.error.type) == ("v2", HostErrorType.UNSUPPORTED_VERSION)

            await host.send_raw(b'{"id": "nov", "method": "init"}\n')
            msg = await host.recv()
            assert isinstance(msg, ErrorResponse)
            assert (msg.id, msg.error.type) == ("nov", HostErrorType.UNSUPPORTED_VERSION)

            await host.send_raw(b'{"v": 1, "method": "init"}\n[1, 2]\n\n')
            await host.send_raw(b'{"v": 1, "id": "p", "method": "init", "params": [1]}\n')
            msg = await host.recv()
            assert isinstance(msg, ErrorResponse)
            assert (msg.id, msg.error.type) == ("p", HostErrorType.INVALID_REQUEST)

            unknown = await host.error("no_such_method")
            assert unknown.error.type == HostErrorType.UNKNOWN_METHOD
            assert "no_such_method" in unknown.error.detail
            assert (await host.execute("echo", {"text": "still here"})).result == "still here"
            log = await host.stderr_text("this is not json")
    assert "without a usable id" in log


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


async def test_tool_output_to_stdout_goes_to_stderr(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init()
            assert (await host.execute("noisy")).result == "quiet"
            assert (await host.execute("echo", {"text": "clean"})).result == "clean"
            wanted = {"py": "noise from a child", "js": "noise from process.stdout"}[lang]
            log = await host.stderr_text(wanted)
    sources = {
        "py": ["print", "sys.stdout", "fd 1", "a child"],
        "js": ["console.log", "console.info", "process.stdout"],
    }[lang]
    for source in sources:
        assert f"noise from {source}" in log


async def test_a_tool_reading_stdin_gets_nothing_of_the_protocol(lang: str) -> None:
    # stdin is the protocol's: a tool that reads it sees an empty, ended input, and
    # every request after it still reaches the runner.
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init()
            assert (await host.execute("slurp")).result == 0
            for i in range(3):
                assert (await host.execute("echo", {"text": f"after {i}"})).result == f"after {i}"


async def test_a_20_mib_request_is_served(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init()
            value = await host.execute("length", {"text": "y" * (20 * MiB)})
    assert value.result == 20 * MiB


async def test_a_20_mib_result_becomes_an_error_and_serving_goes_on(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init()
            error = await host.error(
                Method.EXECUTE_TOOL, {"tool_name": "big", "arguments": {"size": 20 * MiB}}
            )
            assert error.error.type == HostErrorType.RESULT_TOO_LARGE
            assert (await host.execute("big", {"size": 10})).result == "x" * 10


async def test_a_20_mib_malformed_line_is_attributed(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init()
            unterminated = b'{"v": 1, "id": "huge", "junk": "' + b"x" * (20 * MiB)
            await host.send_raw(unterminated + b"\n")
            msg = await host.recv()
            assert isinstance(msg, ErrorResponse)
            assert (msg.id, msg.error.type) == ("huge", HostErrorType.INVALID_REQUEST)
            assert (await host.execute("echo", {"text": "after"})).result == "after"


async def test_a_line_over_the_limit_is_dropped_without_buffering_it(lang: str) -> None:
    with trio.fail_after(STEP * 2):
        async with open_host(lang) as host:
            await host.init()
            head = b'{"v": 1, "id": "over", "method": "execute_tool", "params": {"x": "'
            await host.send_raw(head + b"z" * (65 * MiB) + b'"}}\n')
            msg = await host.recv()
            assert isinstance(msg, ErrorResponse)
            assert (msg.id, msg.error.type) == ("over", HostErrorType.REQUEST_TOO_LARGE)
            assert (await host.execute("echo", {"text": "after"})).result == "after"


async def test_stdin_eof_exits_zero_promptly(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init()
        assert host.proc.returncode == 0


async def test_stdin_eof_lets_a_running_call_answer_first(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init()
            params = {"tool_name": "echo", "arguments": {"text": "last words", "parts": 1}}
            rid = await host.send(Method.EXECUTE_TOOL, params)
            assert host.proc.stdin is not None
            await host.proc.stdin.aclose()
            event, response = await host.recv(), await host.recv()
            assert isinstance(event, HostEvent)
            assert isinstance(response, OkResponse)
            assert response.id == rid
            assert decode_execute_value(response.result.value).result == "last words"
            assert await host.proc.wait() == 0


async def test_string_arguments_are_parsed(lang: str) -> None:
    with trio.fail_after(STEP):
        async with open_host(lang) as host:
            await host.init()
            value = await host.execute("echo", '{"text": "from a string"}')
            wrong = await host.execute("echo", "[1]")
    assert value.result == "from a string"
    assert not wrong.success
    assert "expected an object" in wrong.error


PTH_DEP = 'VALUE = "only through a .pth file"\n'
SITE_DEP = 'VALUE = "in site-packages"\n'
TOOL_USING = """\
import {dep}
from corral_tools import raw_tool

@raw_tool(schema={{"type": "object", "properties": {{}}}})
def which(args):
    return {dep}.VALUE
"""


async def test_site_packages_load_without_pth_files_and_pth_files_run_when_needed(
    tmp_path: Path,
) -> None:
    # corral starts the Python runner with -S: it puts the site directories on sys.path
    # itself and runs their .pth files only when a tool module's import fails without.
    lang = "py"
    env_dir = tmp_path / "env"
    venv.create(env_dir, symlinks=True, with_pip=False)
    (site_dir,) = env_dir.glob("lib/python3*/site-packages")
    (site_dir / "site_dep.py").write_text(SITE_DEP)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "pth_dep.py").write_text(PTH_DEP)
    (site_dir / "extra.pth").write_text(f"{elsewhere}\n")
    (tmp_path / "uses_site.py").write_text(TOOL_USING.format(dep="site_dep"))
    (tmp_path / "uses_pth.py").write_text(TOOL_USING.format(dep="pth_dep"))
    argv = [str(env_dir / "bin" / "python"), *PYTHON_RUNNER]
    with trio.fail_after(STEP):
        async with open_host(lang, argv, tmp_path) as host:
            await host.ok(Method.INIT, {"config": {"modules": ["./uses_site.py"]}})
            plain = await host.execute("which")
        async with open_host(lang, argv, tmp_path) as needs_pth:
            await needs_pth.ok(Method.INIT, {"config": {"modules": ["./uses_pth.py"]}})
            through_pth = await needs_pth.execute("which")
            log = await needs_pth.stderr_text(".pth files")
    assert plain.result == "in site-packages"
    assert ".pth" not in host.stderr.decode()  # the lean start sufficed
    assert through_pth.result == "only through a .pth file"
    assert "uses_pth.py: No module named 'pth_dep'" in log


async def test_non_blocking_stdio_is_served_through_streams() -> None:
    # host.mjs reads fd 0 and writes fd 1 itself; descriptors it was handed in
    # non-blocking mode (EAGAIN) are served through Node's own streams instead.
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    os.set_blocking(in_r, False)
    os.set_blocking(out_w, False)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    try:
        proc = await trio.lowlevel.open_process(
            RUNNERS["js"]["argv"], stdin=in_r, stdout=out_w, stderr=-1, cwd=str(FIXTURES), env=env
        )
    finally:
        os.close(in_r)
        os.close(out_w)
    requests = trio.lowlevel.FdStream(in_w)
    responses = trio.lowlevel.FdStream(out_r)
    assert proc.stderr is not None
    log = bytearray()
    big = "z" * MiB  # far more than a pipe holds: fd 1 fills while nothing reads it
    asked = [
        (Method.INIT, {"config": {"modules": [RUNNERS["js"]["tools"]]}}),
        (Method.EXECUTE_TOOL, {"tool_name": "echo", "arguments": {"text": big}}),
        (Method.EXECUTE_TOOL, {"tool_name": "echo", "arguments": {"text": "after"}}),
    ]
    lines = [
        encode_request(Request(id=f"n{i}", method=m, params=p)) for i, (m, p) in enumerate(asked)
    ]
    try:
        with trio.fail_after(STEP):
            # Everything sent so far read, the host finds fd 0 empty (EAGAIN) while the
            # big answer waits for room in fd 1, which nothing reads yet.
            await requests.send_all(lines[0] + lines[1])
            while b"stdin is non-blocking" not in log or b"through a stream" not in log:
                log += await proc.stderr.receive_some(1 << 16)
            await requests.send_all(lines[2])
            buf = bytearray()
            while buf.count(b"\n") < len(asked):
                buf += await responses.receive_some(1 << 20)
            await requests.aclose()
            assert await proc.wait() == 0
    finally:
        with trio.move_on_after(STEP) as cleanup:
            cleanup.shield = True
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            await responses.aclose()
            await requests.aclose()
            await proc.stderr.aclose()
    answers = [decode_host_message(line) for line in bytes(buf).splitlines()]
    assert [a.id for a in answers] == ["n0", "n1", "n2"]
    assert all(isinstance(a, OkResponse) for a in answers), answers
    values = [decode_execute_value(a.result.value).result for a in answers[1:]]  # type: ignore[union-attr]
    assert values == [big, "after"]


@pytest.mark.parametrize("builtins", ["getBuiltinModule", "imported"])
async def test_host_mjs_loads_a_package_by_name_with_and_without_get_builtin_module(
    builtins: str, tmp_path: Path
) -> None:
    # host.mjs takes Node's builtins from process.getBuiltinModule (Node >= 20.16) and
    # imports them on older Node: a preload that deletes it stands in for one.
    lang = "js"
    package = tmp_path / "node_modules" / "named-tools"
    package.mkdir(parents=True)
    shutil.copy(FIXTURES / RUNNERS["js"]["tools"], package / "index.mjs")
    (package / "package.json").write_text('{"name": "named-tools", "exports": "./index.mjs"}')
    (tmp_path / "old_node.mjs").write_text("delete process.getBuiltinModule;\n")
    node, host_mjs = RUNNERS["js"]["argv"]
    preload = ["--import", str(tmp_path / "old_node.mjs")] if builtins == "imported" else []
    with trio.fail_after(STEP):
        async with open_host(lang, [node, *preload, host_mjs], tmp_path) as host:
            await host.ok(Method.INIT, {"config": {"modules": ["named-tools"]}})
            value = await host.execute("echo", {"text": "by name"})
            assert (await host.execute("slurp")).result == 0  # process.stdin: its own
    assert value.result == "by name"
