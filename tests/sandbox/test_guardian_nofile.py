"""The host raises its own descriptor limit; the children it spawns keep the old one."""

from __future__ import annotations

import resource
import subprocess
import sys

from tests.helpers.paths import REPO

SCRIPT = """
import resource, subprocess, sys
from sandbox import LaunchPlan, spawn
probe = "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
plan = LaunchPlan(
    argv=[sys.executable, "-c", probe], env={}, cwd="/", backend="none", sandboxed=False
)
child = spawn(plan, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
out, _ = child.communicate(timeout=30)
print(out.decode().strip(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def _low_soft_limit() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))


def test_children_start_with_the_soft_limit_the_host_had() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        preexec_fn=_low_soft_limit,  # the test's own child, not corral's
    )
    child, host = (int(n) for n in done.stdout.split())
    assert child == 256
    wanted = 1 << 20 if hard == resource.RLIM_INFINITY else min(hard, 1 << 20)
    assert host == max(256, wanted)
