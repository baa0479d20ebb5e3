"""Compare the tracemalloc snapshots of a soak run: what grew between two of them.

``python bench/soak_trace.py DIR [FIRST LAST] [--top N]`` loads ``DIR/snap-*.pickle``
(written by ``bench_soak.py`` with ``CORRAL_SOAK_TRACE=DIR``), compares the
``LAST`` with the ``FIRST`` (default: the second and the last, the first being the
warm-up), grouped by traceback, and prints the sites whose size grew most, with
their size and count in both, and the totals. tracemalloc's own bookkeeping is
filtered out.
"""

from __future__ import annotations

import argparse
import sys
import tracemalloc
from pathlib import Path

_SKIP = [
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
]


def _load(path: Path) -> tracemalloc.Snapshot:
    return tracemalloc.Snapshot.load(str(path)).filter_traces(_SKIP)


def _where(stat: tracemalloc.StatisticDiff, depth: int) -> str:
    """The allocating frames, most recent first (trio's own frames left out)."""
    recent = list(reversed(stat.traceback))
    frames = [f for f in recent if "site-packages/trio/" not in f.filename][:depth]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in frames or recent[:depth])


def main() -> int:
    """Parse the command line and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("first", nargs="?", type=int, help="snapshot number (default: 2)")
    parser.add_argument("last", nargs="?", type=int, help="snapshot number (default: the last)")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--depth", type=int, default=4, help="frames shown per site")
    args = parser.parse_args()
    snaps = sorted(args.dir.glob("snap-*.pickle"))
    if len(snaps) < 2:
        print(f"{args.dir}: fewer than two snapshots", file=sys.stderr)
        return 1
    first = snaps[(args.first or 2) - 1] if len(snaps) > 2 or args.first else snaps[0]
    last = snaps[(args.last or len(snaps)) - 1]
    old, new = _load(first), _load(last)
    diff = new.compare_to(old, "traceback")
    total_old = sum(s.size for s in old.statistics("filename"))
    total_new = sum(s.size for s in new.statistics("filename"))
    print(
        f"{first.name} -> {last.name}: traced {total_old / 1024:.1f} -> "
        f"{total_new / 1024:.1f} KiB ({(total_new - total_old) / 1024:+.1f} KiB)"
    )
    for stat in diff[: args.top]:
        print(
            f"{stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks "
            f"(now {stat.size / 1024:8.1f} KiB in {stat.count:6d})  {_where(stat, args.depth)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
