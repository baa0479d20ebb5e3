"""Looking at processes: descendants, liveness, argv, environment, open fds."""

from __future__ import annotations

import os
import typing

import psutil


def children() -> list[psutil.Process]:
    """Live (not zombie) descendants of this test process."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.NoSuchProcess:
            pass
    return found


def alive(pid: int) -> bool:
    """True if ``pid`` names a live (not zombie) process."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def cmdline(pid: int) -> list[str]:
    """argv of a live process, from ``/proc``."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0") if a]


def environ(pid: int) -> dict[str, str]:
    """Environment of a live process, from ``/proc``."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    return dict(item.split("=", 1) for item in items if "=" in item)


def num_fds() -> int:
    """Open file descriptors of this (test) process."""
    return typing.cast(int, psutil.Process(os.getpid()).num_fds())
