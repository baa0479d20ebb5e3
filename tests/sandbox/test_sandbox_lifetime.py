"""No extension process outlives its host; an idle extension lives as long as it.

The host here is a real process (``host_helper.py``) that spawns an extension,
sandboxed or not; the tests kill it (SIGKILL, no cleanup) or let it exit without
stopping anything, and then look for every process of the extension with psutil.
The extension leaves a child and a double-forked daemon in a session of its own:
under bwrap the PID namespace takes them down, without a sandbox (and without a
cgroup) only the guardian does.
"""

from __future__ import annotations

import os
import signal
import uuid

import psutil
import pytest
from helpers.sandbox_harness import World


def _marked(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if marker in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["required", "off"], ids=["bwrap", "none"])
@pytest.mark.parametrize("how", ["killed", "exits"])
def test_nothing_outlives_the_host(world: World, how: str, mode: str) -> None:
    marker = f"corral-outlive-{uuid.uuid4().hex}"
    then = "exit" if how == "exits" else "wait"
    held = world.hold("outlive.py", marker, then=then, mode=mode)
    try:
        spawned = held.expect(lambda e: e["event"] == "spawned")
        assert spawned["sandboxed"] is (mode == "required")
        held.expect(lambda e: e["event"] == "child" and e["line"].startswith("READY"))
        procs = [p for p in _marked(marker) if p.pid != held.proc.pid]
        # The attack, its child and its daemon (and bwrap, outside and inside).
        assert len(procs) >= (5 if mode == "required" else 3), procs
        if how == "killed":
            os.kill(held.proc.pid, signal.SIGKILL)
        else:
            held.release()
        assert held.proc.wait(timeout=30) in (0, -signal.SIGKILL)
        _gone, alive = psutil.wait_procs(procs, timeout=30)
        assert alive == [], alive
        assert _marked(marker) == []
    finally:
        held.stop()
        for proc in _marked(marker):
            proc.kill()


@pytest.mark.slow
def test_cgroups_of_a_killed_host_are_removed_by_the_next(world: World) -> None:
    marker = f"corral-outlive-{uuid.uuid4().hex}"
    held = world.hold("outlive.py", marker, then="wait")
    try:
        spawned = held.expect(lambda e: e["event"] == "spawned")
        held.expect(lambda e: e["event"] == "child" and e["line"].startswith("READY"))
        held.proc.kill()
        held.proc.wait(timeout=30)
    finally:
        held.stop()
    if not spawned["cgroups"]:
        assert not world.who.privileged, "a root host on Linux should get cgroups"
        return
    assert all(os.path.isdir(c) for c in spawned["cgroups"])
    world.attack("granted.py", '{"read": [], "write": []}')
    assert not any(os.path.exists(c) for c in spawned["cgroups"])


@pytest.mark.slow
@pytest.mark.parametrize("spawn_from", ["main", "short-thread"])
def test_idle_extension_keeps_running(world: World, spawn_from: str) -> None:
    # Nothing in the sandbox imposes an idle timeout. The thread that spawned the
    # extension going away must not kill it either (PR_SET_PDEATHSIG is per thread:
    # the guardian's one thread forks every child).
    held = world.hold("idle_echo.py", idle=3, then="wait", spawn_from=spawn_from)
    try:
        held.expect(lambda e: e["event"] == "child" and e["line"] == "READY")
        held.expect(lambda e: e["event"] == "child" and e["line"] == "echo: ping", timeout=60)
        exited = held.expect(lambda e: e["event"] == "exited")
        assert exited["returncode"] == 0
    finally:
        held.stop()
