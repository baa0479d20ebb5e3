"""What ``corral batch`` shows while it runs and when it ends.

Three forms, one interface (:class:`BatchView`):

* on a terminal (stderr): a live progress bar (done, failed, rate, time left) with
  the failures printed above it as they come, then a summary table;
* elsewhere: one plain line per finished task, then the summary as plain lines;
* ``--json``: one JSON object per line on stdout (``result`` per task, ``note``,
  then ``summary``), nothing else.

Task ids, answers and errors come from the tasks file, models and extensions:
every one is made terminal-safe (:func:`~.safe_text.visible`) before it is shown
to a person; JSON output carries them exact.
"""

from __future__ import annotations

import sys
import time
import typing
from collections import Counter
from typing import Any, TextIO

import msgspec

from ..batch import Result, Status
from .safe_text import visible
from .screen import make_console
from .term import is_terminal

if typing.TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["BatchView", "Summary"]

_encoder = msgspec.json.Encoder()
#: Characters of an error shown on a progress line.
_EXCERPT = 160


class Summary(msgspec.Struct, kw_only=True):
    """The numbers of a batch run (the ``summary`` object of ``--json``)."""

    type: str = "summary"
    total: int = 0
    done: int = 0
    error: int = 0
    timeout: int = 0
    cancelled: int = 0
    #: Tasks with a result from an earlier run (``--resume``), not run again.
    skipped: int = 0
    #: Invalid lines left out (``--skip-invalid``).
    invalid: int = 0
    #: Tasks neither run nor skipped (the batch was stopped first).
    not_run: int = 0
    seconds: float = 0.0
    sessions_per_second: float = 0.0
    extension_crashes: int = 0
    extension_restarts: int = 0
    quarantined: int = 0
    output: str = ""
    transcripts: str | None = None
    #: The signal that stopped the batch, if one did.
    stopped_by: str | None = None


def _short(text: str | None) -> str:
    one = visible(text or "")
    return one if len(one) <= _EXCERPT else one[: _EXCERPT - 1] + "…"


@typing.final
class BatchView:
    """Shows a batch's progress; feed it every result, then :meth:`finish`."""

    def __init__(self, total: int, *, as_json: bool, stream: TextIO | None = None) -> None:
        self.total = total
        self.as_json = as_json
        self.stream = stream or sys.stderr
        self.counts: Counter[Status] = Counter()
        self.crashes = self.restarts = self.quarantined = 0
        self._started = time.monotonic()
        self._progress: Progress | None = None
        self._bar: TaskID | None = None
        self._console: Any = None
        if not as_json and is_terminal(self.stream):
            self._start_bar()

    def __repr__(self) -> str:
        return f"<BatchView {sum(self.counts.values())}/{self.total} json={self.as_json}>"

    def _start_bar(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._console = make_console(self.stream)
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("[red]{task.fields[failed]} failed"),
            TextColumn("{task.fields[rate]}/s"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self._console,
            transient=True,
        )
        self._bar = self._progress.add_task("sessions", total=self.total, failed=0, rate="-")
        self._progress.start()

    @property
    def finished(self) -> int:
        """Results shown so far."""
        return sum(self.counts.values())

    @property
    def failed(self) -> int:
        """Results that are not ``done``."""
        return self.finished - self.counts[Status.DONE]

    def rate(self) -> float:
        """Sessions per second so far."""
        elapsed = time.monotonic() - self._started
        return self.finished / elapsed if elapsed > 0 else 0.0

    def _json(self, obj: Any) -> None:
        sys.stdout.buffer.write(_encoder.encode(obj) + b"\n")
        sys.stdout.flush()

    def note(self, text: str) -> None:
        """A line of corral's own (already safe, or made so here)."""
        if self.as_json:
            self._json({"type": "note", "message": text})
        elif self._progress is not None:
            self._progress.console.print(visible(text))
        else:
            print(visible(text), file=self.stream, flush=True)

    def result(self, result: Result) -> None:
        """Count and show one result."""
        self.counts[result.status] += 1
        for ext in result.extensions:
            self.crashes += ext.crashes
            self.restarts += ext.restarts
            self.quarantined += ext.quarantined
        if self.as_json:
            self._json(
                {
                    "type": "result",
                    "id": result.id,
                    "status": result.status.value,
                    "duration": result.duration,
                    "error": result.error,
                    "finished": self.finished,
                    "total": self.total,
                }
            )
            return
        line = (
            f"[{self.finished}/{self.total}] {result.status.value:<9} {_short(result.id)} "
            f"({result.duration:.2f} s)"
        )
        if result.error:
            line += f": {_short(result.error)}"
        if self._progress is not None and self._bar is not None:
            if result.status is not Status.DONE:
                self._progress.console.print(line)
            self._progress.update(
                self._bar, advance=1, failed=self.failed, rate=f"{self.rate():.1f}"
            )
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        """Take the progress bar down (idempotent)."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def finish(self, summary: Summary) -> None:
        """Take the progress bar down and show the summary."""
        self.close()
        summary.seconds = round(time.monotonic() - self._started, 3)
        summary.sessions_per_second = round(self.rate(), 3)
        summary.done = self.counts[Status.DONE]
        summary.error = self.counts[Status.ERROR]
        summary.timeout = self.counts[Status.TIMEOUT]
        summary.cancelled = self.counts[Status.CANCELLED]
        summary.extension_crashes = self.crashes
        summary.extension_restarts = self.restarts
        summary.quarantined = self.quarantined
        if self.as_json:
            self._json(summary)
            return
        rows = [
            ("done", str(summary.done)),
            ("error", str(summary.error)),
            ("timeout", str(summary.timeout)),
            ("cancelled", str(summary.cancelled)),
        ]
        if summary.skipped:
            rows.append(("skipped (in the output already)", str(summary.skipped)))
        if summary.invalid:
            rows.append(("invalid lines left out", str(summary.invalid)))
        if summary.not_run:
            rows.append(("not run", str(summary.not_run)))
        rows += [
            ("time", f"{summary.seconds:.1f} s ({summary.sessions_per_second:.2f} sessions/s)"),
            (
                "extensions",
                f"{summary.extension_crashes} crashes, {summary.extension_restarts} restarts, "
                f"{summary.quarantined} quarantined",
            ),
            ("results", visible(summary.output)),
        ]
        if summary.transcripts:
            rows.append(("transcripts", visible(summary.transcripts)))
        if self._console is not None:
            from rich.table import Table

            table = Table(title="corral batch", show_header=False, title_justify="left")
            table.add_column(style="bold")
            table.add_column()
            for label, value in rows:
                table.add_row(label, value)
            self._console.print(table)
        else:
            for label, value in rows:
                print(f"{label}: {value}", file=self.stream)
        if summary.cancelled or summary.not_run:
            self.note("stopped before the end: `corral batch ... --resume` runs what is left")
