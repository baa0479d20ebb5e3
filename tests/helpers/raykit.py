"""A real two-node Ray cluster for the batch tests, on loopback only.

The harness (``tests/agent/fixtures/ray_cluster.py``) puts itself into private
network and pid namespaces made by bwrap before it starts Ray, and refuses to
start it anywhere else: nothing Ray does reaches an address but loopback, and when
the harness exits the kernel ends every process of the cluster.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers.paths import TESTS

HARNESS = TESTS / "agent" / "fixtures" / "ray_cluster.py"


def run_cluster(
    workdir: Path,
    tasks: Path,
    results: Path,
    *,
    kill_after: int = 0,
    batch_args: list[str] | None = None,
    timeout: float = 240,
) -> dict[str, Any]:
    """Start the cluster, run ``corral batch --ray`` on it, report (see the harness)."""
    argv = [
        sys.executable,
        str(HARNESS),
        str(workdir),
        str(tasks),
        str(results),
        "--kill-after",
        str(kill_after),
        "--",
        *(batch_args or []),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=workdir)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report
