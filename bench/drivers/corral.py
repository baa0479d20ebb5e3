"""Side-by-side driver: corral's embedding API (``open_supervisor``, ``--sandbox off``).

``python bench/drivers/corral.py FIGURE`` measures one figure once, in this fresh
process, and prints ``{"value": float, "unit": str}`` (see ``bench/sidebyside.py``).
The same lean SDK extension as the bare driver for start, stop and memory; the
``chaos`` example extension (``chaos_echo``) for calls.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _baselines import ARGS
from _lean import lean_dirs
from _sidebyside import N_CALLS, figure_main, inner_median, rss_mib

from sandbox.log import configure_when_loaded
from supervisor import SupervisorConfig, open_supervisor

# Only what an embedder imports (not bench/_common or _exts, which import corral's
# toolbox and psutil): the memory figure is the embedding API's own.


def quiet_logging() -> None:
    """Errors only, said to ``sandbox.log`` as the CLI does (structlog loads on the first)."""

    def setup(structlog: Any) -> None:
        structlog.configure(
            wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
            logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        )

    try:
        configure_when_loaded(setup, level=logging.ERROR)
    except TypeError:  # a corral before issue 29 (A/B runs against an older checkout)
        configure_when_loaded(setup)


async def start_stop(paths: list[str], cfg: SupervisorConfig) -> tuple[float, float]:
    """Seconds until all of ``paths`` are ready, and to stop them all."""
    t0 = time.perf_counter()
    async with open_supervisor(cfg, ext_paths=paths, discover=False):
        t1 = time.perf_counter()
    return t1 - t0, time.perf_counter() - t1


async def measure(figure: str, root: Path) -> tuple[float, str]:
    cfg = SupervisorConfig(home=str(root / "home"), sandbox="off")  # corral's own costs
    if figure.startswith("ready"):
        paths = lean_dirs(root, [f"e{i:02d}" for i in range(int(figure[5:]))])
        await start_stop(paths[:1], cfg)  # warm-up: the guardian, imports

        async def ready() -> float:
            return (await start_stop(paths, cfg))[0] * 1000

        return await inner_median(ready), "ms"
    if figure == "stop1":
        paths = lean_dirs(root, ["e00"])

        async def stop() -> float:
            return (await start_stop(paths, cfg))[1] * 1000

        return await inner_median(stop), "ms"
    if figure == "rss10":
        paths = lean_dirs(root, [f"e{i:02d}" for i in range(10)])
        async with open_supervisor(cfg, ext_paths=paths, discover=False):
            return rss_mib(), "MiB"
    if figure == "seq" or figure.startswith("concurrent"):
        from _exts import chaos_dirs

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
    quiet_logging()
    with tempfile.TemporaryDirectory(prefix="corral-sbs-corral-") as tmp:
        figure_main(lambda fig: trio.run(measure, fig, Path(tmp)))
