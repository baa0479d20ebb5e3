"""Agent-loop figures: per-turn overhead, and host memory over 10,000 turns.

Run from the repository root::

    python bench/bench_agent.py            # both figures, a table and one JSON line
    python bench/bench_agent.py --quick    # fewer iterations, for a smoke run

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

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import trio

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from agent._engine import AgentOptions  # noqa: E402 - after the path fix-up above
from agent._events import AgentEvent  # noqa: E402
from agent._logging import configure_logging  # noqa: E402
from agent._scripted import ScriptedProvider, parse_script  # noqa: E402
from agent._session_host import open_agent  # noqa: E402

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


def _table(o: dict[str, Any], m: dict[str, Any]) -> str:
    rows = [
        ("figure", "value", "target"),
        (
            "prompt (2 model turns + 1 ext tool call), p50",
            f"{o['prompt_ms']['p50']:.3f} ms",
            "",
        ),
        ("extension tool round trip (call_tool), p50", f"{o['tool_rtt_ms']['p50']:.3f} ms", ""),
        ("corral overhead per prompt, p50", f"{o['overhead_ms_p50']:.3f} ms", "< 2 ms"),
        ("corral overhead per prompt, mean", f"{o['overhead_ms_mean']:.3f} ms", "< 2 ms"),
        ("extension sandbox", f"{o['backend']} (sandboxed={o['sandboxed']})", ""),
        (
            f"RSS over {m['turns']} turns (min..max)",
            f"{m['rss_min_mib']:.1f}..{m['rss_max_mib']:.1f} MiB",
            "",
        ),
        ("RSS spread after warm-up", f"{m['rss_spread_pct']:.2f} %", "< 10 %"),
        (
            "compactions / final transcript",
            f"{m['compactions']} / {m['final_transcript_bytes']} B",
            "",
        ),
    ]
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in width))
    return "\n".join(lines)


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    o = await overhead(args.prompts, args.sandbox)
    m = await memory(args.turns, args.warmup, args.every)
    return {"bench": "agent", "python": sys.version.split()[0], "overhead": o, "memory": m}


def main() -> None:
    """Run both figures; print a table, then one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=500, help="prompts timed for overhead")
    parser.add_argument("--turns", type=int, default=10_000, help="model turns for memory")
    parser.add_argument("--warmup", type=int, default=1000, help="turns before RSS sampling")
    parser.add_argument("--every", type=int, default=500, help="turns between RSS samples")
    parser.add_argument("--sandbox", choices=["auto", "required", "off"], default="auto")
    parser.add_argument("--quick", action="store_true", help="100 prompts, 2,000 turns")
    args = parser.parse_args()
    if args.quick:
        args.prompts, args.turns, args.warmup, args.every = 100, 2000, 400, 200
    configure_logging(0)
    os.environ.setdefault("CORRAL_LOG", "error")
    result = trio.run(_main, args)
    print(_table(result["overhead"], result["memory"]))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
