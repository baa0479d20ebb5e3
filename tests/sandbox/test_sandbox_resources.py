"""An extension cannot exhaust the machine's memory, processes or disk.

Limits are small here so the attacks hit them fast. Where the kernel enforces a
limit differently for a root host (cgroups) and an unprivileged one (rlimits in a
user namespace), both run; where the unprivileged fallback is weaker, the test
checks that the plan says so.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from helpers.sandbox_harness import World

MEMORY_MB = 128
#: Interpreter baseline plus one allocation step over the limit.
SLACK_MB = 24


def _allocated(report: dict[str, Any]) -> list[int]:
    return [int(n) for n in re.findall(r"allocated (\d+)", report["stdout"])]


def test_memory_of_one_process_is_limited(world: World) -> None:
    report = world.run(
        "eat_memory.py", "heap", "1024", permissions={"limits": {"memory_mb": MEMORY_MB}}
    )
    steps = _allocated(report)
    assert steps, report
    assert max(steps) <= MEMORY_MB + SLACK_MB, steps
    assert "reached cap" not in report["stdout"]


@pytest.mark.slow
def test_memory_of_the_whole_extension_is_limited(world: World) -> None:
    perms = {"limits": {"memory_mb": MEMORY_MB}}
    # Four processes of 64 MiB each: fine for per-process limits, twice the total.
    children = world.run("eat_memory.py", "children", str(4 * 64), permissions=perms)
    if not children["cgroups"]:
        # No cgroup for this host on this machine: memory is limited per process
        # only, and the plan must say so.
        assert any("per process" in note for note in children["notes"]), children["notes"]
        return
    assert children["stdout"].count("reached cap") < 4, children["stdout"]
    shared = world.run("eat_memory.py", "shared", "1024", permissions=perms)
    assert max(_allocated(shared) or [0]) <= MEMORY_MB + SLACK_MB, shared["stdout"][-200:]
    assert "reached cap" not in shared["stdout"]


@pytest.mark.parametrize("cgroups", [True, False], ids=["cgroup-if-any", "no-cgroup"])
def test_processes_are_limited(world: World, cgroups: bool) -> None:
    perms = {"limits": {"processes": 16}}
    report = world.run("fork_bomb.py", "500", permissions=perms, cgroups=cgroups)
    verdict = json.loads(report["stdout"].splitlines()[0])
    if world.who.privileged and not report["cgroups"]:
        # uid 0 is exempt from RLIMIT_NPROC in every user namespace: a root host
        # without a pids cgroup cannot limit processes, and says so.
        assert any("process limit not enforced" in n for n in report["notes"]), report
        return
    assert verdict["forked"] < 16, verdict
    assert verdict["error"] is not None


def test_disk_is_limited(world: World) -> None:
    targets = {
        "tmp": "/tmp/fill",
        "shm": "/dev/shm/fill",
        "data": str(world.data_dir / "fill"),
    }
    perms = {"limits": {"tmp_mb": 16, "file_mb": 8}}
    verdict = world.attack("fill_disk.py", json.dumps(targets), "64", permissions=perms)
    assert verdict["tmp"]["mib"] <= 16, verdict
    assert verdict["shm"]["mib"] <= 16, verdict
    assert verdict["data"] == {"mib": 8, "end": "File too large"}, verdict
    for name in targets:
        assert verdict[f"{name} ftruncate"] == "File too large", verdict
        assert verdict[f"{name} fallocate"] == "File too large", verdict
    assert not (world.data_dir / "fill").exists()


@pytest.mark.slow
def test_open_files_are_limited(world: World) -> None:
    report = world.run(
        "granted.py",
        json.dumps({"read": [], "write": []}),
        permissions={"limits": {"open_files": 32}},
        argv=None,
    )
    assert report["returncode"] == 0
    verdict = world.attack(
        "steal_secrets.py", permissions={"limits": {"open_files": 32}}
    )  # runs fine under the limit
    assert verdict["environ"]
    probe = world.run(
        "eat_memory.py",
        "heap",
        "8",
        permissions={"limits": {"open_files": 32}},
        argv=[
            "/usr/bin/python3",
            "-c",
            "import os\nfds=[]\ntry:\n    while True: fds.append(os.open('/dev/null', 0))\n"
            "except OSError as e: print(len(fds), e.strerror)",
        ],
    )
    count, _, error = probe["stdout"].strip().partition(" ")
    assert int(count) <= 32
    assert error == "Too many open files"
