"""corral's supervisor side by side with a bare NDJSON ping-pong and the MCP Python SDK.

Everything runs in this one process, one measurement after another, on the same
interpreter (and the same interpreter for every child):

* ``raw.*``: the limit. trio + msgspec NDJSON round trips with a minimal Python
  child that decodes each request and encodes a reply with ``json`` (what the
  ``chaos`` extension does), sequential and with 32 requests in flight. Its
  repetitions alternate with corral's call repetitions, and the ``*_vs_raw`` ratios
  are medians of per-repetition pairs, so load from elsewhere hits both sides.
* ``mcp.*``: the MCP SDK's stdio client against ``bench/mcp_echo_server.py`` (one
  ``echo`` tool), sequential and 32 concurrent callers (anyio, asyncio backend: the
  SDK's default and its faster one here).
* ``corral.*``: the supervisor with ``examples/extensions/chaos`` for tool calls,
  intercept chains, stubborn stops and idle CPU; spawn-to-ready and cooperative
  stop use a lean SDK extension (``LEAN``: the stdlib-only SDK, one tool), the
  lightest realistic extension. The ``direct_lean50_*`` rows run the same 50
  without corral, to tell corral's share of start-up and stop from the
  extensions' own.

Every child runs in its own session, as corral's extensions and the MCP SDK's
servers do: with the kernel's autogroup scheduling a session is also a CPU-share
group, so children sharing the benchmark's session would be starved under load.

Throughputs are medians of a few repetitions after a warm-up. Logging is filtered
to errors, as a host that logs to a file at warning level would barely differ.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
import psutil
import structlog
import trio
from _baselines import ARGS, WINDOW, mcp_calls, open_raw_child, rate_of, rates
from _common import ROOT, Row, Rows, main, median, stopwatch

from supervisor import SDK_DIR, SupervisorClient, SupervisorConfig, open_supervisor

CHAOS = ROOT / "examples" / "extensions" / "chaos" / "chaos.py"


class Sizes(msgspec.Struct, frozen=True, kw_only=True):
    """Iteration counts of one run (full or ``--quick``)."""

    reps: int
    mcp_reps: int
    warmup: int
    raw_seq: int
    raw_pipe: int
    mcp_seq: int
    mcp_conc: int
    seq: int
    conc: int
    chain1: int
    chain5: int
    spawn_reps: int
    stubborn_reps: int
    idle_s: float


FULL = Sizes(
    reps=5,
    mcp_reps=3,
    warmup=200,
    raw_seq=5000,
    raw_pipe=20000,
    mcp_seq=500,
    mcp_conc=1600,
    seq=5000,
    conc=10000,
    chain1=2000,
    chain5=600,
    spawn_reps=3,
    stubborn_reps=2,
    idle_s=3.0,
)
QUICK = Sizes(
    reps=1,
    mcp_reps=1,
    warmup=20,
    raw_seq=300,
    raw_pipe=1000,
    mcp_seq=50,
    mcp_conc=160,
    seq=300,
    conc=640,
    chain1=200,
    chain5=100,
    spawn_reps=1,
    stubborn_reps=1,
    idle_s=1.0,
)


# --- corral --------------------------------------------------------------------------------


def chaos_dirs(root: Path, names: list[str], *flags: str) -> list[str]:
    """One extension directory per name, each running chaos.py as that name."""
    paths = []
    for name in names:
        d = root / "exts" / name
        d.mkdir(parents=True, exist_ok=True)
        manifest = {
            "name": name,
            "version": "1.0.0",
            "exec": str(CHAOS),
            "args": ["--name", name, *flags],
            "language": "python",
        }
        (d / "extension.json").write_bytes(msgspec.json.encode(manifest))
        paths.append(str(d))
    return paths


#: The lightest realistic extension: the stdlib-only SDK, one tool, a ``ready`` frame.
LEAN = """\
import os
import corral_ext

ext = corral_ext.Extension(os.environ["CORRAL_EXT_NAME"], "1.0.0")


@ext.tool("lean_" + ext.name.replace("-", "_"), "echo", {"type": "object"})
def echo(args):
    return "ok"


