"""Hostile files where corral reads one, and a bounded child process to read them in.

A cloned repository (or an extension's directory) may put a FIFO (an ``open`` for
reading waits for a writer forever), a link to a device (``/dev/zero`` is read
without end), a sparse file of gigabytes, a directory or a socket where a manifest
or a configuration file belongs. A test that reads one in its own process would
hang or run out of memory on a regression: :func:`run_bounded` runs the reader in a
child with a timeout and a memory limit instead.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from helpers.paths import REPO

__all__ = ["SPECIAL", "make_special", "run_bounded"]


def _sparse(path: Path) -> None:
    with path.open("wb") as fh:
        fh.truncate(2 << 30)  # 2 GiB that take no room on disk


def _socket(path: Path) -> None:
    here = os.getcwd()
    os.chdir(path.parent)  # a socket's path is at most 107 bytes: bind it relative
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(path.name)
    finally:
        os.chdir(here)


#: kind -> (how to make it at a path, the words that start its refusal's reason).
SPECIAL: dict[str, tuple[Callable[[Path], object], str]] = {
    "fifo": (os.mkfifo, "is a FIFO (named pipe), not a regular file"),
    "link-to-dev-zero": (lambda p: p.symlink_to("/dev/zero"), "is a character device"),
    "link-to-dev-null": (lambda p: p.symlink_to("/dev/null"), "is a character device"),
    "sparse-2GiB": (_sparse, "is larger than"),
    "directory": (Path.mkdir, "is a directory, not a regular file"),
    "socket": (_socket, "is a socket, not a regular file"),
}


def make_special(kind: str, path: Path) -> str:
    """Make a file of ``kind`` at ``path``; the words its refusal starts with."""
    make, words = SPECIAL[kind]
    make(path)
    return words


#: The start of every bounded child: at most 1 GiB of address space.
_LIMIT = "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"


def run_bounded(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -c CODE ARGS`` with corral importable, 1 GiB of memory and 60 s at most
    (:class:`subprocess.TimeoutExpired` then: the test fails instead of hanging)."""
    return subprocess.run(
        [sys.executable, "-c", _LIMIT + code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
