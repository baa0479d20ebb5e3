"""Side-by-side driver: the bare loop (trio + msgspec, no supervisor at all).

``python bench/drivers/bare.py FIGURE`` measures one figure once, in this fresh
process, and prints one JSON object ``{"value": float, "unit": str}`` (the driver
protocol of ``bench/sidebyside.py``). Extensions are started as a host without
corral would: ``trio.lowlevel.open_process`` in a session of their own, the lean
SDK extension (``_exts.LEAN``) for start, stop and memory, the minimal echo child
(``_baselines.RAW_CHILD``) for calls.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _baselines import RawChild, open_raw_child
from _lean import SDK_DIR, child_env, lean_dirs
from _sidebyside import N_CALLS, figure_main, inner_median, rss_mib


async def _start(paths: list[str]) -> list[trio.Process]:
    """Start the lean extensions in ``paths`` at once; return when each sent ``ready``."""
    procs = []
    for d in paths:
        env = child_env() | {"PYTHONPATH": SDK_DIR, "CORRAL_EXT_NAME": Path(d).name}
        procs.append(
            await trio.lowlevel.open_process(
                [sys.executable, str(Path(d) / "lean.py")],
                env=env,
                cwd=d,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,
            )
        )

    async def ready(p: trio.Process) -> None:
        assert p.stdout is not None
        buf = b""
        while b'"ready"' not in buf:
            chunk = await p.stdout.receive_some(65536)
            if not chunk:
                raise EOFError("an extension closed its stdout before ready")
            buf += chunk

    async with trio.open_nursery() as n:
        for p in procs:
            n.start_soon(ready, p)
    return procs


async def _stop(procs: list[trio.Process]) -> None:
    for p in procs:
        assert p.stdin is not None
        await p.stdin.aclose()
    for p in procs:
        await p.wait()
        assert p.stdout is not None
        await p.stdout.aclose()


async def measure(figure: str, root: Path) -> tuple[float, str]:
    if figure.startswith("ready"):
        n = int(figure[5:])
        paths = lean_dirs(root, [f"e{i:02d}" for i in range(n)])
        await _stop(await _start(paths[:1]))  # warm-up, as the corral driver does

        async def ready() -> float:
            t0 = time.perf_counter()
            procs = await _start(paths)
            ms = (time.perf_counter() - t0) * 1000
            await _stop(procs)
            return ms

        return await inner_median(ready), "ms"
    if figure == "stop1":
        paths = lean_dirs(root, ["e00"])

        async def stop() -> float:
            procs = await _start(paths)
            t0 = time.perf_counter()
            await _stop(procs)
            return (time.perf_counter() - t0) * 1000

        return await inner_median(stop), "ms"
    if figure == "rss10":
        procs = await _start(lean_dirs(root, [f"e{i:02d}" for i in range(10)]))
        mib = rss_mib()
        await _stop(procs)
        return mib, "MiB"
    if figure == "seq" or figure.startswith("concurrent"):
        async with open_raw_child() as raw:
            await raw.sequential(200)  # warm-up
            t0 = time.perf_counter()
            if figure == "seq":
                await raw.sequential(N_CALLS)
            else:
                await _callers(raw, int(figure[10:]))
            return N_CALLS / (time.perf_counter() - t0), "calls/s"
    raise SystemExit(f"unknown figure {figure!r}")


async def _callers(raw: RawChild, window: int) -> None:
    import _baselines

    _baselines.WINDOW = window  # the pipelined loop's window: this many in flight
    await raw.pipelined(N_CALLS)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="corral-sbs-bare-") as tmp:
        figure_main(lambda fig: trio.run(measure, fig, Path(tmp)))
