"""corral's call path side by side with a bare NDJSON loop and the MCP Python SDK.

Everything is paired: each repetition measures both sides of a ratio seconds
apart, alternating, and a ratio is the median of the per-repetition ratios, so
load from elsewhere hits both sides alike. Every child runs in a session of its
own, as corral's extensions and the MCP SDK's servers do (with autogroup
scheduling a session is also a CPU-share group).

* ``raw.*``: the floor. trio + msgspec round trips with a minimal Python child
  that decodes each request and encodes a reply with ``json`` (what the
  ``chaos`` extension does), sequentially and with 32 requests in flight, from
  one task (``pipelined32``) or from 32 caller tasks that each await their own
  reply (``callers32``: corral's shape with none of its bookkeeping).
* ``corral.*``: ``call_tool("chaos_echo")`` on one chaos extension: as shipped
  (a lone caller spins up to ``reply_spin`` for its answer), without the spin
  (``nospin``), and from 32 concurrent callers; host CPU per call beside the raw
  loop's; intercept chains; a stubborn stop.
* ``mcp.*``: the MCP SDK's stdio client against ``bench/mcp_echo_server.py`` (one
  ``echo`` tool; anyio on asyncio, the SDK's default and faster backend here),
  its repetitions alternating with corral's.

Start-up, stop and the sandbox's cost are in ``bench_spawn`` and
``bench_sandbox``; costs against the number of extensions in ``bench_curves``.
Logging is filtered to errors, as a host logging to a file at warning level
would barely differ.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import msgspec
import trio
from _baselines import ARGS, WINDOW, mcp_session, open_raw_child
from _common import Row, Rows, main, median, quiet_logging
from _exts import chaos_dirs, config, start_stop

from supervisor import SupervisorClient, open_supervisor


class Sizes(msgspec.Struct, frozen=True, kw_only=True):
    """Iteration counts of one run (full or ``--quick``)."""

    reps: int
    warmup: int
    seq: int
    conc: int
    mcp_reps: int
    mcp_seq: int
    mcp_conc: int
    chain1: int
    chain5: int
    stubborn_reps: int


FULL = Sizes(
    reps=7,
    warmup=300,
    seq=3000,
    conc=12800,
    mcp_reps=5,
    mcp_seq=300,
    mcp_conc=960,
    chain1=2000,
    chain5=600,
    stubborn_reps=2,
)
QUICK = Sizes(
    reps=2,
    warmup=30,
    seq=300,
    conc=640,
    mcp_reps=1,
    mcp_seq=40,
    mcp_conc=160,
    chain1=200,
    chain5=100,
    stubborn_reps=1,
)


class Rate(msgspec.Struct, frozen=True, kw_only=True):
    """One timed run: calls per second and host CPU microseconds per call."""

    per_s: float
    cpu_us: float


async def timed(n: int, run: Callable[[int], Awaitable[None]]) -> Rate:
    """``run(n)`` timed by the wall clock and this process's CPU clock."""
    c0, t0 = time.process_time(), time.perf_counter()
    await run(n)
    t1, c1 = time.perf_counter(), time.process_time()
    return Rate(per_s=n / (t1 - t0), cpu_us=(c1 - c0) * 1e6 / n)


def sequential(client: SupervisorClient) -> Callable[[int], Awaitable[None]]:
    async def run(n: int) -> None:
        for _ in range(n):
            await client.call_tool("chaos_echo", ARGS)

    return run


