"""Run every benchmark and print one table: ``python bench/run.py [--quick] [--only NAME ...]``.

Each ``bench/bench_<name>.py`` runs as its own subprocess (same interpreter) with
``--json-out <tmpfile>`` and writes a JSON list of rows; a module that crashes,
times out or writes nothing becomes one failed row. The combined rows are printed
as a table, with the machine's load average before and after beside it (figures
from a busy machine say so), then as JSON, and written to ``--json`` (default
``bench/results/latest.json``). See ``bench/README.md`` for what each row compares.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
from _common import Row, format_table, read_rows, write_rows

HERE = Path(__file__).resolve().parent
#: Per-module wall-clock limits; a full run of everything should take a few minutes.
TIMEOUT_FULL = 600.0
TIMEOUT_QUICK = 120.0
#: Modules that need longer: the soak drives 3,000 prompts; ``batch`` times 200
#: ``corral run`` processes, twice.
TIMEOUTS_FULL = {"soak": 3600.0, "batch": 2400.0}
TIMEOUTS_QUICK = {"batch": 900.0}


def modules(only: list[str] | None) -> list[Path]:
    """The bench modules to run, in name order, filtered by ``--only`` names."""
    found = sorted(HERE.glob("bench_*.py"))
    if not only:
        return found
    names = {p.stem.removeprefix("bench_"): p for p in found}
    unknown = [n for n in only if n.removeprefix("bench_") not in names]
    if unknown:
        raise SystemExit(f"unknown bench: {', '.join(unknown)} (have: {', '.join(sorted(names))})")
    return [names[n.removeprefix("bench_")] for n in only]


def _failed(name: str, note: str, seconds: float) -> Row:
    return Row(bench=name, case="(run)", value=seconds, unit="s", ok=False, note=note)


def run_module(path: Path, *, quick: bool) -> list[Row]:
    """Run one bench module; its rows, or one failed row saying what went wrong."""
    name = path.stem.removeprefix("bench_")
    timeout = (TIMEOUTS_QUICK if quick else TIMEOUTS_FULL).get(
        name, TIMEOUT_QUICK if quick else TIMEOUT_FULL
    )
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        out = Path(tmp) / "rows.json"
        argv = [sys.executable, str(path), "--json-out", str(out), *(["--quick"] if quick else [])]
        print(f"running {path.name}{' --quick' if quick else ''} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            sys.stderr.write(_text(exc.stderr))
            return [_failed(name, f"timed out after {timeout:g} s", timeout)]
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0 or not out.exists():
            sys.stderr.write(proc.stderr)
            lines = proc.stderr.strip().splitlines()
            last = lines[-1] if lines else ""
            return [_failed(name, f"exit status {proc.returncode}: {last}", elapsed)]
        try:
            rows = read_rows(out)
        except (msgspec.DecodeError, OSError) as exc:
            return [_failed(name, f"unreadable rows: {exc}", elapsed)]
        if any(r.ok is False for r in rows):
            # A missed target or a failed case: its stderr may say why.
            sys.stderr.write(proc.stderr)
        print(f"  {path.name}: {len(rows)} rows in {elapsed:.1f} s", file=sys.stderr)
        return rows


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def main() -> int:
    """Parse the command line, run the modules, print and save the results."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke test)")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="run only these (e.g. supervisor rpc)"
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=HERE / "results" / "latest.json",
        help="where to write the combined rows (default: bench/results/latest.json)",
    )
    args = parser.parse_args()
    rows: list[Row] = []
    before = os.getloadavg()
    for path in modules(args.only):
        rows += run_module(path, quick=args.quick)
    after = os.getloadavg()
    cores = os.cpu_count() or 1
    for when, load in (("before", before), ("after", after)):
        shown = " ".join(f"{x:.2f}" for x in load)
        note = f"1/5/15-minute load average {when} the run: {shown} ({cores} cores)"
        rows.append(Row(bench="machine", case=f"loadavg.{when}", value=load[0], unit="", note=note))
    write_rows(args.json, rows)
    print(
        "load average (1/5/15 min): before "
        + " ".join(f"{x:.2f}" for x in before)
        + ", after "
        + " ".join(f"{x:.2f}" for x in after)
        + f" ({cores} cores)"
    )
    print(format_table(rows))
    print()
    print(args.json.read_text(), end="")
    return 1 if any(r.case == "(run)" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
