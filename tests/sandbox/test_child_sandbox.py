"""The child helper under bubblewrap: an abort at any step leaves no descriptor behind.

A sandboxed plan holds descriptors (the bound paths, the seccomp filter, the /etc
copies) until it is released; the helper releases it however its block ends,
also when the cancellation lands while the program starts (issue 32 found that
leak in ``bash``, which now runs on this helper). The sweep cancels one run at
each step of its tasks in turn (``helpers.cancelkit``) and compares this
process's open descriptors with those before.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import trio
from helpers.cancelkit import cancel_at_step
from helpers.procs import open_fds
from helpers.sandbox_harness import code_request

from sandbox import Permissions, select_sandbox
from supervisor import NetGuard
from supervisor.lowlevel import Egress, open_child

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend, /proc")


async def test_a_cancelled_sandboxed_child_leaves_no_descriptor(tmp_path: Path) -> None:
    backend = select_sandbox("auto")
    if backend.backend != "bwrap":
        pytest.skip("no bwrap backend here")
    request = code_request(tmp_path, "print('hi')", name="child")

    async def run() -> None:
        async with open_child(backend, request) as child:
            assert child.stdout is not None
            while await child.stdout.receive_some(64):
                pass
            await child.wait()

    with trio.fail_after(120):
        await run()  # the guardian and its socket, once
        before = open_fds()
        for at in itertools.count(1):
            with cancel_at_step(at) as instrument:
                await run()
            left = {fd: what for fd, what in open_fds().items() if before.get(fd) != what}
            assert not left, (at, left)
            if not instrument.fired:
                break
    assert at > 3


async def test_a_child_with_a_network_list_is_served_and_its_errors_stay_its_own(
    tmp_path: Path,
) -> None:
    backend = select_sandbox("auto")
    if backend.backend != "bwrap":
        pytest.skip("no bwrap backend here")
    code = (
        "import socket\n"
        "s = socket.create_connection(('127.0.0.1', 3128), 5)\n"
        "s.sendall(b'CONNECT 127.0.0.1:9 HTTP/1.1\\r\\n\\r\\n')\n"
        "print(s.recv(64).decode().split()[1], flush=True)\n"
    )
    request = code_request(
        tmp_path, code, name="child", permissions=Permissions(network=["example.org"])
    )
    egress = Egress("child", ["example.org"], NetGuard(), grant="a test")
    answers: list[bytes] = []

    async def run() -> None:
        async with open_child(backend, request, egress=egress) as child:
            assert child.stdout is not None
            answers.append(await child.stdout.receive_some(64))
            raise ValueError("the block's own")

    with trio.fail_after(60), pytest.raises(ValueError, match="the block's own"):
        await run()
    assert answers == [b"403\n"]  # the proxy answered it (not a listed destination)
