"""What the sandbox adds to starting an extension.

Spawn-to-ready (entering ``open_supervisor`` until the extension sent ``ready``)
of the lean SDK extension, one at a time and 10 at once, with:

* ``off``: no sandbox;
* ``bwrap``: bubblewrap with seccomp, without a cgroup per extension;
* ``bwrap+cgroup``: what ``--sandbox auto`` does on a machine with a writable
  cgroup tree (root here): bwrap plus a memory and pids cgroup per extension.

The repetitions of the three variants alternate, so load from elsewhere hits each
alike; figures are medians. Target: at most 10 ms added per sandboxed spawn.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import trio
from _common import Row, Rows, main, median
from bench_supervisor import lean_dirs

from agent._cli.logs import configure_logging
from sandbox import Sandbox, select_sandbox
from supervisor import SupervisorConfig, open_supervisor


async def _ready(paths: list[str], home: Path, sandbox: Sandbox) -> float:
    cfg = SupervisorConfig(home=str(home))
    with trio.fail_after(60):
        t0 = time.perf_counter()
        async with open_supervisor(cfg, ext_paths=paths, discover=False, sandbox=sandbox) as c:
            ready = time.perf_counter() - t0
            infos = await c.list_extensions()
    if any(i.state != "running" for i in infos):
        raise RuntimeError(f"not all ready: {[(i.name, i.state, i.problem) for i in infos]}")
    return ready


def measure(quick: bool) -> list[Row]:
    """Spawn-to-ready with and without the sandbox, 1 and 10 at once."""
    configure_logging(level="error")
    reps = 5 if quick else 21
    variants: dict[str, Sandbox] = {
        "off": select_sandbox("off"),
        "bwrap": select_sandbox("auto", cgroups=False),
        "bwrap+cgroup": select_sandbox("auto"),
    }
    rows = Rows("sandbox")
    with tempfile.TemporaryDirectory(prefix="corral-bench-sandbox-") as tmp:
        root = Path(tmp)
        paths = lean_dirs(root, [f"sb{i}" for i in range(10)])
        for sb in variants.values():  # warm-up: probes, imports, the spawner thread
            trio.run(_ready, paths[:1], root / "home", sb)
        for n in (1, 10):
            times: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(reps):
                for name, sb in variants.items():
                    times[name].append(trio.run(_ready, paths[:n], root / "home", sb))
            base = median(times["off"])
            rows.add(f"ready{n}.off", base * 1000, "ms", note=f"{n} lean extension(s) at once")
            for name in ("bwrap", "bwrap+cgroup"):
                value = median(times[name])
                rows.add(f"ready{n}.{name}", value * 1000, "ms")
                added = (value - base) * 1000 / (1 if n == 1 else n)
                what = "per spawn" if n == 1 else "per spawn, amortised over 10 at once"
                rows.add(
                    f"added{n}.{name}",
                    added,
                    "ms",
                    target="≤ 10 ms" if n == 1 else None,
                    ok=added <= 10 if n == 1 else None,
                    note=what,
                )
    return rows.rows


if __name__ == "__main__":
    main(measure)
