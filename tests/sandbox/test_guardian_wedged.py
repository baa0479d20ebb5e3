"""A guardian that stops answering fails the request in bounded time; the next starts another."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import threading
import time

import psutil
import pytest

from sandbox import LaunchPlan
from sandbox._guardian import ChildStatus, Guardian
from sandbox._preexec import child_order


def _sleeper(g: Guardian) -> tuple[int, ChildStatus]:
    plan = LaunchPlan(
        argv=[sys.executable, "-c", "import time; time.sleep(60)"],
        env={},
        cwd="/",
        backend="none",
        sandboxed=False,
    )
    null = os.open(os.devnull, os.O_RDWR)
    try:
        return g.spawn(child_order(plan, [0, 1, 2]), [null, null, null], plan.argv[0])
    finally:
        os.close(null)


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_stopped_guardian_times_out_and_is_replaced() -> None:
    g = Guardian(timeout=0.5)
    child, status = _sleeper(g)
    old = g.pid
    assert old is not None
    try:
        os.kill(old, signal.SIGSTOP)
        failed: list[OSError] = []

        def ask() -> None:
            try:
                g.park([])
            except OSError as exc:
                failed.append(exc)

        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        asking.join(5)
        assert not asking.is_alive(), "the host hangs on a guardian that does not answer"
        (exc,) = failed
        assert exc.errno == errno.ETIMEDOUT
        assert "guardian" in str(exc)
        # The wedged guardian is gone, and the child it started died with it.
        assert _gone(old)
        assert _gone(child)
        status.read()
        assert status.closed
        assert status.guardian_lost
        assert status.returncode == -signal.SIGKILL
        status.close()
        # The next request starts another guardian, which works.
        again, again_status = _sleeper(g)
        assert g.pid not in (None, old)
        os.kill(again, signal.SIGKILL)
        assert _gone(again)
        again_status.close()
    finally:
        with contextlib.suppress(ProcessLookupError):  # a hung request ends with it
            os.kill(old, signal.SIGKILL)
        g.close()