ext.run()
"""


def lean_dirs(root: Path, names: list[str]) -> list[str]:
    """One extension directory per name, each running the lean SDK extension."""
    paths = []
    for name in names:
        d = root / "lean" / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "lean.py").write_text(LEAN)
        manifest = {"name": name, "version": "1.0.0", "exec": "./lean.py"}
        (d / "extension.json").write_bytes(msgspec.json.encode(manifest))
        paths.append(str(d))
    return paths


def _config(root: Path, **overrides: Any) -> SupervisorConfig:
    return SupervisorConfig(home=str(root / "home"), sandbox="off", **overrides)


async def _running(client: SupervisorClient) -> list[int]:
    """Pids of the extensions in state ``running``."""
    return [i.pid for i in await client.list_extensions() if i.state == "running" and i.pid]


def _alive(pids: list[int]) -> int:
    return sum(1 for pid in pids if psutil.pid_exists(pid))


class Calls(msgspec.Struct, frozen=True, kw_only=True):
    """Per-repetition rates of the raw child and corral, measured alternately."""

    raw_seq: list[float]
    raw_pipe: list[float]
    seq: list[float]
    conc: list[float]


async def calls_side_by_side(root: Path, sizes: Sizes) -> Calls:
    """Raw and corral round trips, alternating repetitions so load drifts hit both.

    corral: ``call_tool("chaos_echo")`` on one chaos extension, sequentially and from
    ``WINDOW`` concurrent callers; raw: the same frames with the minimal child.
    """
    cfg = _config(root)
    paths = chaos_dirs(root, ["chaos"])
    async with open_raw_child() as raw, open_supervisor(cfg, ext_paths=paths, discover=False) as c:
        out = await c.call_tool("chaos_echo", ARGS)
        if getattr(out.content[0], "text", None) != "echo: hi":
            raise RuntimeError(f"unexpected chaos_echo result: {out!r}")

        async def sequential(n: int) -> None:
            for _ in range(n):
                await c.call_tool("chaos_echo", ARGS)

        async def concurrent(n: int) -> None:
            async with trio.open_nursery() as nursery:
                for _ in range(WINDOW):
                    nursery.start_soon(sequential, n // WINDOW)

        result = Calls(raw_seq=[], raw_pipe=[], seq=[], conc=[])
        with trio.fail_after(300):
            await raw.sequential(sizes.warmup)
            await raw.pipelined(sizes.warmup)
            await sequential(sizes.warmup)
            await concurrent(sizes.warmup)
            for _ in range(sizes.reps):
                result.raw_seq.append(await rate_of(sizes.raw_seq, raw.sequential))
                result.seq.append(await rate_of(sizes.seq, sequential))
            for _ in range(sizes.reps):
                result.raw_pipe.append(await rate_of(sizes.raw_pipe, raw.pipelined))
                result.conc.append(await rate_of(sizes.conc, concurrent))
    return result


async def corral_chain(root: Path, sizes: Sizes, length: int) -> float:
    """``intercept_tool_call`` round trips/s through ``length`` allowing subscribers."""
    names = [f"chaos{i}" for i in range(1, length + 1)]
    paths = chaos_dirs(root, names, "--intercept", "allow")
    async with open_supervisor(_config(root), ext_paths=paths, discover=False) as c:
        outcome = await c.intercept_tool_call("t0", "chaos_echo", ARGS)
        if outcome.block or outcome.consulted != names:
            raise RuntimeError(f"unexpected intercept outcome: {outcome!r}")

        async def sequential(n: int) -> None:
            for i in range(n):
                await c.intercept_tool_call(f"t{i}", "chaos_echo", ARGS)

        n = sizes.chain1 if length == 1 else sizes.chain5
        with trio.fail_after(300):
            await sequential(sizes.warmup)
            return await rates(sizes.reps, n, sequential)


class StartStop(msgspec.Struct, frozen=True, kw_only=True):
    """One open/close of a supervisor."""

    ready_s: float
    stop_s: float
    running: int
    left_alive: int


async def start_stop(paths: list[str], cfg: SupervisorConfig) -> StartStop:
    """Time entering ``open_supervisor`` (all ready) and leaving it (all stopped)."""
    with trio.fail_after(120):
        t0 = time.perf_counter()
        async with open_supervisor(cfg, ext_paths=paths, discover=False) as c:
            t1 = time.perf_counter()
            pids = await _running(c)
            t2 = time.perf_counter()
        t3 = time.perf_counter()
    return StartStop(ready_s=t1 - t0, stop_s=t3 - t2, running=len(pids), left_alive=_alive(pids))


def _child_env() -> dict[str, str]:
    """A small environment like the one corral gives Python extensions."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return env | {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def bare_interpreters(n: int) -> float:
    """Seconds to start ``n`` ``python -c pass`` at once and wait for all of them."""
    argv, env = [sys.executable, "-c", "pass"], _child_env()
    with stopwatch() as t:
        procs = [subprocess.Popen(argv, env=env, start_new_session=True) for _ in range(n)]
        for p in procs:
            p.wait()
    return t[0]


