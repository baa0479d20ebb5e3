"""Side by side: the same figures from corral and from other implementations, paired.

    python bench/sidebyside.py                    # bare loop and corral, every figure
    python bench/sidebyside.py --quick            # 3 repetitions (a smoke test)
    python bench/sidebyside.py --only ready10 rss10 --reps 9
    python bench/sidebyside.py --driver go='/path/to/go-driver'   # a third column
    python bench/sidebyside.py --only ready1 stop1 --inner 15      # 15 in each process

Each implementation is a *driver* (``bench/drivers/``, or any command given with
``--driver NAME=COMMAND``) that measures one figure per run in a fresh process
and prints one JSON line (the protocol is in ``bench/_sidebyside.py``). Every
repetition runs every driver once per figure, seconds apart, in an order that
alternates between repetitions; a figure's value is the median over the
repetitions, and ``corral_vs_<peer>`` is the median of the per-repetition ratios
(for ``rss10``, ``corral_minus_<peer>``: the median of the differences, in MiB);
against a third implementation, ``bare_vs_<peer>`` too: where a trio + msgspec
host itself stands.
Prints one table (a column per driver) with the load average before and after,
and writes the rows as JSON (``bench/results/sidebyside.json``, ``--json PATH``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from _common import ROOT, Row, compile_sdk, format_table, median, write_rows
from _sidebyside import FIGURES

HERE = Path(__file__).resolve().parent
#: The drivers in the repository: the bare trio + msgspec loop, then corral.
BUILTIN = {
    "bare": [sys.executable, str(HERE / "drivers" / "bare.py")],
    "corral": [sys.executable, str(HERE / "drivers" / "corral.py")],
}
#: corral's own memory over the bare loop's with 10 extensions (issue 29), in MiB.
RSS_SHARE_TARGET = 4.0


class DriverFailed(RuntimeError):
    """A driver's run that exited with an error or printed no value."""

    def __init__(self, argv: list[str], figure: str, returncode: int, stderr: str) -> None:
        super().__init__(f"{shlex.join(argv)} {figure}: exit {returncode}: {stderr[-500:]}")
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        #: Its last line on stderr, printable (a driver is a program of someone else's).
        self.why = "".join(c for c in (lines[-1] if lines else "") if c.isprintable())
        self.returncode = returncode


