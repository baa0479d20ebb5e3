"""MCP tool calls through corral against the MCP SDK's own client, same server, one run.

Run from the repository root::

    python bench/bench_mcp.py [--quick] [--json-out PATH]   # or: python bench/run.py --only mcp

The server is ``bench/mcp_echo_server.py`` (the SDK's ``MCPServer``, one ``echo``
tool) over stdio. Three clients take turns against their own copy of it, round by
round, so load from elsewhere hits each alike:

* **sdk**: the SDK's ``stdio_client`` + ``ClientSession`` on anyio's asyncio
  backend, as an MCP user would write it (and, for scale, on its trio backend,
  which corral runs on: ``sdk_trio``);
* **corral**: a session's MCP connection (``open_mcp`` + ``McpServers.connect``,
  the server a supervised child), calls through the registered tool's ``run``, as
  the agent loop makes them, with the server unconfined like the SDK's (the
  ``none`` backend);
* **corral.sandboxed**: the same with the server under bubblewrap, when available.

Per client: connect (start, ``initialize``, ``tools/list``), the median latency of
one call at a time, and the throughput of 16 calls in flight. Target: corral within
1.2x of the SDK on latency and throughput (the ``_vs_sdk`` rows: corral's time per
call over the SDK's).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp
import msgspec
import trio
from _common import Row, Rows, main, median, quiet_logging, stopwatch

from agent._tools.mcp import (
    McpServers,
    McpTool,
    Origin,
    ServerConfig,
    ServerDecl,
    SupervisedLauncher,
    open_mcp,
)
from agent._tools.web import AddressPolicy, NetGuard
from sandbox import Permissions, Sandbox, SandboxUnavailable, select_sandbox
from supervisor import SupervisorConfig, open_supervisor

SERVER = Path(__file__).resolve().parent / "mcp_echo_server.py"
SITE = os.path.dirname(os.path.dirname(os.path.realpath(mcp.__file__)))
ARGS = {"text": "hi"}
WINDOW = 16


class Sizes(msgspec.Struct, frozen=True, kw_only=True):
    rounds: int
    warmup: int
    seq: int
    conc: int


FULL = Sizes(rounds=5, warmup=100, seq=400, conc=1600)
QUICK = Sizes(rounds=1, warmup=10, seq=40, conc=160)

#: One call, as each client makes it.
Call = Callable[[], Awaitable[Any]]


class Figures(msgspec.Struct, kw_only=True):
    connect: list[float] = []
    seq: list[float] = []
    conc: list[float] = []


async def _measure(call: Call, sizes: Sizes, out: Figures, gather: Any) -> None:
    """Warm up, then one round: per-call latency (sequential) and throughput (16 in flight)."""
    for _ in range(sizes.warmup):
        await call()
    with stopwatch() as t:
        for _ in range(sizes.seq):
            await call()
    out.seq.append(t[0] / sizes.seq)

    async def worker() -> None:
        for _ in range(sizes.conc // WINDOW):
            await call()

    with stopwatch() as t:
        await gather([worker] * WINDOW)
    out.conc.append(sizes.conc / t[0])


async def _anyio_gather(workers: list[Callable[[], Awaitable[None]]]) -> None:
    async with anyio.create_task_group() as tg:
        for worker in workers:
            tg.start_soon(worker)


async def _trio_gather(workers: list[Callable[[], Awaitable[None]]]) -> None:
    async with trio.open_nursery() as nursery:
        for worker in workers:
            nursery.start_soon(worker)


async def sdk_round(sizes: Sizes, out: Figures) -> None:
    """One round with the SDK's own client (anyio, asyncio backend)."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    with anyio.fail_after(300):
        t0 = time.perf_counter()
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            await s.list_tools()
            out.connect.append(time.perf_counter() - t0)

            async def call() -> Any:
                result = await s.call_tool("echo", ARGS)
                if result.is_error:
                    raise RuntimeError(f"sdk echo failed: {result!r}")

            await _measure(call, sizes, out, _anyio_gather)


def _config() -> ServerConfig:
    return ServerConfig(
        command=sys.executable,
        args=[str(SERVER)],
        env={"PYTHONPATH": SITE},
        permissions=Permissions(read_only=[str(SERVER.parent), SITE]),
    )