def direct_lean(paths: list[str]) -> tuple[float, float]:
    """Without corral: seconds until the lean extensions in ``paths``, started at once,
    all sent ``ready``, and seconds from closing their stdin until all exited."""
    pipe = subprocess.PIPE
    with stopwatch() as ready:
        procs = [
            subprocess.Popen(
                [sys.executable, str(Path(d) / "lean.py")],
                env=_child_env() | {"PYTHONPATH": SDK_DIR, "CORRAL_EXT_NAME": Path(d).name},
                stdin=pipe,
                stdout=pipe,
                start_new_session=True,
            )
            for d in paths
        ]
        for p in procs:
            assert p.stdout is not None
            for line in p.stdout:
                if b'"ready"' in line:
                    break
    with stopwatch() as stop:
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
        for p in procs:
            p.wait()
    for p in procs:
        assert p.stdout is not None
        p.stdout.close()
    return ready[0], stop[0]


async def idle_cpu(root: Path, seconds: float) -> tuple[float, float, float]:
    """Host CPU seconds, host CPU percent and children's CPU seconds over an idle window."""
    paths = chaos_dirs(root, [f"idle{i}" for i in range(10)])
    async with open_supervisor(_config(root), ext_paths=paths, discover=False) as c:
        pids = await _running(c)
        if len(pids) != 10:
            raise RuntimeError(f"only {len(pids)} of 10 extensions running")
        await trio.sleep(0.5)  # let start-up work (threads, logs) settle first
        me = psutil.Process()
        kids = [psutil.Process(pid) for pid in pids]

        def cpu(p: psutil.Process) -> float:
            t = p.cpu_times()
            return float(t.user + t.system)

        host0, kids0 = cpu(me), sum(cpu(k) for k in kids)
        with stopwatch() as wall:
            await trio.sleep(seconds)
        host1, kids1 = cpu(me), sum(cpu(k) for k in kids)
    host = host1 - host0
    return host, 100.0 * host / wall[0], kids1 - kids0


# --- the measurement ---------------------------------------------------------------------------


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("inf")


