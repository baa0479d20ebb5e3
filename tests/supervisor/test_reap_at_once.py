"""A child the guardian already said all about, and that left nothing, is reaped with
no wait (so an incarnation's end enters no shielded scope for it); one that left a
daemon, or whose end is not known yet, is not, and its reap still kills and waits."""

from __future__ import annotations

import os
import sys

import pytest
import trio

from sandbox import LaunchPlan
from supervisor._process import spawn_child
from supervisor._reap import reap_group, reaps_at_once

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guardian")

#: Forks a daemon (new session, out of the group) that says its pid and sleeps.
_DAEMON = """\
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        print(os.getpid(), flush=True)
        time.sleep(60)
    os._exit(0)
os.wait()
"""


def _plan(code: str) -> LaunchPlan:
    return LaunchPlan(
        argv=[sys.executable, "-c", code], env={}, cwd="/", backend="none", sandboxed=False
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is not alive
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


async def test_a_child_that_left_nothing_is_reaped_at_once() -> None:
    with trio.fail_after(10):
        proc = await spawn_child(_plan("import sys; sys.stdin.read()"))
        assert not reaps_at_once(proc)  # running: its end is to be waited for
        assert proc.stdin is not None
        await proc.stdin.aclose()  # it reads to the end, then exits
        await proc.ended()
        assert reaps_at_once(proc)
        # No checkpoint in it: it runs to its end even in a cancelled scope.
        reaped = False
        with trio.CancelScope() as scope:
            scope.cancel()
            await reap_group(proc, grace=1.0)
            reaped = True
        assert reaped
        assert proc.returncode == 0
        proc.close()


async def test_a_child_that_left_a_daemon_is_not_and_its_reap_kills_it() -> None:
    with trio.fail_after(10):
        proc = await spawn_child(_plan(_DAEMON))
        assert proc.stdout is not None
        daemon = int(await proc.stdout.receive_some(100))
        await proc.ended()
        assert proc.returncode == 0
        assert _alive(daemon)
        assert not reaps_at_once(proc)  # a sweep is due
        assert reaps_at_once(proc, sweep=False)  # unless the caller sweeps later
        with trio.CancelScope(shield=True):
            await reap_group(proc, grace=2.0)
        assert not _alive(daemon)
        proc.close()