def concurrent(client: SupervisorClient) -> Callable[[int], Awaitable[None]]:
    one = sequential(client)

    async def run(n: int) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(WINDOW):
                nursery.start_soon(one, n // WINDOW)

    return run


class Calls(msgspec.Struct, kw_only=True):
    """Per-repetition measurements of each side, in the order they were taken."""

    raw_seq: list[Rate] = msgspec.field(default_factory=list)
    raw_pipe: list[Rate] = msgspec.field(default_factory=list)
    raw_callers: list[Rate] = msgspec.field(default_factory=list)
    seq: list[Rate] = msgspec.field(default_factory=list)
    nospin: list[Rate] = msgspec.field(default_factory=list)
    conc: list[Rate] = msgspec.field(default_factory=list)


async def calls_side_by_side(root: Path, sizes: Sizes) -> Calls:
    """The raw loop, corral (with and without the spin) and 32 callers, alternating."""
    spin = chaos_dirs(root / "spin", ["chaos"])
    nospin = chaos_dirs(root / "nospin", ["chaos"])
    out = Calls()
    async with (
        open_raw_child() as raw,
        open_supervisor(config(root), ext_paths=spin, discover=False) as c,
        open_supervisor(config(root, reply_spin=0.0), ext_paths=nospin, discover=False) as c0,
    ):
        reply = await c.call_tool("chaos_echo", ARGS)
        if getattr(reply.content[0], "text", None) != "echo: hi":
            raise RuntimeError(f"unexpected chaos_echo result: {reply!r}")
        with trio.fail_after(600):
            for warm in (raw.sequential, raw.pipelined, raw.callers, sequential(c), sequential(c0)):
                await warm(sizes.warmup)
            await concurrent(c)(sizes.warmup * 4)
            for _ in range(sizes.reps):
                out.raw_seq.append(await timed(sizes.seq, raw.sequential))
                out.seq.append(await timed(sizes.seq, sequential(c)))
                out.nospin.append(await timed(sizes.seq, sequential(c0)))
                out.raw_pipe.append(await timed(sizes.conc, raw.pipelined))
                out.conc.append(await timed(sizes.conc, concurrent(c)))
                out.raw_callers.append(await timed(sizes.conc, raw.callers))
    return out


def paired(a: list[Rate], b: list[Rate], key: str = "per_s") -> float:
    """Median over repetitions of ``a[i] / b[i]`` (rates, or ``cpu_us``)."""
    return median([getattr(x, key) / getattr(y, key) for x, y in zip(a, b, strict=True)])


def _calls(c: Calls, rows: Rows) -> None:
    reps = f"paired, median of {len(c.seq)} alternating repetitions"
    rows.add(
        "raw.seq", median([r.per_s for r in c.raw_seq]), "rt/s", note="trio+msgspec ↔ json child"
    )
    rows.add("raw.pipelined32", median([r.per_s for r in c.raw_pipe]), "rt/s", note="32 in flight")
    rows.add(
        "corral.seq", median([r.per_s for r in c.seq]), "calls/s", note="call_tool, as shipped"
    )
    rows.add(
        "corral.seq_nospin", median([r.per_s for r in c.nospin]), "calls/s", note="reply_spin=0"
    )
    rows.add("corral.concurrent32", median([r.per_s for r in c.conc]), "calls/s", note="32 callers")
    r = paired(c.seq, c.raw_seq)
    rows.add("corral.seq_vs_raw", r, "×", target="≥ 0.85", ok=r >= 0.85, note=f"throughput; {reps}")
    r = paired(c.nospin, c.raw_seq)
    rows.add("corral.seq_nospin_vs_raw", r, "×", note=f"throughput without the spin; {reps}")
    r = paired(c.seq, c.raw_seq, "cpu_us")
    rows.add(
        "corral.seq_cpu_vs_raw",
        r,
        "×",
        target="≤ 1.2",
        ok=r <= 1.2,
        note=f"host CPU per call; {reps}",
    )
    r = paired(c.nospin, c.raw_seq, "cpu_us")
    rows.add(
        "corral.seq_nospin_cpu_vs_raw", r, "×", note=f"host CPU per call without the spin; {reps}"
    )
    rows.add("corral.seq_cpu", median([x.cpu_us for x in c.seq]), "µs/call", note="host CPU")
    rows.add("raw.seq_cpu", median([x.cpu_us for x in c.raw_seq]), "µs/rt", note="host CPU")
    r = paired(c.conc, c.raw_pipe)
    rows.add(
        "corral.concurrent32_vs_raw_pipelined",
        r,
        "×",
        target="≥ 0.8",
        ok=r >= 0.8,
        note=f"32 callers vs 32 in flight on one task; {reps}",
    )
    rows.add(
        "raw.callers32",
        median([r.per_s for r in c.raw_callers]),
        "rt/s",
        note="32 caller tasks, each awaiting its reply; one writer and one reader task",
    )
    r = paired(c.raw_callers, c.raw_pipe)
    rows.add("raw.callers32_vs_pipelined", r, "×", note=f"the shape of 32 callers itself; {reps}")
    r = paired(c.conc, c.raw_callers)
    rows.add(
        "corral.concurrent32_vs_raw_callers32", r, "×", note=f"corral's own cost per call; {reps}"
    )
    for name, rates in (("corral.concurrent32", c.conc), ("raw.pipelined32", c.raw_pipe)):
        rows.add(f"{name}_cpu", median([x.cpu_us for x in rates]), "µs/call", note="host CPU")
    busy = median([x.per_s * x.cpu_us / 1e6 for x in c.conc])
    rows.add(
        "corral.concurrent32_host_busy",
        busy,
        "CPUs",
        note="host CPU time / wall time; near 1 the host is the bottleneck",
    )


class Mcp(msgspec.Struct, kw_only=True):
    """Per-repetition rates of the MCP SDK and of corral, alternating."""

    mcp_seq: list[float] = msgspec.field(default_factory=list)
    mcp_conc: list[float] = msgspec.field(default_factory=list)
    seq: list[float] = msgspec.field(default_factory=list)
    conc: list[float] = msgspec.field(default_factory=list)


async def _mcp_rep(sizes: Sizes, warm: bool) -> tuple[float, float]:
    async with mcp_session() as session:

        async def seq(n: int) -> None:
            for _ in range(n):
                await session.call_tool("echo", ARGS)

        async def conc(n: int) -> None:
            async with anyio.create_task_group() as tg:
                for _ in range(WINDOW):
                    tg.start_soon(seq, n // WINDOW)

        with anyio.fail_after(300):
            if warm:
                await seq(sizes.warmup // 4)
            t0 = time.perf_counter()
            await seq(sizes.mcp_seq)
            t1 = time.perf_counter()
            await conc(sizes.mcp_conc)
            t2 = time.perf_counter()
    return sizes.mcp_seq / (t1 - t0), sizes.mcp_conc / (t2 - t1)


async def _corral_rep(root: Path, sizes: Sizes) -> tuple[float, float]:
    paths = chaos_dirs(root / "mcp-pair", ["chaos"])
    async with open_supervisor(config(root), ext_paths=paths, discover=False) as c:
        with trio.fail_after(300):
            await sequential(c)(sizes.warmup)
            seq = await timed(sizes.mcp_seq * 10, sequential(c))
            conc = await timed(sizes.mcp_conc * 10, concurrent(c))
    return seq.per_s, conc.per_s


def mcp_side_by_side(root: Path, sizes: Sizes) -> Mcp:
    """MCP and corral repetitions alternating (each in its own event loop)."""
    out = Mcp()
    for i in range(sizes.mcp_reps):
        seq, conc = anyio.run(_mcp_rep, sizes, i == 0, backend="asyncio")
        out.mcp_seq.append(seq)
        out.mcp_conc.append(conc)
        seq, conc = trio.run(_corral_rep, root, sizes)
        out.seq.append(seq)
        out.conc.append(conc)
    return out


def _mcp(m: Mcp, rows: Rows) -> None:
    note = f"mcp SDK {_version('mcp')}, anyio asyncio backend"
    rows.add("mcp.seq", median(m.mcp_seq), "calls/s", note=note)
    rows.add("mcp.concurrent32", median(m.mcp_conc), "calls/s", note=note)
    reps = f"paired with corral, median of {len(m.seq)} alternating repetitions"
    r = median([a / b for a, b in zip(m.seq, m.mcp_seq, strict=True)])
    rows.add("corral.seq_vs_mcp", r, "×", target="≥ 10", ok=r >= 10, note=reps)
    r = median([a / b for a, b in zip(m.conc, m.mcp_conc, strict=True)])
    rows.add("corral.concurrent32_vs_mcp", r, "×", target="≥ 20", ok=r >= 20, note=reps)


async def corral_chain(root: Path, sizes: Sizes, length: int) -> float:
    """``intercept_tool_call`` round trips/s through ``length`` allowing subscribers."""
    names = [f"chaos{i}" for i in range(1, length + 1)]
    paths = chaos_dirs(root, names, "--intercept", "allow")
    async with open_supervisor(config(root), ext_paths=paths, discover=False) as c:
        outcome = await c.intercept_tool_call("t0", "chaos_echo", ARGS)
        if outcome.block or outcome.consulted != names:
            raise RuntimeError(f"unexpected intercept outcome: {outcome!r}")

        async def chain(n: int) -> None:
            for i in range(n):
                await c.intercept_tool_call(f"t{i}", "chaos_echo", ARGS)

        n = sizes.chain1 if length == 1 else sizes.chain5
        with trio.fail_after(300):
            await chain(sizes.warmup)
            return median([(await timed(n, chain)).per_s for _ in range(sizes.reps)])


def _stubborn(root: Path, sizes: Sizes, rows: Rows) -> None:
    """Stop of 10 extensions that ignore shutdown, end of stdin and SIGTERM."""
    paths = chaos_dirs(root, [f"stub{i}" for i in range(10)], "--ignore-sigterm")
    cfg = config(root)  # the default grace periods: shutdown 2.0 s, then SIGTERM 1.0 s
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


def measure(quick: bool) -> list[Row]:
    """Run every case; a case that raises becomes a failed row."""
    quiet_logging()
    sizes = QUICK if quick else FULL
    rows = Rows("supervisor")
    with tempfile.TemporaryDirectory(prefix="corral-bench-sup-") as tmp:
        root = Path(tmp)
        with rows.guard("corral.calls"):
            _calls(trio.run(calls_side_by_side, root, sizes), rows)
        with rows.guard("mcp"):
            _mcp(mcp_side_by_side(root, sizes), rows)
        for length in (1, 5):
            with rows.guard(f"corral.intercept_chain{length}"):
                rate = trio.run(corral_chain, root, sizes, length)
                note = f"{length} subscriber{'s' if length > 1 else ''} (chaos --intercept allow)"
                rows.add(f"corral.intercept_chain{length}", rate, "rt/s", note=note)
        with rows.guard("corral.stop10_stubborn"):
            _stubborn(root, sizes, rows)
    return rows.rows


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


if __name__ == "__main__":
    main(measure)
