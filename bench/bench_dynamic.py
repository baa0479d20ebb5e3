"""Dynamic tools: call latency sandboxed and not, and new_tool from request to first result.

Run from the repository root::

    python bench/bench_dynamic.py [--quick] [--json-out PATH]   # or: bench/run.py --only dynamic

1. **Call latency.** One call of a small dynamic tool (``word_count``) through its
   registered tool's ``run``, as the agent loop makes it: the program written to a
   fresh private directory, started (under bubblewrap: no network, a scratch
   directory, limits; or as a plain process group when unsandboxed), arguments in,
   result out, the group killed and reaped, the directory removed. A bare
   ``python -c pass`` is shown for scale.
2. **new_tool to first result.** From the ``new_tool`` request to the first
   successful call of the new tool: check and compile the draft, run its
   ``--describe`` (sandboxed), compare the spec, seal it, store it in the SQLite
   catalog (``synchronous=FULL``), register it, then call it.

Variants alternate repetition by repetition, so load from elsewhere hits each alike;
figures are medians.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import trio
from _common import Row, Rows, main, median, stopwatch
from bench_mcp import bwrap_backend, quiet_logs

from agent._tools.dynamic import DynamicTools, ToolDraft, dynamic_tools
from sandbox import Sandbox

DRAFT = ToolDraft(
    name="word_count",
    description="Count the words of a text.",
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
    code="return {'words': len(args['text'].split())}",
)
ARGS = {"text": "the quick brown fox"}


class Sizes(msgspec.Struct, frozen=True, kw_only=True):
    calls: int
    creations: int


FULL = Sizes(calls=15, creations=7)
QUICK = Sizes(calls=2, creations=1)


async def _progress(text: str) -> None:
    pass


async def _call(tools: DynamicTools, name: str) -> float:
    (tool,) = [t for t in tools.tools() if t.draft.name == name]
    with stopwatch() as t:
        result = await tool.run("b", ARGS, _progress)
    if result.is_error or '"words": 4' not in str(result.content):
        raise RuntimeError(f"unexpected result: {result!r}")
    return t[0]


async def _create_and_call(tools: DynamicTools, name: str) -> float:
    draft = msgspec.structs.replace(DRAFT, name=name)
    with stopwatch() as t:
        await tools.create(draft, replace=True)
        await _call(tools, name)
    return t[0]


async def run_variants(home: Path, variants: dict[str, Sandbox | None], sizes: Sizes) -> Any:
    """Call latency and new_tool time of every variant, repetitions interleaved."""
    sets = {
        label: dynamic_tools(home / label, sandbox=backend) for label, backend in variants.items()
    }
    calls: dict[str, list[float]] = {label: [] for label in sets}
    creations: dict[str, list[float]] = {label: [] for label in sets}
    with trio.fail_after(600):
        for tools in sets.values():
            await tools.sync()
            await _create_and_call(tools, "word_count")  # warm: the key, the catalog
        for _ in range(sizes.calls):
            for label, tools in sets.items():
                calls[label].append(await _call(tools, "word_count"))
        for n in range(sizes.creations):
            for label, tools in sets.items():
                creations[label].append(await _create_and_call(tools, f"t{n}"))
    return calls, creations


def _bare_python(reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - t0)
    return median(times)


def measure(quick: bool) -> list[Row]:
    """Every case; a case that raises becomes a failed row."""
    quiet_logs()
    sizes = QUICK if quick else FULL
    rows = Rows("dynamic")
    variants: dict[str, Sandbox | None] = {"unsandboxed": None}
    bwrap = bwrap_backend()
    if bwrap is not None:
        variants["sandboxed"] = bwrap
    with rows.guard("bare_python"):
        rows.add("bare_python_ms", _bare_python(sizes.calls) * 1000, "ms", note="python -c pass")
    with tempfile.TemporaryDirectory(prefix="corral-bench-dyn-") as tmp, rows.guard("calls"):
        calls, creations = trio.run(run_variants, Path(tmp), variants, sizes)
        for label in variants:
            note = f"median of {len(calls[label])}"
            rows.add(f"call.{label}_ms", median(calls[label]) * 1000, "ms", note=note)
        if "sandboxed" in calls:
            ratio = median(calls["sandboxed"]) / median(calls["unsandboxed"])
            rows.add("call.sandboxed_vs_unsandboxed", ratio, "×", note="bubblewrap's share")
        else:
            rows.add("call.sandboxed_ms", 0.0, "ms", note="skipped: no bwrap backend here")
        for label in variants:
            note = f"request to first result, SQLite catalog; median of {len(creations[label])}"
            rows.add(f"new_tool.{label}_ms", median(creations[label]) * 1000, "ms", note=note)
    return rows.rows


if __name__ == "__main__":
    main(measure)
