"""What checking trust costs at start-up: digesting an extension's directory.

Every ``corral run``/``chat``/``rpc`` digests each project-local and installed
extension before starting any, and the supervisor again before each spawn.

* ``<example>.cold``: the first digest in a process (files read and hashed; the
  page cache is warm, as it is on a machine that just ran corral);
* ``<example>.warm``: the next one, where unchanged files are known by their stat
  (the supervisor's check after the CLI's, and every restart);
* ``files1000.*``: a directory of 1,000 files (4 MiB in all, 140 directories),
  like an extension with its ``node_modules``;
* ``verify.examples``: ``TrustStore.verify`` of all five examples (digest, store
  read, comparison), warm: what a start-up with them adds.

Files are written 2.5 s before they are measured, so the warm rows see the
in-process memory (files changed within 2 s are always hashed again). Figures
are medians, in milliseconds.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from _common import ROOT, Row, Rows, main, median

import supervisor._digest as digest_mod
from supervisor import TrustStore, load_manifest
from supervisor.lowlevel import digest_tree

EXAMPLES = ROOT / "examples" / "extensions"


def _many(root: Path, count: int) -> Path:
    rng = random.Random(7)
    for i in range(count):
        d = root / f"pkg{i % 20}" / f"sub{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.js").write_bytes(rng.randbytes(rng.randint(200, 8000)))
    return root


def _time(directory: Path, reps: int) -> tuple[float, float]:
    cold, warm = [], []
    for _ in range(reps):
        digest_mod._cache.clear()
        t0 = time.perf_counter()
        digest_tree(str(directory))
        cold.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        digest_tree(str(directory))
        warm.append(time.perf_counter() - t0)
    return median(cold) * 1000, median(warm) * 1000


def measure(quick: bool) -> list[Row]:
    """Digest times of the examples and of 1,000 files, cold and warm."""
    reps = 5 if quick else 31
    rows = Rows("trust")
    with tempfile.TemporaryDirectory(prefix="corral-bench-trust-") as tmp:
        root = Path(tmp)
        # Copies, so their files are old enough to be remembered.
        examples = []
        for src in sorted(EXAMPLES.iterdir()):
            dest = root / "examples" / src.name
            dest.mkdir(parents=True)
            for f in src.iterdir():
                if f.is_file():
                    (dest / f.name).write_bytes(f.read_bytes())
                    (dest / f.name).chmod(f.stat().st_mode)
            examples.append(dest)
        many = _many(root / "files1000", 1000)
        # Past the "racy" window (judged by ctime, which no utime can set back).
        time.sleep(digest_mod._RACY_NS / 1e9 + 0.5)
        for d in examples:
            with rows.guard(f"{d.name}.cold"):
                cold, warm = _time(d, reps)
                tree = digest_tree(str(d))
                note = f"{tree.files} files, {tree.bytes} bytes"
                rows.add(f"{d.name}.cold", cold, "ms", note=note)
                rows.add(f"{d.name}.warm", warm, "ms", note=note)
        with rows.guard("files1000.cold"):
            cold, warm = _time(many, max(3, reps // 3))
            tree = digest_tree(str(many))
            note = f"{tree.files} files, {tree.bytes / 2**20:.1f} MiB"
            rows.add("files1000.cold", cold, "ms", note=note)
            rows.add("files1000.warm", warm, "ms", note=note)
        with rows.guard("verify.examples"):
            store = TrustStore(root / "home")
            specs = [load_manifest(d, "project", home=str(root / "home")) for d in examples]
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                for spec in specs:
                    store.verify(spec)
                times.append(time.perf_counter() - t0)
            rows.add("verify.examples", median(times) * 1000, "ms", note=f"{len(specs)} extensions")
    return rows.rows


if __name__ == "__main__":
    main(measure)
