"""Both tool-host runners as subprocesses, driven over real pipes with the client codec.

:func:`open_host` starts ``corral_toolhost.py`` (``lang="py"``) or ``host.cjs``
(``lang="js"``) in ``toolhost_fixtures/``; :class:`Host` sends requests and reads the
decoded answers. A test module that sets ``pytest_generate_tests = both_runners`` runs every
test taking ``lang`` against both runners.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from supervisor._hostwire import (
    ErrorResponse,
    HostEvent,
    HostMessage,
    Method,
    OkResponse,
    Request,
    decode_execute_value,
    decode_host_message,
    encode_request,
)
from supervisor._spawn import PYTHON_RUNNER
from supervisor.lowlevel import SDK_DIR

from .paths import TOOLHOST_FIXTURES as FIXTURES

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
        "argv": [shutil.which("node") or "node", str(Path(SDK_DIR) / "host.cjs")],
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


def both_runners(metafunc: pytest.Metafunc) -> None:
    """A test that takes ``lang`` runs against both runners; one that does not names
    its runner itself (what only one of them does)."""
    if "lang" in metafunc.fixturenames:
        metafunc.parametrize("lang", ["py", "js"])
