"""Start-up and stop of extensions with corral, against the same extensions started directly.

Every row compares like with like: corral with ``--sandbox off`` (its own cost;
the sandbox's is ``bench_sandbox``) against the same lean SDK extensions
(``_exts.LEAN``) started by ``subprocess.Popen`` in sessions of their own, each
repetition measuring both, alternating; ratios are medians of the per-repetition
ratios.

* ``ready<N>``: entering ``open_supervisor`` until all N sent ``ready``, against
  starting the N directly until each printed its ``ready`` frame;
* ``ready1_first``: the first start in a fresh host process, which also starts
  the sandbox's guardian (once per process), against the first direct start in a
  fresh process;
* ``stop50``: leaving ``open_supervisor`` (the shutdown ladder for all, the sweep
  of leftovers) against closing the stdin of the 50 and waiting for all.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import trio
from _common import Row, Rows, main, median, quiet_logging
from _exts import StartStop, config, direct_lean, first_start, lean_dirs, start_stop


def _ratio_rows(
    rows: Rows, case: str, ours: list[float], theirs: list[float], target: float | None, what: str
) -> None:
    rows.add(f"{case}", median(ours) * 1000, "ms", note=f"corral: {what}")
    rows.add(
        f"{case}_direct", median(theirs) * 1000, "ms", note=f"the same, started directly: {what}"
    )
    r = median([a / b for a, b in zip(ours, theirs, strict=True)])
    note = f"paired, median of {len(ours)} alternating repetitions"
    if target is None:
        rows.add(f"{case}_vs_direct", r, "×", note=note)
    else:
        rows.add(f"{case}_vs_direct", r, "×", target=f"≤ {target:g}", ok=r <= target, note=note)


def measure(quick: bool) -> list[Row]:
    """Spawn-to-ready of 1, 10 and 50 extensions, stop of 50, and their direct twins."""
    quiet_logging()
    reps = 3 if quick else 9
    big = 5 if quick else 50
    rows = Rows("spawn")
    with tempfile.TemporaryDirectory(prefix="corral-bench-spawn-") as tmp:
        root = Path(tmp)
        paths = lean_dirs(root, [f"ext{i:02d}" for i in range(big)])
        cfg = config(root)
        trio.run(start_stop, paths[:1], cfg)  # warm-up: imports, the guardian, caches
        direct_lean(paths[:1])
        for n in sorted({1, 10, big}):
            with rows.guard(f"ready{n}"):
                ours: list[StartStop] = []
                theirs: list[tuple[float, float]] = []
                # 50 at once swing with the machine's load: 7 pairs keep the median steady.
                for _ in range(reps if n < big else (3 if quick else 7)):
                    ours.append(trio.run(start_stop, paths[:n], cfg))
                    theirs.append(direct_lean(paths[:n]))
                short = [r.running for r in ours if r.running != n]
                what = f"{n} lean SDK extension{'s' if n > 1 else ''} at once"
                if short:
                    what += f"; only {short} running"
                target = {1: 1.1, big: 1.2}.get(n)
                _ratio_rows(
                    rows,
                    f"ready{n}",
                    [r.ready_s for r in ours],
                    [d[0] for d in theirs],
                    target,
                    what,
                )
                if n == big:
                    alive = sum(r.left_alive for r in ours)
                    _ratio_rows(
                        rows,
                        f"stop{n}",
                        [r.stop_s for r in ours],
                        [d[1] for d in theirs],
                        1.1,
                        f"{n} cooperative: shutdown ladder and sweep vs close stdin, wait all; "
                        f"{alive} left alive",
                    )
        with rows.guard("ready1_first"):
            ours_f, theirs_f = [], []
            for _ in range(reps):
                ours_f.append(first_start(paths[:1], root, "off"))
                theirs_f.append(first_start(paths[:1], root, "direct"))
            _ratio_rows(
                rows,
                "ready1_first",
                ours_f,
                theirs_f,
                None,
                "the first start of a fresh host process (the guardian starts too)",
            )
    return rows.rows


if __name__ == "__main__":
    main(measure)
