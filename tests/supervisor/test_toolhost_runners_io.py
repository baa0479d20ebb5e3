"""Both tool-host runners, run for real: bad and oversize lines, stdio discipline, end
of input, and how they load their modules and packages.

Same harness as ``test_toolhost_runners.py`` (``helpers.runnerkit``): each test
taking ``lang`` runs against both runners.
"""

from __future__ import annotations

import os
import shutil
import venv
from pathlib import Path

import pytest
import trio
from helpers.paths import TOOLHOST_FIXTURES as FIXTURES
from helpers.runnerkit import RUNNERS, STEP, MiB, both_runners, open_host

from supervisor._hostwire import (
    ErrorResponse,
    HostErrorType,
    HostEvent,
    Method,
    OkResponse,
    Request,
    decode_execute_value,
    decode_host_message,
    encode_request,
)
from supervisor._spawn import PYTHON_RUNNER

pytest_generate_tests = both_runners


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
    # host.cjs reads fd 0 and writes fd 1 itself; descriptors it was handed in
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


@pytest.mark.parametrize(
    ("kind", "entry"),
    [("es", "host.cjs"), ("commonjs", "host.cjs"), ("es", "host.mjs")],
)
async def test_node_runner_loads_packages_by_name(kind: str, entry: str, tmp_path: Path) -> None:
    # An ES-only package (require() refuses it on this Node: import() loads it) and a
    # CommonJS one (require() loads it), resolved from the working directory; and
    # host.mjs, the ES module entry, runs the same runner.
    lang = "js"
    package = tmp_path / "node_modules" / "named-tools"
    package.mkdir(parents=True)
    if kind == "es":
        shutil.copy(FIXTURES / RUNNERS["js"]["tools"], package / "index.mjs")
        (package / "package.json").write_text('{"name": "named-tools", "exports": "./index.mjs"}')
        tool, args, expected = "echo", {"text": "by name"}, "by name"
    else:
        shutil.copy(FIXTURES / RUNNERS["js"]["plain"], package / "index.js")
        (package / "package.json").write_text('{"name": "named-tools", "main": "index.js"}')
        tool, args, expected = "plain", {"x": 3}, "plain got 3"
    node, runner = RUNNERS["js"]["argv"]
    with trio.fail_after(STEP):
        async with open_host(lang, [node, str(Path(runner).with_name(entry))], tmp_path) as host:
            await host.ok(Method.INIT, {"config": {"modules": ["named-tools"]}})
            value = await host.execute(tool, args)
            if kind == "es":
                assert (await host.execute("slurp")).result == 0  # process.stdin: its own
    assert value.result == expected
