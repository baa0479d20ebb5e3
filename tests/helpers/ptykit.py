"""Run a shell command on a pseudo-terminal and read what it drew (pexpect + pyte)."""

from __future__ import annotations

import time

import pexpect
import pyte

__all__ = ["run_on_pty"]


def run_on_pty(
    shell: str, *, cwd: str, env: dict[str, str], rows: int, cols: int, wait: float
) -> tuple[int | None, list[str]]:
    """Run ``shell`` with ``/bin/sh -c`` on a ``rows`` x ``cols`` terminal until it
    exits (at most ``wait`` seconds); its exit status and the screen's lines."""
    child = pexpect.spawn("/bin/sh", ["-c", shell], cwd=cwd, env=env, dimensions=(rows, cols))
    screen = pyte.Screen(cols, rows)
    stream = pyte.ByteStream(screen)
    deadline = time.monotonic() + wait
    try:
        while True:
            assert time.monotonic() < deadline, "the command did not end in time"
            try:
                stream.feed(child.read_nonblocking(65536, timeout=0.5))
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                break
    finally:
        child.close(force=True)
    return child.exitstatus, [line.rstrip() for line in screen.display]
