"""Finding and killing everything an extension started.

An extension runs in its own process group, so one ``killpg`` reaches it and its
ordinary children. Daemons escape the group (``setsid`` after a double fork), so
every incarnation also carries a token in its environment, which descendants
inherit; :func:`find_by_tokens` finds them by that token. Under bwrap the
extension's PID namespace already guarantees all of this; the token sweep is what
keeps the unsandboxed case clean.

These functions block (they read ``/proc``); call them with
``trio.to_thread.run_sync``. psutil is used for inspection only, never for waiting.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterable

import psutil

from ._spawn import INSTANCE_VAR

__all__ = ["descendants", "find_by_tokens", "kill_pids", "signal_group"]

#: Reading /proc directly is much faster than asking psutil for every environment.
_LINUX = sys.platform.startswith("linux")


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to a process group; False when the group is already gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_pids(pids: Iterable[int], sig: signal.Signals) -> None:
    """Send ``sig`` to each pid, ignoring ones that already exited."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def descendants(pid: int) -> list[int]:
    """Pids of every live descendant of ``pid`` (empty if it is gone)."""
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _environ_linux(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return f.read()


def find_by_tokens(tokens: Iterable[str]) -> dict[str, list[int]]:
    """Map each instance token to the pids of live processes whose environment has it."""
    wanted = {f"{INSTANCE_VAR}={t}".encode(): t for t in tokens}
    if not wanted:
        return {}
    scan = _scan_proc if _LINUX else _scan_psutil
    return scan(wanted, os.getpid())


def _scan_proc(wanted: dict[bytes, str], me: int) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = _environ_linux(int(entry.name))
        except OSError:
            continue
        for item in env.split(b"\0"):
            token = wanted.get(item)
            if token is not None:
                found.setdefault(token, []).append(int(entry.name))
                break
    return found


def _scan_psutil(wanted: dict[bytes, str], me: int) -> dict[str, list[int]]:
    tokens = set(wanted.values())
    found: dict[str, list[int]] = {}
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            value = proc.environ().get(INSTANCE_VAR)
        except psutil.Error:
            continue
        if value in tokens:
            found.setdefault(value, []).append(proc.pid)
    return found
