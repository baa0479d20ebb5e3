"""Agent-loop figures: per-turn overhead, and host memory over 10,000 turns.

Run from the repository root::

    python bench/bench_agent.py [--quick] [--json-out PATH]   # or: python bench/run.py

1. **Overhead per turn.** A scripted provider answers every prompt with one call
   of the ``chaos_echo`` tool of a real (sandboxed when possible) chaos extension,
   then with a short text: a prompt is two model calls and one extension tool call.
   The tool's own round trip is measured separately with
   ``SupervisorClient.call_tool`` and subtracted, which leaves corral's time per
   turn: events, hooks (the intercept chain and lifecycle events), registry,
   transcript. Target: under 2 ms.
2. **Memory.** 10,000 scripted model turns (5,000 prompts of a ``read`` tool call
   and an answer) with automatic compaction; the host's RSS is sampled every 500
   turns after a warm-up. Target: flat within 10%.
"""

from __future__ import annotations

import gc
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from _common import ROOT as REPO
from _common import Row, main

from agent import AgentEvent, AgentOptions, ScriptedProvider, open_agent, parse_script
from agent._cli.logs import configure_logging

CHAOS = REPO / "examples" / "extensions" / "chaos" / "chaos.py"


async def _sink(event: AgentEvent) -> None:
    return None


def _chaos_ext(base: Path) -> str:
    where = base / "chaos"
    where.mkdir()
    shutil.copy2(CHAOS, where / "chaos.py")
    manifest = {"name": "chaos", "version": "1", "exec": "./chaos.py", "language": "python"}
    (where / "extension.json").write_text(json.dumps(manifest))
    return str(where)


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "mean": statistics.fmean(ordered) * 1000,
        "p50": ordered[len(ordered) // 2] * 1000,
        "p95": ordered[int(len(ordered) * 0.95)] * 1000,
    }


async def overhead(prompts: int, sandbox: str) -> dict[str, Any]:
    """Per-prompt wall time minus the extension tool's own round trip."""
    script = (
        '{"tool_calls": [{"name": "chaos_echo", "args": {"text": "ping"}}]}\n'
        '{"text": "The tool said ping."}\n'
    )
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        base = Path(tmp)
        (base / "home").mkdir()
        options = AgentOptions(
            cwd=tmp,
            ext_paths=[_chaos_ext(base)],
            discover=False,
            sandbox=sandbox,
            home=str(base / "home"),
        )
        provider = ScriptedProvider(parse_script(script), cycle=True)
        async with open_agent(options, provider=provider, compact_threshold=None) as host:
            loop = host.engine
            infos = await host.extensions()
            backend = infos[0].backend if infos else "?"
            sandboxed = bool(infos and infos[0].sandboxed)
            for _ in range(20):
                await host.supervisor.call_tool("chaos_echo", {"text": "warm"})
                await loop.prompt("go", [], _sink)
            tool: list[float] = []
            turns: list[float] = []
            for _ in range(prompts):
                start = time.perf_counter()
                await host.supervisor.call_tool("chaos_echo", {"text": "ping"})
                tool.append(time.perf_counter() - start)
                loop.clear()
                start = time.perf_counter()
                await loop.prompt("go", [], _sink)
                turns.append(time.perf_counter() - start)
    t, p = _ms(tool), _ms(turns)
    return {
        "prompts": prompts,
        "backend": backend,
        "sandboxed": sandboxed,
        "prompt_ms": p,
        "tool_rtt_ms": t,
        "overhead_ms_mean": p["mean"] - t["mean"],
        "overhead_ms_p50": p["p50"] - t["p50"],
        "target_ms": 2.0,
    }


def _rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


async def memory(turns: int, warmup: int, every: int) -> dict[str, Any]:
    """RSS over ``turns`` scripted model turns with compaction."""
    script = (
        '{"tool_calls": [{"name": "read", "args": {"path": "notes.txt"}}]}\n'
        + json.dumps({"text": "Notes read. " + "The answer goes on for a while. " * 8})
        + "\n"
    )
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        base = Path(tmp)
        (base / "home").mkdir()
        (base / "notes.txt").write_text("a line of notes\n" * 40)
        options = AgentOptions(cwd=tmp, discover=False, home=str(base / "home"), sandbox="off")
        samples: list[tuple[int, int]] = []
        compactions = 0

        async def count(event: AgentEvent) -> None:
            nonlocal compactions
            if type(event).__name__ == "CompactDone":
                compactions += 1

        provider = ScriptedProvider(parse_script(script), cycle=True)
        async with open_agent(options, provider=provider, compact_threshold=64 * 1024) as host:
            loop = host.engine
            done = 0
            while done < turns:
                await loop.prompt(f"prompt {done}", [], count)
                done = provider.played  # model turns so far (compaction uses none)
                if done >= warmup and done % every == 0:
                    samples.append((done, _rss()))
            size = loop.transcript.size
    values = [rss for _, rss in samples]
    spread = (max(values) - min(values)) / min(values) * 100 if values else 0.0
    return {
        "turns": turns,
        "compactions": compactions,
        "final_transcript_bytes": size,
        "rss_first_mib": values[0] / 2**20 if values else 0.0,
        "rss_last_mib": values[-1] / 2**20 if values else 0.0,
        "rss_min_mib": min(values) / 2**20 if values else 0.0,
        "rss_max_mib": max(values) / 2**20 if values else 0.0,
        "rss_spread_pct": spread,
        "samples": [[n, round(rss / 2**20, 2)] for n, rss in samples],
        "target_pct": 10.0,
    }


async def measure(quick: bool) -> list[Row]:
    """Both figures as rows (``--quick``: 100 prompts, 2,000 turns)."""
    prompts, turns, warmup, every = (100, 2000, 400, 200) if quick else (500, 10_000, 1000, 500)
    configure_logging(level="error")
    o = await overhead(prompts, "auto")
    m = await memory(turns, warmup, every)
    sandbox = f"extension sandbox: {o['backend']}"
    over_p50 = o["overhead_ms_p50"]
    spread = m["rss_spread_pct"]
    return [
        Row(
            bench="agent",
            case="prompt_p50",
            value=o["prompt_ms"]["p50"],
            unit="ms",
            note="2 model turns + 1 extension tool call; " + sandbox,
        ),
        Row(
            bench="agent",
            case="tool_rtt_p50",
            value=o["tool_rtt_ms"]["p50"],
            unit="ms",
            note="the same tool through client.call_tool",
        ),
        Row(
            bench="agent",
            case="overhead_p50",
            value=over_p50,
            unit="ms",
            target="< 2 ms",
            ok=over_p50 < 2.0,
            note="prompt minus the tool's own round trip",
        ),
        Row(
            bench="agent",
            case="overhead_mean",
            value=o["overhead_ms_mean"],
            unit="ms",
            target="< 2 ms",
            ok=o["overhead_ms_mean"] < 2.0,
        ),
        Row(
            bench="agent",
            case="rss_min",
            value=m["rss_min_mib"],
            unit="MiB",
            note=f"{m['turns']} scripted turns, {m['compactions']} compactions",
        ),
        Row(bench="agent", case="rss_max", value=m["rss_max_mib"], unit="MiB"),
        Row(
            bench="agent",
            case="rss_spread",
            value=spread,
            unit="%",
            target="< 10 %",
            ok=spread < 10.0,
            note=f"after {warmup} warm-up turns, sampled every {every}",
        ),
    ]


if __name__ == "__main__":
    main(measure)
