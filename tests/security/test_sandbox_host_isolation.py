"""An extension cannot signal, trace or type into its host or other extensions."""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import termios
from typing import Any

import psutil
import pytest
from helpers.sandbox_harness import RUN_TIMEOUT, World, as_user

from sandbox._diagnose import read_sysctl


@pytest.mark.slow
def test_cannot_signal_or_trace_host_or_other_extensions(world: World) -> None:
    # A process of the host's user standing in for the host and the user's programs,
    # and another sandboxed extension with its own host.
    bystander = subprocess.Popen(["sleep", "300"], **as_user(world.who.uid, world.who.gid))
    victim = world.hold("idle_echo.py", then="wait")
    try:
        spawned = victim.expect(lambda e: e["event"] == "spawned")
        victim.expect(lambda e: e["event"] == "child" and e["line"] == "READY")
        bwrap = psutil.Process(spawned["pid"])
        payload = [p.pid for p in bwrap.children(recursive=True) if "idle_echo" in p.cmdline()[-1]]
        targets = [bystander.pid, victim.proc.pid, bwrap.pid, *payload]
        verdict = world.attack("signal_host.py", *map(str, targets))
        for pid in targets:
            assert verdict[f"kill {pid}"] == "error: No such process", verdict
            assert verdict[f"pidfd {pid}"] == "error: No such process", verdict
            assert verdict[f"ptrace {pid}"].startswith("error"), verdict
            assert verdict[f"mem {pid}"].startswith("error"), verdict
        # Tracing even its own namespace's init is refused (seccomp).
        assert verdict["ptrace 1"].startswith("error"), verdict
        assert bystander.poll() is None
        assert victim.proc.poll() is None
        assert all(psutil.pid_exists(p) for p in targets)
        # The other extension still answers.
        assert victim.proc.stdin is not None
    finally:
        victim.stop()
        bystander.kill()
        bystander.wait()


def _run_on_terminal(world: World, mode: str) -> tuple[dict[str, Any], bytes]:
    """Run the TIOCSTI attack with the host's terminal as its stdin and controlling tty.

    Returns the attack's verdict and whatever input ended up queued on the terminal.
    """
    master, slave = os.openpty()
    try:

        def controlling_tty() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        job = world.job("tiocsti.py", mode=mode, tty=True)
        proc = world.start_host(
            job, stdin=slave, start_new_session=True, preexec_fn=controlling_tty
        )
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
        assert proc.returncode == 0, err.decode()
        report = json.loads(out.decode().splitlines()[-1])
        assert report["returncode"] == 0, report["stderr"]
        # Canonical mode: the injected line (it ends in a newline) is readable as is.
        queued = b""
        while select.select([slave], [], [], 0.2)[0]:
            queued += os.read(slave, 1024)
        return json.loads(report["stdout"]), queued
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.slow
def test_cannot_inject_input_into_the_terminal(world: World) -> None:
    verdict, queued = _run_on_terminal(world, "required")
    assert all(v.startswith("error") for v in verdict.values()), verdict
    assert b"pwned" not in queued
    if read_sysctl("dev.tty.legacy_tiocsti") != "0":
        # The same attack without the sandbox does inject: the test can see it.
        baseline, queued = _run_on_terminal(world, "off")
        assert baseline["fd 0"] == "injected", baseline
        assert b"echo pwned" in queued
