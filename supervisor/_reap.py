"""Finding, killing and waiting for everything an extension started.

An extension runs in its own process group, so one ``killpg`` reaches it and its
ordinary children. Daemons escape the group (``setsid`` after a double fork), so
every incarnation also carries a token in its environment, which descendants
inherit, and without a sandbox the extension is its own child subreaper (see
:mod:`sandbox._preexec`): a daemon that clears its environment is still its
descendant while it runs, and the shutdown ladder snapshots its descendants
before asking it to stop. Under bwrap the extension's PID namespace already
guarantees all of this; these sweeps keep the unsandboxed case clean.

Killing is done through pidfds where the kernel has them (Linux >= 5.3): a
process is *claimed* (a pidfd opened, then checked to still be the process that
was found, so a recycled pid is never signalled), killed through its pidfd, and
waited for by waiting for the pidfd to become readable, which it does when the
process exits, child of ours or not. Without pidfds (macOS) processes are killed
by pid and not waited for.

The blocking functions read ``/proc``; call them with ``trio.to_thread.run_sync``.
psutil is used for inspection only, never for waiting.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import typing
from collections.abc import Iterable

import psutil
import trio

from ._spawn import INSTANCE_VAR

__all__ = [
    "Claimed",
    "claim",
    "descendants",
    "find_leftovers",
    "kill_and_wait",
    "signal_all",
    "signal_group",
]

_LINUX = sys.platform.startswith("linux")
_PIDFD = _LINUX and hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")


class Claimed(typing.NamedTuple):
    """A process we are about to kill: its pid and, where supported, a pidfd to it."""

    pid: int
    #: A pidfd (owned: :func:`kill_and_wait` closes it), or -1 without pidfd support.
    fd: int


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to a process group; False when the group is already gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks (``/proc/<pid>/stat`` field 22)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain anything.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


def claim(found: Iterable[tuple[int, int | None]]) -> list[Claimed]:
    """Claim processes found as ``(pid, start time)``; skips those already gone.

    A pid may have been recycled since it was found: the pidfd is opened first and
    the start time read again afterwards, and the process is claimed only when it
    matches and the pidfd's process is still alive (a live process keeps its pid,
    so the second read saw the very process the pidfd holds).
    """
    out: list[Claimed] = []
    for pid, started in found:
        if not _PIDFD:
            out.append(Claimed(pid, -1))
            continue
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue  # gone already
        try:
            signal.pidfd_send_signal(fd, 0)
            same = started is None or _start_time(pid) == started
            signal.pidfd_send_signal(fd, 0)
        except OSError:
            same = False
        if same:
            out.append(Claimed(pid, fd))
        else:
            os.close(fd)
    return out


def descendants(pid: int) -> list[Claimed]:
    """Claim every live descendant of ``pid`` (empty if it is gone)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    return claim((c.pid, _start_time(c.pid) if _LINUX else None) for c in children)


def find_leftovers(tokens: Iterable[str], groups: Iterable[int] = ()) -> list[Claimed]:
    """Claim live processes whose environment holds one of ``tokens`` or in ``groups``."""
    wanted = {f"{INSTANCE_VAR}={t}".encode() for t in tokens}
    pgids = set(groups)
    if not wanted and not pgids:
        return []
    if not _LINUX:
        return claim((p, None) for p in _scan_psutil(wanted, pgids))
    return claim(_scan_proc(wanted, pgids, os.getpid()))


def _scan_proc(wanted: set[bytes], pgids: set[int], me: int) -> list[tuple[int, int | None]]:
    # Reading /proc directly is much faster than asking psutil for every environment.
    found: list[tuple[int, int | None]] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        started = _start_time(pid)
        if started is None:
            continue
        if pgids:
            with contextlib.suppress(OSError):
                if os.getpgid(pid) in pgids:
                    found.append((pid, started))
                    continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if not wanted.isdisjoint(env.split(b"\0")):
            found.append((pid, started))
    return found


def _scan_psutil(wanted: set[bytes], pgids: set[int]) -> list[int]:
    found: list[int] = []
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if os.getpgid(proc.pid) in pgids:
                found.append(proc.pid)
                continue
            value = proc.environ().get(INSTANCE_VAR)
        except (psutil.Error, OSError):
            continue
        if value is not None and f"{INSTANCE_VAR}={value}".encode() in wanted:
            found.append(proc.pid)
    return found


def signal_all(claimed: Iterable[Claimed], sig: signal.Signals) -> None:
    """Send ``sig`` to each claimed process, ignoring those already gone."""
    for c in claimed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if c.fd >= 0:
                signal.pidfd_send_signal(c.fd, sig)
            else:
                os.kill(c.pid, sig)


async def kill_and_wait(claimed: list[Claimed]) -> None:
    """SIGKILL each claimed process and wait for all of them to exit; closes the pidfds.

    Processes that are not our children are reaped by their own parent (init,
    usually): their exit is what we wait for. Without pidfds there is nothing to
    wait on without polling, and this returns once the signals are sent. Callers
    bound it (``trio.move_on_after``): a process stuck in the kernel may take long.

    Cancellation: stops waiting; the signals are sent and every pidfd is closed.
    """
    try:
        signal_all(claimed, signal.SIGKILL)
        for c in claimed:
            if c.fd >= 0:
                await trio.lowlevel.wait_readable(c.fd)
    finally:
        for c in claimed:
            if c.fd >= 0:
                os.close(c.fd)