def run_driver(argv: list[str], figure: str) -> tuple[float, list[str]]:
    """One measurement: the driver's last JSON line's ``value``, and what it said on
    stderr (printable lines: a driver is a program of someone else's)."""
    out = subprocess.run(
        [*argv, figure], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        raise DriverFailed(argv, figure, out.returncode, out.stderr)
    said = ["".join(c for c in line if c.isprintable()) for line in out.stderr.splitlines()]
    return float(json.loads(lines[-1])["value"]), [line for line in said if line.strip()]


def _inner(figure: str) -> str:
    """What one run's value of ``figure`` is, when ``--inner`` made it a median."""
    inner = int(os.environ.get("SBS_INNER", "1"))
    if inner > 1 and (figure.startswith("ready") or figure == "stop1"):
        return f" runs, each the median of {inner}"
    return ""


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(
    drivers: dict[str, list[str]], figures: list[str], reps: int, said: dict[str, list[str]]
) -> list[Row]:
    """Every figure from every driver, ``reps`` alternating repetitions; what each run
    said on stderr goes to ``said`` (by ``figure.driver``)."""
    rows: list[Row] = []
    names = list(drivers)
    for figure in figures:
        load_before = _load()
        got: dict[str, list[float]] = {name: [] for name in names}
        for rep in range(reps):
            order = names if rep % 2 == 0 else names[::-1]
            for name in order:
                try:
                    value, lines = run_driver(drivers[name], figure)
                except DriverFailed as exc:
                    # Once: a run can fail for the driver's own reasons (the Go
                    # reference's, now and then, loses an extension of ten). The
                    # failure is shown with what the drivers said; a second one ends it.
                    why = f"a run failed (exit {exc.returncode}), repeated: {exc.why}"
                    said.setdefault(f"{figure}.{name}", []).append(why)
                    value, lines = run_driver(drivers[name], figure)
                got[name].append(value)
                said.setdefault(f"{figure}.{name}", []).extend(lines)
        load = f"load {load_before} before, {_load()} after"
        unit = FIGURES[figure]
        for name in names:
            rows.append(
                Row(
                    bench="sidebyside",
                    case=f"{figure}.{name}",
                    value=median(got[name]),
                    unit=unit,
                    note=f"median of {reps}{_inner(figure)}; {load}",
                )
            )
        if "corral" not in got:
            continue
        for peer in names:
            if peer == "corral":
                continue
            pairs = list(zip(got["corral"], got[peer], strict=True))
            if figure == "rss10":
                share = median([a - b for a, b in pairs])
                ok = share <= RSS_SHARE_TARGET if peer == "bare" else None
                rows.append(
                    Row(
                        bench="sidebyside",
                        case=f"{figure}.corral_minus_{peer}",
                        value=share,
                        unit="MiB",
                        target=f"≤ {RSS_SHARE_TARGET:g}" if peer == "bare" else None,
                        ok=ok,
                        note=f"paired differences, median of {reps}; {load}",
                    )
                )
                continue
            # Against a third implementation, the bare loop's ratio too: the floor of a
            # trio + msgspec host, which corral's own share is measured over.
            for ours in ("corral", "bare") if peer != "bare" and "bare" in got else ("corral",):
                pairs = list(zip(got[ours], got[peer], strict=True))
                rows.append(
                    Row(
                        bench="sidebyside",
                        case=f"{figure}.{ours}_vs_{peer}",
                        value=median([a / b for a, b in pairs]),
                        unit="×",
                        note=f"paired ratios ({ours} / {peer}), median of {reps}; {load}",
                    )
                )
    return rows


def side_by_side(rows: list[Row], names: list[str]) -> str:
    """The issue's shape: one line per figure, one column per driver."""
    by = {r.case: r for r in rows}
    head = ["figure", *names, "corral vs bare"]
    lines = []
    for figure, unit in FIGURES.items():
        if f"{figure}.{names[0]}" not in by:
            continue
        cells = [f"{figure} ({unit})"]
        cells += [f"{by[f'{figure}.{n}'].value:,.1f}" for n in names]
        ratio = by.get(f"{figure}.corral_vs_bare") or by.get(f"{figure}.corral_minus_bare")
        cells.append("" if ratio is None else f"{ratio.value:.2f} {ratio.unit}")
        lines.append(cells)
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(x, widths, strict=True)) for x in [head, *lines]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repetitions")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 5)")
    parser.add_argument("--only", nargs="+", choices=list(FIGURES), help="these figures")
    parser.add_argument(
        "--driver",
        action="append",
        default=[],
        metavar="NAME=COMMAND",
        help="another implementation: a command that speaks the driver protocol",
    )
    parser.add_argument(
        "--inner",
        type=int,
        default=1,
        metavar="K",
        help="measure each start and stop figure K times per driver run, report the median",
    )
    parser.add_argument("--json", type=Path, default=HERE / "results" / "sidebyside.json")
    args = parser.parse_args()
    if args.inner < 1:
        parser.error("--inner wants a count of at least 1")
    os.environ["SBS_INNER"] = str(args.inner)  # the drivers' (see bench/_sidebyside.py)
    drivers = dict(BUILTIN)
    for spec in args.driver:
        name, sep, command = spec.partition("=")
        if not sep or not name or not command:
            parser.error(f"--driver wants NAME=COMMAND, not {spec!r}")
        drivers[name] = shlex.split(command)
    reps = args.reps or (3 if args.quick else 5)
    compile_sdk()  # the SDK's bytecode, as an installed corral has it
    before = _load()
    t0 = time.monotonic()
    said: dict[str, list[str]] = {}
    rows = measure(drivers, args.only or list(FIGURES), reps, said)
    machine = f"load average (1/5/15 min): before {before}, after {_load()}; {os.cpu_count()} cores"
    rows.append(
        Row(bench="machine", case="loadavg", value=os.getloadavg()[0], unit="", note=machine)
    )
    write_rows(args.json, rows)
    print(side_by_side(rows, list(drivers)))
    print()
    print(format_table(rows))
    if any(said.values()):
        print("\nWhat the drivers said on stderr (each run, in order):")
        for case, lines in said.items():
            for line in lines[:10]:
                print(f"  {case}: {line[:300]}")
            if len(lines) > 10:
                print(f"  {case}: ... and {len(lines) - 10} more lines")
    print(f"\n{machine}; {time.monotonic() - t0:.0f} s; JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