async def corral_round(home: Path, backend: Sandbox | None, sizes: Sizes, out: Figures) -> None:
    """One round through a session's MCP connection, the server a supervised child
    (``backend`` None: unconfined)."""
    decl = ServerDecl(name="bench", config=_config(), origin=Origin.USER)
    config = SupervisorConfig(home=str(home), sandbox="off" if backend is None else "required")
    with trio.fail_after(300):
        async with (
            open_supervisor(config, discover=False, sandbox=backend) as client,
            open_mcp(SupervisedLauncher(client, home), NetGuard(AddressPolicy())) as servers,
        ):
            with stopwatch() as t:
                await servers.connect(decl)
            out.connect.append(t[0])
            tool = _echo(servers)

            async def progress(text: str) -> None:
                pass

            async def call() -> Any:
                result = await tool.run("b", ARGS, progress)
                if result.is_error:
                    raise RuntimeError(f"corral echo failed: {result!r}")

            await _measure(call, sizes, out, _trio_gather)


def _echo(servers: McpServers) -> McpTool:
    (tool,) = [t for t in servers.tools() if t.spec.name == "echo"]
    return tool


def quiet_logs() -> None:
    """Only errors from corral's loggers, on stderr (the table goes to stdout)."""
    quiet_logging()


def bwrap_backend() -> Sandbox | None:
    """The bubblewrap backend, or None where it does not work."""
    try:
        backend = select_sandbox("auto")
    except SandboxUnavailable:
        return None
    return backend if backend.backend == "bwrap" else None


def _rows(rows: Rows, name: str, figures: Figures, note: str) -> None:
    rows.add(f"{name}.connect_ms", median(figures.connect) * 1000, "ms", note=note)
    rows.add(f"{name}.call_us", median(figures.seq) * 1e6, "µs", note=note)
    rows.add(f"{name}.concurrent{WINDOW}", median(figures.conc), "calls/s", note=note)


def measure(quick: bool) -> list[Row]:
    """Every client, round by round; a client that fails becomes a failed row."""
    quiet_logs()
    sizes = QUICK if quick else FULL
    rows = Rows("mcp")
    sdk, sdk_trio, plain, boxed = Figures(), Figures(), Figures(), Figures()
    bwrap = bwrap_backend()
    with tempfile.TemporaryDirectory(prefix="corral-bench-mcp-") as tmp:
        home = Path(tmp)
        for _ in range(sizes.rounds):
            with rows.guard("sdk"):
                anyio.run(sdk_round, sizes, sdk, backend="asyncio")
            with rows.guard("sdk_trio"):
                anyio.run(sdk_round, sizes, sdk_trio, backend="trio")
            with rows.guard("corral"):
                trio.run(corral_round, home, None, sizes, plain)
            if bwrap is not None:
                with rows.guard("corral.sandboxed"):
                    trio.run(corral_round, home, bwrap, sizes, boxed)
    rounds = f"median of {sizes.rounds} rounds"
    if sdk.seq:
        _rows(rows, "sdk", sdk, f"mcp SDK {mcp_version()}, anyio asyncio; {rounds}")
    if sdk_trio.seq:
        _rows(rows, "sdk_trio", sdk_trio, f"the same on anyio's trio backend; {rounds}")
    if plain.seq:
        _rows(rows, "corral", plain, f"server unconfined, as the SDK's; {rounds}")
    if sdk.seq and plain.seq:
        ratio = median(plain.seq) / median(sdk.seq)
        rows.add("corral.call_vs_sdk", ratio, "×", target="≤ 1.2", ok=ratio <= 1.2)
        ratio = median(sdk.conc) / median(plain.conc)
        rows.add(f"corral.concurrent{WINDOW}_vs_sdk", ratio, "×", target="≤ 1.2", ok=ratio <= 1.2)
    if boxed.seq:
        _rows(rows, "corral.sandboxed", boxed, f"server under bwrap; {rounds}")
    elif bwrap is None:
        rows.add("corral.sandboxed.call_us", 0.0, "µs", note="skipped: no bwrap backend here")
    return rows.rows


def mcp_version() -> str:
    from importlib.metadata import version

    return version("mcp")


if __name__ == "__main__":
    main(measure)
