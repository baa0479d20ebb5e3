"""The driver protocol of ``bench/sidebyside.py``: what every driver shares.

A driver is any program that, run as ``DRIVER FIGURE``, measures that one figure
once in a fresh process and prints, as the last line of its standard output, one
JSON object: ``{"value": <number>, "unit": "<unit>"}``. The figures:

* ``ready1``, ``ready10``, ``ready50``: milliseconds from starting N lean
  extensions at once until every one sent ``ready`` (after a warm-up start of one,
  so that a helper process such as corral's guardian is already up);
* ``stop1``: milliseconds to stop one cooperative extension (it exits when its
  stdin closes) and know it exited;
* ``rss10``: the host's resident memory in MiB with 10 lean extensions ready;
* ``seq``: calls per second, one at a time, ``N_CALLS`` echo calls;
* ``concurrent8``, ``concurrent32``, ``concurrent64``: calls per second with that
  many in flight.

``SBS_INNER=K`` in the environment (``sidebyside.py --inner K``) asks for the start
and stop figures (``ready*``, ``stop1``) to be measured K times in the one process,
back to back (each start followed by its stop, no pause), and reported as the
median: a single start of ~30 ms varies by tens of percent on a busy machine, and
the repetitions of one process share its warm-up. The other figures ignore it.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Awaitable, Callable

__all__ = ["FIGURES", "INNER", "N_CALLS", "figure_main", "inner_median", "rss_mib"]

#: Calls per throughput figure.
N_CALLS = 6000
#: Every figure, in table order, with its unit.
FIGURES = {
    "ready1": "ms",
    "ready10": "ms",
    "ready50": "ms",
    "stop1": "ms",
    "rss10": "MiB",
    "seq": "calls/s",
    "concurrent8": "calls/s",
    "concurrent32": "calls/s",
    "concurrent64": "calls/s",
}


#: How many times a start or stop figure is measured in one process (``SBS_INNER``).
INNER = max(1, int(os.environ.get("SBS_INNER", "1")))


async def inner_median(once: Callable[[], Awaitable[float]]) -> float:
    """The median of :data:`INNER` measurements by ``once``, one after the other."""
    return statistics.median([await once() for _ in range(INNER)])


def rss_mib() -> float:
    """This process's resident memory (MiB), from ``/proc/self/status``."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def figure_main(measure: Callable[[str], tuple[float, str]]) -> None:
    """A driver's command line: ``DRIVER FIGURE`` prints the JSON line."""
    import sys

    if len(sys.argv) != 2 or sys.argv[1] not in FIGURES:
        raise SystemExit(f"usage: {sys.argv[0]} FIGURE (one of {', '.join(FIGURES)})")
    value, unit = measure(sys.argv[1])
    print(json.dumps({"value": value, "unit": unit}), flush=True)
