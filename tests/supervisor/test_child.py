"""The child helper (``supervisor.lowlevel.open_child``): the stop ladder, nothing left.

Real children of the ``none`` backend (the sandboxed runs are in
``tests/sandbox/test_child_sandbox.py``): a child asked to stop by its ladder, one
killed at once, and a daemon that left the child's process group, which the
guardian adopted and the block's end kills.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio
from helpers.procs import alive, children, lasting

from sandbox import LaunchRequest
from supervisor.lowlevel import StopLadder, describe_exit, open_child

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the guardian's orphans: pidfds")


def _request(tmp_path: Path, code: str) -> LaunchRequest:
    return LaunchRequest(
        name="child",
        argv=[sys.executable, "-c", textwrap.dedent(code)],
        env={"PATH": "/usr/bin:/bin"},
        ext_dir=str(tmp_path),
        data_dir=None,
    )


_LEAVES_ON_EOF = """
import sys
print("ready", flush=True)
sys.stdin.read()
"""
_TERM_ONLY = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
print("ready", flush=True)
while True:
    time.sleep(60)
"""


async def _stopped(tmp_path: Path, code: str, ladder: StopLadder | None) -> int | None:
    with trio.fail_after(30):
        async with open_child(None, _request(tmp_path, code), ladder=ladder) as child:
            assert child.stdout is not None
            await child.stdout.receive_some(16)  # it runs (or reads its stdin)
    return child.returncode


async def test_the_ladder_asks_before_it_kills(tmp_path: Path) -> None:
    # stdin closed: a child that reads it to its end leaves by itself.
    assert await _stopped(tmp_path, _LEAVES_ON_EOF, StopLadder(close_grace=10)) == 0
    # SIGTERM after the first grace; it leaves with its own status.
    assert await _stopped(tmp_path, _TERM_ONLY, StopLadder(close_grace=0.1, term_grace=10)) == 7
    # No ladder: killed at once.
    rc = await _stopped(tmp_path, _TERM_ONLY, None)
    assert describe_exit(rc) == "killed by SIGKILL"


async def test_a_daemon_that_left_the_group_is_killed_with_the_child(tmp_path: Path) -> None:
    before = {p.pid for p in children()}
    code = """
    import os, sys, time
    if os.fork() == 0:
        os.setsid()  # a session and a process group of its own
        print(os.getpid(), flush=True)
        time.sleep(300)
        os._exit(0)
    time.sleep(300)
    """
    with trio.fail_after(30):
        async with open_child(None, _request(tmp_path, code)) as child:
            assert child.stdout is not None
            daemon = int(await child.stdout.receive_some(32))
            assert alive(daemon)
    assert not alive(daemon)
    assert lasting(before) == []


async def test_a_program_that_cannot_start_raises_and_leaves_nothing(tmp_path: Path) -> None:
    request = _request(tmp_path, "pass")
    request = LaunchRequest(**{**{f: getattr(request, f) for f in request.__struct_fields__},
                               "argv": [str(tmp_path / "missing")]})  # fmt: skip
    with trio.fail_after(30), pytest.raises(FileNotFoundError):
        async with open_child(None, request, stdin=subprocess.DEVNULL):
            raise AssertionError("started")


async def test_an_error_in_the_block_leaves_as_itself(tmp_path: Path) -> None:
    with trio.fail_after(30), pytest.raises(ValueError, match="the block's own"):
        async with open_child(None, _request(tmp_path, _TERM_ONLY)):
            raise ValueError("the block's own")
