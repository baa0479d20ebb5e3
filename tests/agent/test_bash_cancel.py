"""A sandboxed ``bash`` call cancelled at any checkpoint leaves no descriptor behind.

The sandbox plan of a command holds descriptors (the bound paths, the seccomp
filter) until the call cleans it up. An abort landing while the program starts
used to skip that cleanup: three descriptors leaked per such abort (found by
bench_soak: 33 -> 39 over 1,500 prompts). The sweep cancels one call at each step
of its tasks in turn (``helpers.cancelkit``) and compares this process's open
descriptors with those before.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.cancelkit import cancel_at_step
from helpers.procs import open_fds

import sandbox
from agent._tools.bash import BashTool
from agent._tools.confine import Workspace


async def _progress(text: str, part: Any = None, /) -> None:
    pass


@pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend, /proc")
async def test_a_cancelled_sandboxed_bash_call_leaves_no_descriptor(tmp_path: Path) -> None:
    backend = sandbox.select_sandbox("auto")
    if backend.backend != "bwrap":
        pytest.skip("no bwrap backend here")
    tool = BashTool(Workspace(str(tmp_path)), sandbox=backend, default_timeout=30)
    args = {"command": "echo hi"}
    with trio.fail_after(120):
        await tool.run("warm", args, _progress)  # the guardian and its socket, once
        before = open_fds()
        for at in itertools.count(1):
            with cancel_at_step(at) as instrument:
                await tool.run(f"c{at}", args, _progress)
            left = {fd: what for fd, what in open_fds().items() if before.get(fd) != what}
            assert not left, (at, left)
            if not instrument.fired:
                break
    assert at > 3
