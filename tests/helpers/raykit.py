"""A real two-node Ray cluster for the batch tests, on loopback only.

Ray is started only inside private network and pid namespaces made by bwrap
(``--unshare-net --unshare-pid``, plus ``--unshare-user`` when not root): the
network namespace holds nothing but loopback, so nothing Ray does reaches another
address, and when the harness (``tests/agent/fixtures/ray_cluster.py``, the
namespace's first process after bwrap's) exits, the kernel ends every process of
the cluster. The harness itself refuses to start Ray anywhere else.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers.paths import TESTS

HARNESS = TESTS / "agent" / "fixtures" / "ray_cluster.py"


def private_namespaces() -> list[str]:
    """The bwrap command that runs a program in fresh network and pid namespaces."""
    bwrap = shutil.which("bwrap")
    assert bwrap, "bwrap is needed to give Ray a private network namespace"
    user = [] if os.geteuid() == 0 else ["--unshare-user"]
    return [
        bwrap,
        *user,
        "--unshare-net",
        "--unshare-pid",
        "--die-with-parent",
        "--dev-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--",
    ]


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
        *private_namespaces(),
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