def measure(quick: bool) -> list[Row]:
    """Run every case; a case that raises becomes a failed row."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,  # as the agent's CLI configures it
    )
    sizes = QUICK if quick else FULL
    rows = Rows("supervisor")
    with tempfile.TemporaryDirectory(prefix="corral-bench-sup-") as tmp:
        root = Path(tmp)
        mcp: tuple[float, float] | None = None
        with rows.guard("mcp"):
            counts = (sizes.warmup // 4, sizes.mcp_reps, sizes.mcp_seq, sizes.mcp_conc)
            mcp = anyio.run(mcp_calls, *counts, backend="asyncio")
            note = f"mcp SDK {_version('mcp')}, anyio asyncio backend"
            rows.add("mcp.seq", mcp[0], "calls/s", note=note)
            rows.add("mcp.concurrent32", mcp[1], "calls/s", note=note)
        with rows.guard("corral.calls"):
            _calls(trio.run(calls_side_by_side, root, sizes), mcp, rows)
        for length in (1, 5):
            with rows.guard(f"corral.intercept_chain{length}"):
                rate = trio.run(corral_chain, root, sizes, length)
                note = f"{length} subscriber{'s' if length > 1 else ''} (chaos --intercept allow)"
                rows.add(f"corral.intercept_chain{length}", rate, "rt/s", note=note)
        with rows.guard("corral.spawn"):
            _spawn_and_stop(root, sizes, rows)
        with rows.guard("corral.stop10_stubborn"):
            _stubborn(root, sizes, rows)
        with rows.guard("corral.idle_cpu"):
            host, pct, kids = trio.run(idle_cpu, root, sizes.idle_s)
            note = f"10 extensions, {sizes.idle_s:g} s window"
            rows.add("corral.idle_cpu_s", host, "CPU s", note=note)
            rows.add(
                "corral.idle_cpu_pct",
                pct,
                "%",
                target="< 1 %",
                ok=pct < 1.0,
                note=f"children used {kids:.3f} CPU s",
            )
    return rows.rows


def _calls(calls: Calls, mcp: tuple[float, float] | None, rows: Rows) -> None:
    """Rows of the side-by-side call measurement (ratios of raw pairs are per repetition)."""
    reps = f"median of {len(calls.seq)}"
    rows.add("raw.seq", median(calls.raw_seq), "rt/s", note="trio+msgspec ↔ json child")
    rows.add("raw.pipelined32", median(calls.raw_pipe), "rt/s", note=f"{WINDOW} in flight")
    seq = rows.add("corral.seq", median(calls.seq), "calls/s", note="call_tool chaos_echo")
    conc = rows.add("corral.concurrent32", median(calls.conc), "calls/s", note="32 callers")
    r = median([_ratio(c, b) for c, b in zip(calls.seq, calls.raw_seq, strict=True)])
    rows.add("corral.seq_vs_raw", r, "×", target="≥ 0.5", ok=r >= 0.5, note=f"paired, {reps}")
    r = median([_ratio(c, b) for c, b in zip(calls.conc, calls.raw_pipe, strict=True)])
    rows.add("corral.concurrent32_vs_raw_pipelined", r, "×", note=f"paired, {reps}")
    if mcp is not None:
        r = _ratio(seq, mcp[0])
        rows.add("corral.seq_vs_mcp", r, "×", target="≥ 10", ok=r >= 10)
        r = _ratio(conc, mcp[1])
        rows.add("corral.concurrent32_vs_mcp", r, "×", target="≥ 20", ok=r >= 20)


def _spawn_and_stop(root: Path, sizes: Sizes, rows: Rows) -> None:
    """Spawn-to-ready for 1, 10 and 50 extensions, stop of 50, and their baselines.

    The 50-extension runs alternate with the baselines, so load drifts hit all three.
    """
    paths = lean_dirs(root, [f"ext{i:02d}" for i in range(50)])
    cfg = _config(root)
    trio.run(start_stop, paths[:1], cfg)  # warm-up: imports, spawner thread, caches
    bare_interpreters(5)
    for n in (1, 10):
        runs = [trio.run(start_stop, paths[:n], cfg) for _ in range(sizes.spawn_reps)]
        _ready_row(rows, n, runs)
    runs, bare, direct = [], [], []
    for _ in range(sizes.spawn_reps):
        runs.append(trio.run(start_stop, paths, cfg))
        bare.append(bare_interpreters(50))
        direct.append(direct_lean(paths))
    _ready_row(rows, 50, runs)
    rows.add("corral.bare_python50", median(bare) * 1000, "ms", note="python -c pass ×50 at once")
    r = median([_ratio(run.ready_s, b) for run, b in zip(runs, bare, strict=True)])
    rows.add("corral.ready50_vs_bare", r, "×", target="≤ 1.5", ok=r <= 1.5, note="paired")
    rows.add(
        "corral.direct_lean50_ready",
        median([d[0] for d in direct]) * 1000,
        "ms",
        note="the same 50 lean extensions without corral, until each sent ready",
    )
    r = median([_ratio(run.ready_s, d[0]) for run, d in zip(runs, direct, strict=True)])
    rows.add("corral.ready50_vs_direct", r, "×", note="paired; corral's own share of start-up")
    stop = median([r.stop_s for r in runs])
    alive = sum(r.left_alive for r in runs)
    rows.add(
        "corral.stop50_cooperative",
        stop * 1000,
        "ms",
        target="< 200 ms",
        ok=stop < 0.2 and alive == 0,
        note=f"{alive} left alive",
    )
    rows.add(
        "corral.direct_lean50_stop",
        median([d[1] for d in direct]) * 1000,
        "ms",
        note="the same 50 without corral: close stdin, wait all",
    )


def _ready_row(rows: Rows, n: int, runs: list[StartStop]) -> None:
    short = [r.running for r in runs if r.running != n]
    note = f"{n} lean SDK extensions" + (f"; only {short} running" if short else "")
    rows.add(f"corral.ready{n}", median([r.ready_s for r in runs]) * 1000, "ms", note=note)


def _stubborn(root: Path, sizes: Sizes, rows: Rows) -> None:
    """Stop of 10 extensions that ignore shutdown, end of stdin and SIGTERM."""
    paths = chaos_dirs(root, [f"stub{i}" for i in range(10)], "--ignore-sigterm")
    cfg = _config(root)  # the default grace periods: shutdown 2.0 s, then SIGTERM 1.0 s
    runs = [trio.run(start_stop, paths, cfg) for _ in range(sizes.stubborn_reps)]
    stop = median([r.stop_s for r in runs])
    alive = sum(r.left_alive for r in runs)
    rows.add(
        "corral.stop10_stubborn",
        stop,
        "s",
        target="< 3.5 s",
        ok=stop < 3.5 and alive == 0,
        note=f"shutdown_grace {cfg.shutdown_grace:g} + term_grace {cfg.term_grace:g}; "
        f"{alive} left alive",
    )


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


if __name__ == "__main__":
    main(measure)
