"""No extension process outlives its host; an idle extension lives as long as it.

The host here is a real process (``host_helper.py``) that spawns a sandboxed
extension; the tests kill it (SIGKILL, no cleanup) or let it exit without
stopping anything, and then look for every process of the extension with psutil.
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
@pytest.mark.parametrize("how", ["killed", "exits"])
def test_nothing_outlives_the_host(world: World, how: str) -> None:
    marker = f"corral-outlive-{uuid.uuid4().hex}"
    held = world.hold("outlive.py", marker, then="exit" if how == "exits" else "wait")
    try:
        held.expect(lambda e: e["event"] == "child" and e["line"].startswith("READY"))
        procs = [p for p in _marked(marker) if p.pid != held.proc.pid]
        # bwrap (outside and inside), the attack, its child and its daemon.
        assert len(procs) >= 5, procs
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
@pytest.mark.parametrize("spawn_from", ["spawner", "short-thread-spawn", "main"])
def test_idle_extension_keeps_running(world: World, spawn_from: str) -> None:
    # Nothing in the sandbox imposes an idle timeout. The thread that spawned the
    # extension going away must not kill it either (PR_SET_PDEATHSIG is per thread).
    held = world.hold("idle_echo.py", idle=3, then="wait", spawn_from=spawn_from)
    try:
        held.expect(lambda e: e["event"] == "child" and e["line"] == "READY")
        held.expect(lambda e: e["event"] == "child" and e["line"] == "echo: ping", timeout=60)
        exited = held.expect(lambda e: e["event"] == "exited")
        assert exited["returncode"] == 0
    finally:
        held.stop()


def test_forking_from_a_short_lived_thread_is_refused(world: World) -> None:
    report = world.run("idle_echo.py", spawn_from="short-thread")
    assert report["returncode"] == 126
    assert "short-lived thread" in report["stderr"]
