"""The session commands give large freed buffers back to the system (glibc).

A model request's body grows with the transcript to about the compaction threshold;
with glibc's dynamic mmap threshold, such buffers freed after the first one stay in
the heap, and a long session's RSS climbs to that high-water mark (issue 32: bench_soak
46.7 -> 52.0 MiB over 600 prompts; 49.0 with the threshold fixed). ``run_trio``, which
runs ``corral run``, ``chat`` and ``rpc``, fixes the threshold first: a freed 4 MiB
buffer is given back, the second time too.
"""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest
from helpers.paths import REPO

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="glibc's allocator"
)

SCRIPT = textwrap.dedent(
    """
    import os, sys
    from agent._cli.agent_cmds import run_trio

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    async def kept() -> int:
        size = 4 << 20
        buffer = bytearray(size)  # the first large buffer: mapped, then unmapped
        del buffer
        before = rss()
        buffer = bytearray(size)  # the next ones: from the heap, unless fixed
        del buffer
        return rss() - before

    print(run_trio(kept))
    """
)


def test_a_session_command_gives_a_freed_large_buffer_back() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    kept = int(proc.stdout)
    assert kept < 1 << 20, f"{kept} bytes of a freed 4 MiB buffer still resident"
