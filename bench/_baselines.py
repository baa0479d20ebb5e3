"""The baselines of bench_supervisor: a bare trio + msgspec ping-pong and the MCP SDK.

* the raw child decodes each request and encodes a reply with ``json`` (what the
  ``chaos`` extension does) and nothing else; :class:`RawChild` drives it from one
  task, sequentially or with ``WINDOW`` requests in flight, or from ``WINDOW``
  caller tasks that each await their own reply (corral's shape, and nothing else);
* :func:`mcp_session` opens the MCP Python SDK's stdio client to
  ``bench/mcp_echo_server.py`` (one ``echo`` tool).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import typing
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import trio

MCP_SERVER = Path(__file__).resolve().parent / "mcp_echo_server.py"
WINDOW = 32
ARGS = {"text": "hi"}

#: The raw child: what chaos does per request (json in, json out), and nothing else.
RAW_CHILD = """\
import json, sys
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    req = json.loads(line)
    text = "echo: " + req["args"]["text"]
    reply = {"type": "tool_result", "id": req["id"], "content": [{"type": "text", "text": text}]}
    out.write(json.dumps(reply, separators=(",", ":")).encode() + b"\\n")
    out.flush()
"""


# --- raw: trio + msgspec ping-pong -------------------------------------------------------


class _RawReply(msgspec.Struct):
    id: str


_raw_decoder = msgspec.json.Decoder(_RawReply)
_raw_encoder = msgspec.json.Encoder()


def _raw_request(rid: str) -> bytes:
    return _raw_encoder.encode({"type": "tool_call", "id": rid, "name": "chaos_echo", "args": ARGS})


def _parked(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.SUCCEEDED


def _raw_requests(start: int, count: int) -> bytes:
    return b"\n".join(_raw_request(f"t{i}") for i in range(start, start + count)) + b"\n"


@typing.final
class RawChild:
    """The baseline: one task writes requests and reads replies, nothing in between."""

    def __init__(self, proc: trio.Process) -> None:
        assert proc.stdin is not None
        assert proc.stdout is not None
        self._stdin = proc.stdin
        self._stdout = proc.stdout
        self._buf = bytearray()

    async def _lines(self) -> list[bytes]:
        """Every complete line received so far (waiting for at least one)."""
        while True:
            end = self._buf.rfind(b"\n")
            if end >= 0:
                lines = bytes(self._buf[:end]).split(b"\n")
                del self._buf[: end + 1]
                return lines
            chunk = await self._stdout.receive_some(65536)
            if not chunk:
                raise EOFError("raw child closed its stdout")
            self._buf += chunk

    async def sequential(self, n: int) -> None:
        """``n`` round trips, one at a time."""
        for i in range(n):
            await self._stdin.send_all(_raw_requests(i, 1))
            for line in await self._lines():
                _raw_decoder.decode(line)

    async def pipelined(self, n: int) -> None:
        """``n`` round trips with up to ``WINDOW`` in flight; each batch of replies
        is refilled with one write."""
        sent = min(WINDOW, n)
        await self._stdin.send_all(_raw_requests(0, sent))
        done = 0
        while done < n:
            lines = await self._lines()
            for line in lines:
                _raw_decoder.decode(line)
            done += len(lines)
            more = min(len(lines), n - sent)
            if more:
                await self._stdin.send_all(_raw_requests(sent, more))
                sent += more

    async def callers(self, n: int) -> None:
        """``n`` round trips from ``WINDOW`` caller tasks, each parked until the reader
        task hands it its own reply; one writer task sends what the callers of a
        scheduler pass queued with one write. The design of concurrent callers
        itself, with none of corral's bookkeeping."""
        waiting: dict[str, trio.lowlevel.Task] = {}
        queue: list[bytes] = []
        idle: list[trio.lowlevel.Task] = []
        ids = itertools.count()

        async def writer() -> None:
            while True:
                if not queue:
                    idle.append(trio.lowlevel.current_task())
                    await trio.lowlevel.wait_task_rescheduled(_parked)
                    continue
                data = b"\n".join(queue) + b"\n"
                queue.clear()
                await self._stdin.send_all(data)

        async def reader() -> None:
            while True:
                for line in await self._lines():
                    trio.lowlevel.reschedule(waiting.pop(_raw_decoder.decode(line).id))

        async def caller(count: int) -> None:
            for _ in range(count):
                rid = f"t{next(ids)}"
                queue.append(_raw_request(rid))
                if idle:
                    trio.lowlevel.reschedule(idle.pop())
                waiting[rid] = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(_parked)

        async with trio.open_nursery() as loops:
            loops.start_soon(writer)
            loops.start_soon(reader)
            async with trio.open_nursery() as calls:
                for _ in range(WINDOW):
                    calls.start_soon(caller, n // WINDOW)
            loops.cancel_scope.cancel()


@asynccontextmanager
async def open_raw_child() -> AsyncIterator[RawChild]:
    """Start the minimal echo child; on exit close its stdin and reap it (bounded)."""
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", RAW_CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield RawChild(proc)
    finally:
        with trio.CancelScope(shield=True):
            assert proc.stdin is not None
            await proc.stdin.aclose()
            with trio.move_on_after(5):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


# --- MCP: the Python SDK over stdio ------------------------------------------------------


@asynccontextmanager
async def mcp_session() -> AsyncIterator[Any]:
    """An initialised MCP client session to ``bench/mcp_echo_server.py`` (under anyio)."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[str(MCP_SERVER)])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("echo", ARGS)
        text = getattr(result.content[0], "text", None)
        if text != "echo: hi":
            raise RuntimeError(f"unexpected MCP echo result: {result!r}")
        yield session
