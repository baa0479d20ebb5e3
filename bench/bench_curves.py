"""Cost curves: what each extension loaded costs the host, at 1, 10, 50 and 200 of them.

For each count N, one supervisor (``--sandbox off``: corral's own cost) starts N
lean SDK extensions and measures:

* ``ready``: spawn to ready of all N (ms);
* ``rss``: the host's resident memory once they are ready (MiB), and from the
  points a least-squares line: RSS per extension (KiB);
* ``idle_cpu``: the host's CPU while nothing happens for a few seconds (% of one
  core): it must stay flat, nothing polls;
* ``call``: sequential ``call_tool`` latency to one of the N (µs per call,
  median of runs), which must not depend on N. Each run alternates with the same
  number of round trips of the bare loop (``_baselines.RawChild``, in the same
  process), and ``call_vs_raw`` is the median of the paired ratios; the flatness
  row compares that ratio at the largest N with the one at 1, so the machine's
  drift between points (wake-up latency on a shared box varies twofold within a
  minute) cancels out, while anything extensions cost the host process shows.

The table is printed and the curves are plotted to ``bench/results/curves.png``
(Pillow, from the ``bench`` extra: four small line charts, nothing that needs
matplotlib). The host raises its open-file limit to the hard limit first: 200
extensions hold 800 descriptors.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import psutil
import trio
from _baselines import open_raw_child
from _common import ROOT, Row, Rows, main, median, quiet_logging
from _exts import config, lean_dirs

from supervisor import open_supervisor

PNG = ROOT / "bench" / "results" / "curves.png"


class Point(msgspec.Struct, frozen=True, kw_only=True):
    """The costs measured with ``n`` extensions loaded."""

    n: int
    ready_ms: float
    rss_mib: float
    idle_cpu_pct: float
    call_us: float
    call_vs_raw: float


async def measure_at(paths: list[str], root: Path, idle_s: float, calls: int) -> Point:
    """Start ``paths``, then measure memory, idle CPU and call latency; stop."""
    me = psutil.Process()
    with trio.fail_after(600):
        async with open_raw_child() as raw:  # started before the clock runs
            t0 = time.perf_counter()
            async with open_supervisor(config(root), ext_paths=paths, discover=False) as c:
                ready = time.perf_counter() - t0
                infos = await c.list_extensions()
                if sum(i.state == "running" for i in infos) != len(paths):
                    raise RuntimeError(f"not all running: {[(i.name, i.state) for i in infos]}")
                await trio.sleep(0.5)  # start-up work (logs, threads) settles first
                rss = me.memory_info().rss / 2**20
                cpu0, wall0 = time.process_time(), time.perf_counter()
                await trio.sleep(idle_s)
                idle = 100 * (time.process_time() - cpu0) / (time.perf_counter() - wall0)
                tool = c.tools()[len(c.tools()) // 2].name
                runs, ratios = [], []
                for _ in range(7):
                    t1 = time.perf_counter()
                    await raw.sequential(calls)
                    t2 = time.perf_counter()
                    for _ in range(calls):
                        await c.call_tool(tool, {})
                    t3 = time.perf_counter()
                    runs.append((t3 - t2) / calls)
                    ratios.append((t3 - t2) / (t2 - t1))
    return Point(
        n=len(paths),
        ready_ms=ready * 1000,
        rss_mib=rss,
        idle_cpu_pct=idle,
        call_us=median(runs) * 1e6,
        call_vs_raw=median(ratios),
    )


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs``."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def plot(points: list[Point], path: Path) -> None:
    """Four line charts (ready, RSS, idle CPU, call latency against N) into one PNG."""
    from PIL import Image, ImageDraw

    panels = [
        ("spawn to ready (ms)", [p.ready_ms for p in points]),
        ("host RSS (MiB)", [p.rss_mib for p in points]),
        ("host idle CPU (%)", [p.idle_cpu_pct for p in points]),
        ("call latency (us)", [p.call_us for p in points]),  # the default font has no µ
    ]
    w, h, pad = 360, 240, 40
    img = Image.new("RGB", (2 * w, 2 * h), "white")
    draw = ImageDraw.Draw(img)
    xs = [p.n for p in points]
    for i, (title, ys) in enumerate(panels):
        ox, oy = (i % 2) * w, (i // 2) * h
        top = max(max(ys) * 1.15, 1e-9)
        draw.text((ox + pad, oy + 8), f"{title} vs extensions loaded", fill="black")
        draw.rectangle([ox + pad, oy + pad, ox + w - 15, oy + h - pad], outline="gray")

        def at(x: float, y: float, ox: int = ox, oy: int = oy, top: float = top) -> tuple[int, int]:
            px = ox + pad + (w - pad - 15) * x / max(xs)
            py = oy + h - pad - (h - 2 * pad) * y / top
            return int(px), int(py)

        pts = [at(x, y) for x, y in zip(xs, ys, strict=True)]
        draw.line(pts, fill="navy", width=2)
        for (px, py), x, y in zip(pts, xs, ys, strict=True):
            draw.ellipse([px - 3, py - 3, px + 3, py + 3], fill="navy")
            draw.text((px - 10, oy + h - pad + 4), str(x), fill="black")
            draw.text((px + 4, py - 14), f"{y:.3g}", fill="darkred")
        draw.text((ox + 4, oy + pad - 4), f"{top:.3g}", fill="gray")
        draw.text((ox + 4, oy + h - pad - 10), "0", fill="gray")
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)


def measure(quick: bool) -> list[Row]:
    """The curves at 1, 10, 50 and 200 extensions (1, 5 and 10 with ``--quick``)."""
    quiet_logging()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    counts = [1, 5, 10] if quick else [1, 10, 50, 200]
    idle_s, calls = (0.5, 100) if quick else (3.0, 1000)
    rows = Rows("curves")
    points: list[Point] = []
    with tempfile.TemporaryDirectory(prefix="corral-bench-curves-") as tmp:
        root = Path(tmp)
        paths = lean_dirs(root, [f"c{i:03d}" for i in range(max(counts))])
        trio.run(measure_at, paths[:1], root, 0.1, 10)  # warm-up
        for n in counts:
            with rows.guard(f"n{n}"):
                p = trio.run(measure_at, paths[:n], root, idle_s, calls)
                points.append(p)
                rows.add(f"ready.n{n}", p.ready_ms, "ms", note=f"{n} lean extensions at once")
                rows.add(f"rss.n{n}", p.rss_mib, "MiB", note="host, all ready")
                rows.add(f"idle_cpu.n{n}", p.idle_cpu_pct, "%", note=f"host, {idle_s:g} s idle")
                rows.add(f"call.n{n}", p.call_us, "µs", note="sequential call_tool to one of them")
                rows.add(
                    f"call_vs_raw.n{n}",
                    p.call_vs_raw,
                    "×",
                    note="that latency over the bare loop's; paired, median of 7",
                )
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if len(points) >= 2:
        ns = [float(p.n) for p in points]
        per_ext = _slope(ns, [p.rss_mib for p in points]) * 1024
        rows.add("rss.per_extension", per_ext, "KiB", note="least-squares slope of host RSS")
        first, last = points[0], points[-1]
        growth = last.call_vs_raw / first.call_vs_raw
        rows.add(
            "call.flatness",
            growth,
            "×",
            target="≤ 1.5",
            ok=growth <= 1.5,
            note=f"call_vs_raw at {last.n} over at {first.n} (each paired with the bare loop)",
        )
        idle = max(p.idle_cpu_pct for p in points)
        rows.add("idle_cpu.max", idle, "%", target="< 1 %", ok=idle < 1.0, note="host, any count")
        with rows.guard("plot"):
            plot(points, PNG)
            print(f"curves plotted to {PNG}", file=sys.stderr)
    return rows.rows


if __name__ == "__main__":
    main(measure)
