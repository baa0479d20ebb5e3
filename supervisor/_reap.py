"""Finding, killing and waiting for everything an extension started.

An extension runs in its own process group, so one ``killpg`` reaches it and its
ordinary children. Daemons escape the group (``setsid`` after a double fork).
On Linux every child is the sandbox guardian's, and the guardian is a child
subreaper (see :mod:`sandbox._guardian`): while the extension runs its orphans
stay its descendants (it is a subreaper too), and once it exited they are the
guardian's, so :func:`leftovers` asks the guardian to kill every orphan it
adopted, a daemon that cleared its environment included, in one pass. Elsewhere
every incarnation carries a token in its environment, which descendants inherit,
and :func:`find_leftovers` looks for it. Under bwrap the extension's PID
namespace already takes everything down; these sweeps keep the unsandboxed case
clean.

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
from collections.abc import Iterable, Sequence

import trio

from sandbox import start_time, sweep_orphans
from sandbox.log import get_logger

from ._spawn import INSTANCE_VAR

if typing.TYPE_CHECKING:
    from ._process import ChildProcess

__all__ = [
    "Claimed",
    "claim",
    "find_leftovers",
    "kill_and_wait",
    "leftovers",
    "reap_group",
    "reaps_at_once",
    "signal_group",
]

log = get_logger(__name__)

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
            same = started is None or start_time(pid) == started
            signal.pidfd_send_signal(fd, 0)
        except OSError:
            same = False
        if same:
            out.append(Claimed(pid, fd))
        else:
            os.close(fd)
    return out


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
        started = start_time(pid)
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
    import psutil  # not on Linux's path: importing it costs start-up time

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


def _signal_all(claimed: Iterable[Claimed], sig: signal.Signals) -> None:
    for c in claimed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if c.fd >= 0:
                signal.pidfd_send_signal(c.fd, sig)
            else:
                os.kill(c.pid, sig)


async def leftovers(tokens: list[str], groups: Iterable[int] = ()) -> list[Claimed]:
    """Claim (and on Linux already kill) what exited extensions left running.

    On Linux the guardian's orphans: everything whose parent is gone, whatever
    its group, session or environment (one round trip; the guardian reads
    ``/proc`` once). Elsewhere the processes carrying one of ``tokens`` or in
    ``groups`` (a worker thread reads ``/proc``). Callers kill and wait with
    :func:`kill_and_wait`.

    Cancellation: not cancellable while the guardian looks (milliseconds);
    otherwise the search is abandoned.
    """
    if _PIDFD:
        return [Claimed(pid, fd) for pid, fd in sweep_orphans()]
    return await trio.to_thread.run_sync(find_leftovers, tokens, list(groups))


async def kill_and_wait(claimed: list[Claimed]) -> None:
    """SIGKILL each claimed process and wait for all of them to exit; closes the pidfds.

    Processes that are not our children are reaped by their own parent (init,
    usually): their exit is what we wait for. Without pidfds there is nothing to
    wait on without polling, and this returns once the signals are sent. Callers
    bound it (``trio.move_on_after``): a process stuck in the kernel may take long.

    Cancellation: stops waiting; the signals are sent and every pidfd is closed.
    """
    try:
        _signal_all(claimed, signal.SIGKILL)
        for c in claimed:
            if c.fd >= 0:
                await trio.lowlevel.wait_readable(c.fd)
    finally:
        for c in claimed:
            if c.fd >= 0:
                os.close(c.fd)


def reaps_at_once(proc: ChildProcess, *, sweep: bool = True) -> bool:
    """:func:`reap_group` of ``proc`` would not wait (it has no checkpoint then): the
    guardian already said all about it, and it left nothing to sweep now. A caller
    need not shield it then, even while it is being cancelled."""
    return proc.ended_now() and proc.returncode is not None and (not sweep or proc.left_nothing)


async def reap_group(
    proc: ChildProcess, *, grace: float, tokens: Sequence[str] = (), sweep: bool = True
) -> None:
    """The end of every child: SIGKILL to its group, its exit awaited, then what it
    left behind (the guardian's orphans: a daemon that left the group) killed and
    awaited; all of it bounded by ``grace``. Callers shield it.

    Args:
        proc: the child (it leads its process group).
        grace: seconds the waits may take together.
        tokens: instance tokens to look for where there are no pidfds (see
            :func:`leftovers`).
        sweep: look for leftovers now (False: the caller sweeps many at once).

    Cancellation: stops waiting; the signals are sent all the same.
    """
    signal_group(proc.pid, signal.SIGKILL)
    deadline = trio.current_time() + grace
    if not proc.ended_now():  # no scheduler pass for a child that already said all
        with trio.move_on_at(deadline):
            # The exit (what escaped the group is an orphan only once it is gone) and
            # the guardian's word on whether it left anything, in one wait: the clean
            # record comes with the exit status; without it, the pipe closes right
            # after (each wait costs a scheduler pass, even when it need not wait).
            await proc.ended()
    # A child that left nothing behind (the guardian says so with its exit) needs no
    # sweep: no round trip to the guardian, no pass over /proc.
    doomed = await leftovers(list(tokens), [proc.pid]) if sweep and not proc.left_nothing else []
    if doomed or proc.returncode is None:
        with trio.move_on_at(deadline) as waited:
            await kill_and_wait(doomed)
            await proc.wait()
        if waited.cancelled_caught:
            log.warning("leftovers_still_running", pid=proc.pid, pids=[c.pid for c in doomed])
