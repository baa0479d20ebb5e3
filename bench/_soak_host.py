"""``corral`` under ``tracemalloc``, for bench_soak's allocation comparison.

Started as ``python bench/_soak_host.py rpc ...`` with ``CORRAL_SOAK_TRACE=DIR``:
traces allocations with 25 frames and, on each SIGUSR1, collects garbage and dumps
a snapshot to ``DIR/snap-<n>.pickle``. ``bench/soak_trace.py DIR`` compares them.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType

_WHERE = Path(os.environ["CORRAL_SOAK_TRACE"])
_taken = [0]


def _dump(signum: int, frame: FrameType | None) -> None:
    # Runs between two bytecodes of the main thread, like any Python signal handler:
    # the host pauses for the time of the dump.
    _taken[0] += 1
    gc.collect()
    tracemalloc.take_snapshot().dump(str(_WHERE / f"snap-{_taken[0]:03d}.pickle"))


if __name__ == "__main__":
    _WHERE.mkdir(parents=True, exist_ok=True)
    tracemalloc.start(25)
    signal.signal(signal.SIGUSR1, _dump)
    from agent._cli.main import main

    sys.argv[0] = "corral"
    main()
