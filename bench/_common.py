"""Shared plumbing of the benchmarks: the row format, the table, the command line.

Every ``bench/bench_*.py`` module measures something and returns a list of
:class:`Row`; :func:`main` gives it the same command line (``--json-out PATH``,
``--quick``), writes the rows as JSON and prints them as a table. ``bench/run.py``
runs every module as a subprocess and prints one table of all their rows.
"""

from __future__ import annotations

import argparse
import compileall
import inspect
import math
import statistics
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import trio

__all__ = [
    "ROOT",
    "Row",
    "Rows",
    "compile_sdk",
    "format_table",
    "main",
    "median",
    "read_rows",
    "stopwatch",
    "write_rows",
]

#: The repository root, so bench modules can import the packages when run as scripts.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Appended, not prepended: an explicit PYTHONPATH (e.g. a temporary shim) wins.
    sys.path.append(str(ROOT))

from supervisor.lowlevel import SDK_DIR  # noqa: E402 (needs the path above when run as a script)


class Row(msgspec.Struct, frozen=True, kw_only=True):
    """One measurement. ``ok`` is None when the row has no target."""

    bench: str
    case: str
    value: float
    unit: str
    target: str | None = None
    ok: bool | None = None
    note: str = ""


_rows_decoder = msgspec.json.Decoder(list[Row])


def write_rows(path: Path, rows: Sequence[Row]) -> None:
    """Write ``rows`` as an indented JSON list."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(msgspec.json.format(msgspec.json.encode(list(rows)), indent=2) + b"\n")


def read_rows(path: Path) -> list[Row]:
    """Read rows written by :func:`write_rows`."""
    return _rows_decoder.decode(path.read_bytes())


class Rows:
    """Collects the rows of one bench module."""

    def __init__(self, bench: str) -> None:
        self.bench = bench
        self.rows: list[Row] = []

    def add(
        self,
        case: str,
        value: float,
        unit: str,
        *,
        target: str | None = None,
        ok: bool | None = None,
        note: str = "",
    ) -> float:
        """Record a row; returns ``value`` so ratios can be built from it.

        A value that is not finite (JSON has no inf or nan) is recorded as 0, failed.
        """
        if not math.isfinite(value):
            value, ok, note = 0.0, False, f"{note}; not finite: {value}".lstrip("; ")
        self.rows.append(
            Row(
                bench=self.bench,
                case=case,
                value=float(value),
                unit=unit,
                target=target,
                ok=ok,
                note=note,
            )
        )
        return value

    def fail(self, case: str, exc: BaseException) -> None:
        """Record that measuring ``case`` raised ``exc`` (a failed row, value 0)."""
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        self.rows.append(
            Row(bench=self.bench, case=case, value=0.0, unit="", ok=False, note=f"error: {last}")
        )

    @contextmanager
    def guard(self, case: str) -> Iterator[None]:
        """Turn an exception in the block into a failed row instead of a crash."""
        try:
            yield
        except Exception as exc:
            traceback.print_exc()
            self.fail(case, exc)


def quiet_logging() -> None:
    """structlog as the CLI configures it (loggers not cached), filtered to errors: a
    host logging to a file at warning level would barely differ. As the CLI does, the
    level is given to ``sandbox.log``, so calls below it never import structlog."""
    import logging

    from sandbox.log import configure_when_loaded

    def setup(structlog: Any) -> None:
        structlog.configure(
            wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
            logger_factory=structlog.PrintLoggerFactory(sys.stderr),
            cache_logger_on_first_use=False,
        )

    configure_when_loaded(setup, level=logging.ERROR)


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence."""
    return float(statistics.median(values))


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """``with stopwatch() as t: ...`` then ``t[0]`` is the elapsed wall time in seconds."""
    out: list[float] = []
    t0 = time.perf_counter()
    try:
        yield out
    finally:
        out.append(time.perf_counter() - t0)


def _fmt_value(v: float) -> str:
    if math.isnan(v) or math.isinf(v):
        return str(v)
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def format_table(rows: Sequence[Row]) -> str:
    """An aligned plain-text table of ``rows``."""
    head = ("bench", "case", "value", "unit", "target", "ok", "note")
    body = [
        (
            r.bench,
            r.case,
            _fmt_value(r.value),
            r.unit,
            r.target or "",
            "-" if r.ok is None else ("ok" if r.ok else "MISS"),
            r.note,
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head) - 1)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(w) if i == 2 else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=False))
        ]
        return "  ".join([*parts, cells[-1]]).rstrip()

    rule = "  ".join("-" * w for w in widths) + "  " + "-" * 4
    return "\n".join([line(head), rule, *(line(cells) for cells in body)])


def _summary() -> str:
    doc = sys.modules["__main__"].__doc__ or ""
    return doc.strip().split("\n\n")[0]


def compile_sdk() -> None:
    """Compile the stdlib-only SDK beside it, as ``pip install`` does for an installed
    corral: a source checkout has no bytecode, and extensions never write any."""
    compileall.compile_dir(SDK_DIR, quiet=1)


def main(measure: Callable[[bool], list[Row] | Awaitable[list[Row]]]) -> None:
    """Command line of a bench module: run ``measure(quick)``, write JSON, print the table.

    ``measure`` may be a plain function or an async one (then run under ``trio.run``).
    The SDK is compiled first (:func:`compile_sdk`).
    """
    compile_sdk()
    parser = argparse.ArgumentParser(description=_summary())
    parser.add_argument("--json-out", type=Path, help="write the rows here as JSON")
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke test)")
    args = parser.parse_args()
    if inspect.iscoroutinefunction(measure):
        rows = trio.run(measure, args.quick)
    else:
        result = measure(args.quick)
        assert isinstance(result, list)
        rows = result
    if args.json_out is not None:
        write_rows(args.json_out, rows)
    print(format_table(rows))
