"""Side-by-side driver: corral's embedding API (``open_supervisor``, ``--sandbox off``).

``python bench/drivers/corral.py FIGURE`` measures one figure once, in this fresh
process, and prints ``{"value": float, "unit": str}`` (see ``bench/sidebyside.py``).
The same lean SDK extension as the bare driver for start, stop and memory; the
``chaos`` example extension (``chaos_echo``) for calls.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _baselines import ARGS
from _common import quiet_logging
from _exts import chaos_dirs, config, lean_dirs, start_stop
from _sidebyside import N_CALLS, figure_main, rss_mib

from supervisor import open_supervisor


async def measure(figure: str, root: Path) -> tuple[float, str]:
    cfg = config(root)
    if figure.startswith("ready"):
        paths = lean_dirs(root, [f"e{i:02d}" for i in range(int(figure[5:]))])
        await start_stop(paths[:1], cfg)  # warm-up: the guardian, imports
        return (await start_stop(paths, cfg)).ready_s * 1000, "ms"
    if figure == "stop1":
        return (await start_stop(lean_dirs(root, ["e00"]), cfg)).stop_s * 1000, "ms"
    if figure == "rss10":
        paths = lean_dirs(root, [f"e{i:02d}" for i in range(10)])
        async with open_supervisor(cfg, ext_paths=paths, discover=False):
            return rss_mib(), "MiB"
    if figure == "seq" or figure.startswith("concurrent"):
        paths = chaos_dirs(root, ["chaos"])
        async with open_supervisor(cfg, ext_paths=paths, discover=False) as c:
            for _ in range(200):  # warm-up
                await c.call_tool("chaos_echo", ARGS)
            t0 = time.perf_counter()
            if figure == "seq":
                for _ in range(N_CALLS):
                    await c.call_tool("chaos_echo", ARGS)
            else:
                window = int(figure[10:])

                async def caller(count: int) -> None:
                    for _ in range(count):
                        await c.call_tool("chaos_echo", ARGS)

                async with trio.open_nursery() as n:
                    for _ in range(window):
                        n.start_soon(caller, N_CALLS // window)
            return N_CALLS / (time.perf_counter() - t0), "calls/s"
    raise SystemExit(f"unknown figure {figure!r}")


if __name__ == "__main__":
    quiet_logging()  # structlog, as the CLI and any embedder that logs configure it
    with tempfile.TemporaryDirectory(prefix="corral-sbs-corral-") as tmp:
        figure_main(lambda fig: trio.run(measure, fig, Path(tmp)))
