"""The host's side of the guardian: one small process that spawns and outlives nothing.

Every child corral starts (extensions, tool hosts, the agent's shell, the
browser) is forked by the *guardian* (``_guardian_main.py``), a single-threaded
Python process the host starts once (on first use, or early with
:func:`start_guardian`) and talks to over a ``SOCK_SEQPACKET`` socket pair. Why:

* **No fork of the host.** A ``preexec_fn`` forces ``fork()`` of the whole
  multi-threaded host (5-10 ms in a 40-60 MiB process, per spawn, blocking it);
  the guardian is a 10 MiB single-threaded process whose fork costs the host
  nothing but a message (``vfork`` starts the guardian itself). Limits, session,
  cgroup membership and the parent-death signal are set in the guardian's child,
  where any Python is safe.
* **No thread lesson to remember.** ``PR_SET_PDEATHSIG`` fires when the *thread*
  that forked the child exits; the guardian has one thread, which lives as long
  as it does, so any host thread may spawn (no spawner thread, no thread hop).
* **Nothing outlives the host.** The guardian is a child subreaper: whatever the
  children leave behind (a double-forked ``setsid`` daemon with a cleared
  environment included) stays its descendant. When the host dies, by SIGKILL too,
  its end of the socket closes, and the guardian kills every descendant and every
  cgroup it placed a child in, reaps them and exits; in every sandbox backend,
  with or without cgroups, as root or not.

A request carries the child's descriptors (``SCM_RIGHTS``); the reply is its pid
and a *status pipe* (:class:`ChildStatus`) that says whether the program started
and, later, its wait status. The guardian never blocks on a child, so a request
takes a fraction of a millisecond: callers make it synchronously, from any thread.
A guardian that does not answer within ``ASK_TIMEOUT`` is wedged: the caller gets
``ETIMEDOUT`` instead of a host that hangs, and the next request starts another.

Requests are pipelined: :meth:`Guardian.submit` sends one and returns a
:class:`Ticket` at once, and the replies, which come in the order of the
requests, are matched to their tickets by whoever collects next
(:meth:`Guardian.collect`). A host starting 50 extensions at once thus sends 50
orders without waiting for each fork (the guardian forks them back to back) and
its event loop is never blocked on the guardian: it waits for the socket to
become readable (:meth:`Guardian.fileno`) like for any other descriptor.
"""

from __future__ import annotations

import array
import collections
import contextlib
import errno
import marshal
import os
import resource
import select
import socket
import struct
import subprocess
import sys
import threading
import time
import typing
from pathlib import Path
from typing import Any

__all__ = [
    "ChildStatus",
    "Guardian",
    "Ticket",
    "guardian",
    "guardian_pids",
    "start_guardian",
    "sweep_orphans",
]

_PROGRAM = str(Path(__file__).with_name("_guardian_main.py"))
#: The host raises its soft limit of open descriptors to at most this many.
_NOFILE_WANTED = 1 << 20
#: Descriptors one reply may carry (the pidfds of a sweep).
_MAX_FDS = 250
#: Seconds the host waits for one answer. The guardian never blocks on a child; its
#: slowest answer is a sweep's one pass over ``/proc``. One that takes longer is wedged.
ASK_TIMEOUT = 10.0


@typing.final
class ChildStatus:
    """The status pipe of one child: whether it started, then its wait status.

    Non-blocking: :meth:`read` takes what the guardian wrote so far.
    """

    def __init__(self, fd: int, argv0: str, pidfd: int = -1) -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        #: A pidfd of the child (-1: none), readable once it exited: a hop before the
        #: guardian reaps it and writes its exit status.
        self.pidfd = pidfd
        self._argv0 = argv0
        self._buf = b""
        #: True once the program runs, False if it could not start, None until known.
        self.started: bool | None = None
        #: Why it did not start.
        self.error: OSError | None = None
        #: Its exit status once reaped (negative: killed by that signal), else None.
        self.returncode: int | None = None
        #: The guardian closed the pipe (after the exit status, or because it died).
        self.closed = False
        #: The guardian died before the child's exit status: the child died with it.
        self.guardian_lost = False
        #: It exited leaving no process behind (the guardian, a child subreaper, had
        #: adopted no orphan when it reaped it; it says so with the exit status):
        #: nothing of it to sweep. False: it may have, or that record is not read yet.
        self.left_nothing = False

    def __repr__(self) -> str:
        return f"<ChildStatus started={self.started} returncode={self.returncode}>"

    def fileno(self) -> int:
        """The pipe's descriptor (-1 once closed), to wait for it to become readable."""
        return self._fd

    def read(self) -> None:
        """Take every record written so far (never blocks)."""
        while self._fd >= 0:
            try:
                data = os.read(self._fd, 4096)
            except BlockingIOError:
                return
            if not data:
                self._end()
                return
            self._buf += data
            while len(self._buf) >= 2:
                (size,) = struct.unpack("!H", self._buf[:2])
                if len(self._buf) < 2 + size:
                    break
                self._record(*marshal.loads(self._buf[2 : 2 + size]))
                self._buf = self._buf[2 + size :]

    @property
    def said_all(self) -> bool:
        """The guardian will write nothing more: it closed the pipe, or its last record
        came (that the child left nothing, sent with the exit status)."""
        return self.closed or self.left_nothing

    def _record(self, tag: bytes, value: int, step: str) -> None:
        if tag == b"x":
            self.started = True
        elif tag == b"e":
            self.started = False
            what = self._argv0 if step == "exec" else f"{self._argv0} ({step})"
            self.error = OSError(value, os.strerror(value), what)
        elif tag == b"s":
            if self.started is None:
                self.started = True
            self.returncode = os.waitstatus_to_exitcode(value)
        elif tag == b"c":
            self.left_nothing = True

    def _end(self) -> None:
        self._close_pipe()  # not the pidfd: a task may wait on it (its owner closes it)
        if self.returncode is None:
            # The guardian died before the child: its children die with it
            # (PR_SET_PDEATHSIG), so this one is gone or going.
            self.returncode = -9
            self.guardian_lost = True
            if self.started is None:
                self.started = False
                self.error = OSError(errno.ECHILD, "the guardian process went away", "")

    def close(self) -> None:
        """Close the pipe and the pidfd (idempotent)."""
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.closed = True


@typing.final
class Ticket:
    """One request sent to the guardian (:meth:`Guardian.submit`), and its reply once
    collected: ``reply`` with the descriptors it carried (``fds``, the taker's to
    close), or ``error``. ``lost``: the guardian went away before answering (the
    request may be sent again, to the next guardian)."""

    __slots__ = ("deadline", "error", "fds", "lost", "reply")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.reply: dict[str, Any] | None = None
        self.fds: list[int] = []
        self.error: OSError | None = None
        self.lost = False

    def __repr__(self) -> str:
        return f"<Ticket done={self.done} lost={self.lost}>"

    @property
    def done(self) -> bool:
        """It has its reply, or an error."""
        return self.reply is not None or self.error is not None

    def _fail(self, error: OSError, *, lost: bool) -> None:
        if not self.done:
            self.error, self.lost = error, lost


@typing.final
class Guardian:
    """The connection to this process's guardian; thread-safe (see the module docstring)."""

    def __init__(self, python: str | None = None, *, timeout: float = ASK_TIMEOUT) -> None:
        self._python = python or sys.executable
        self._timeout = timeout
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner = 0
        #: Tickets sent and not yet answered, in the order of their requests.
        self._pending: collections.deque[Ticket] = collections.deque()

    def __repr__(self) -> str:
        pid = self._proc.pid if self._proc is not None else None
        return f"<Guardian pid={pid}>"

    @property
    def pid(self) -> int | None:
        """The guardian's pid, once started."""
        return self._proc.pid if self._proc is not None and self._owner == os.getpid() else None

    def start(self) -> None:
        """Start the guardian now if it is not running (it starts on first use anyway)."""
        with self._lock:
            self._ensure()

    def _ensure(self) -> socket.socket:
        if self._sock is not None and self._owner == os.getpid():
            return self._sock
        # Never started, or this is a forked copy of the host: its own guardian.
        self._pending = collections.deque()  # a forked copy's tickets are its parent's
        soft = _raise_nofile()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [self._python, "-I", "-S", _PROGRAM, str(theirs.fileno()), str(soft)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                # Its own session: the terminal's signals (Ctrl-C) are the host's.
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.settimeout(self._timeout)
        self._sock, self._owner = ours, os.getpid()
        return ours

    def close(self) -> None:
        """Stop this guardian now: it kills every child it started and exits."""
        with self._lock:
            self._discard()

    def _discard(self, error: OSError | None = None, *, lost: bool = True) -> None:
        """Close the connection (the guardian then ends its children and exits); every
        request still unanswered fails with ``error``."""
        error = error or OSError(errno.ECHILD, "the guardian process went away")
        while self._pending:
            self._pending.popleft()._fail(error, lost=lost)
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def spawn(self, order: dict[str, Any], fds: list[int], argv0: str) -> tuple[int, ChildStatus]:
        """Have the guardian start one child; returns its pid and its status pipe.

        Blocking for a fraction of a millisecond (the first call also waits for
        the guardian to start). ``fds`` are sent, not consumed: the caller closes
        its copies.

        Raises:
            OSError: the guardian could not fork (the program's own start is
                reported on the status pipe), or did not answer within the timeout
                (``ETIMEDOUT``: that guardian is stopped, and its children with it).
        """
        return spawned(*self._ask(order, fds), argv0)

    def park(self, cgroups: list[str]) -> None:
        """Have the guardian fork a spare child into ``cgroups`` now (it joins them while
        nothing waits); the next spawn into exactly these cgroups takes it.

        Raises:
            OSError: the guardian could not fork.
        """
        reply, got = self._ask({"op": "park", "cgroups": list(cgroups)}, [])
        for fd in got:
            os.close(fd)
        if "errno" in reply:
            err = reply["errno"]
            raise OSError(err, os.strerror(err))

    def own_pids(self) -> set[int]:
        """The guardian and its parked spares: processes of corral's own that live as
        long as this one and run nothing of an extension's (one round trip: the
        guardian parks spares of its own accord)."""
        pid = self.pid
        if pid is None:
            return set()
        try:
            reply, got = self._ask({"op": "spares"}, [])
        except OSError:
            return {pid}
        for fd in got:
            os.close(fd)
        return {pid, *reply.get("pids", [])}

    def sweep(self) -> list[tuple[int, int]]:
        """Kill every orphan the guardian adopted: what exited children left behind.

        Returns ``(pid, pidfd)`` of each process killed (the caller waits for the
        pidfds to become readable and closes them). Nothing when the guardian has
        not started. Blocking for the guardian's one pass over ``/proc``.
        """
        if self._sock is None or self._owner != os.getpid():
            return []
        reply, got = self._ask({"op": "sweep"}, [])
        return list(zip(reply.get("pids", []), got, strict=False))

    def fileno(self) -> int:
        """The connection's descriptor (-1 when not connected): it becomes readable
        when a reply arrives, for :meth:`collect` without blocking."""
        sock = self._sock
        return sock.fileno() if sock is not None and self._owner == os.getpid() else -1

    def submit(self, order: dict[str, Any], fds: list[int]) -> Ticket:
        """Send one request; its reply comes to the ticket (see :meth:`collect`).

        ``fds`` are sent, not consumed. Blocks only while the socket's buffer is full
        (the guardian is behind by that many requests) or the guardian starts.
        A request that could not be sent gives a ticket that failed (``lost`` when
        the guardian is gone, to send again).
        """
        data = marshal.dumps(order)
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        ticket = Ticket(time.monotonic() + self._timeout)
        with self._lock:
            sock = self._ensure()
            try:
                sock.sendmsg([data], rights)
            except TimeoutError:
                self._discard(self._wedged(), lost=False)
                ticket._fail(self._wedged(), lost=False)
            except OSError:
                self._discard()  # gone (killed from outside): the next request starts another
                ticket._fail(OSError(errno.ECHILD, "the guardian process went away"), lost=True)
            else:
                self._pending.append(ticket)
        return ticket

    def collect(self, ticket: Ticket, *, block: bool) -> bool:
        """Take the replies that arrived, each to its ticket; True once ``ticket`` is done.

        Without ``block`` this never waits for the guardian (wait for :meth:`fileno`
        to become readable first); with it, it waits for ``ticket``'s reply. A
        ticket past its deadline stops the wedged guardian (``ETIMEDOUT``).
        """
        with self._lock:
            while not ticket.done:
                sock = self._sock
                if sock is None or self._owner != os.getpid() or not self._pending:
                    ticket._fail(OSError(errno.ECHILD, "the guardian process went away"), lost=True)
                    break
                if not block and not _readable(sock):
                    if time.monotonic() > ticket.deadline:
                        self._discard(self._wedged(), lost=False)
                        continue
                    return False
                self._receive(sock)
        return True

    def _wedged(self) -> OSError:
        return OSError(
            errno.ETIMEDOUT, f"corral's guardian process did not answer in {self._timeout:g} s"
        )

    def _receive(self, sock: socket.socket) -> None:
        """One reply, to the oldest pending ticket (blocking, with the socket's timeout)."""
        try:
            msg, ancdata, _, _ = sock.recvmsg(1 << 16, socket.CMSG_SPACE(_MAX_FDS * 4))
        except TimeoutError:
            # Wedged (stopped, or starved for ten seconds): a late answer would be
            # taken for the next question's, so this guardian is done. Its children
            # die with it; the next request starts another.
            self._discard(self._wedged(), lost=False)
            return
        except OSError:
            msg, ancdata = b"", []
        got = _fds(ancdata)
        if not msg:
            for fd in got:
                os.close(fd)
            self._discard()  # the guardian went away (killed from outside)
            return
        ticket = self._pending.popleft()
        ticket.reply, ticket.fds = marshal.loads(msg), got

    def _ask(self, order: dict[str, Any], fds: list[int]) -> tuple[dict[str, Any], list[int]]:
        """One request and its reply (with the descriptors it carries), blocking.

        A guardian that went away (killed from outside) is replaced, once.
        """
        for attempt in (1, 2):
            ticket = self.submit(order, fds)
            self.collect(ticket, block=True)
            if ticket.reply is not None:
                return ticket.reply, ticket.fds
            assert ticket.error is not None
            if not ticket.lost:
                raise ticket.error
            if attempt == 2:
                raise OSError(errno.ECHILD, "the guardian process does not answer")
        raise AssertionError("unreachable")


_nofile_soft: int | None = None


def _raise_nofile() -> int:
    """Raise this process's soft limit of open descriptors to its hard limit (at most
    ``_NOFILE_WANTED``), once; returns the soft limit it had, which children get.

    A host keeps a few descriptors per child (pipes, its status pipe, the
    sandbox's one-shot descriptors until the child is reaped): a common soft limit
    of 1024 would cap a host at some tens of sandboxed extensions. The guardian
    puts the old soft limit back for itself, so every child starts with it.
    """
    global _nofile_soft
    if _nofile_soft is None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        _nofile_soft = soft
        wanted = _NOFILE_WANTED if hard == resource.RLIM_INFINITY else min(hard, _NOFILE_WANTED)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            # Refused (e.g. above the kernel's nr_open): keep what we have.
            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return _nofile_soft


def spawned(reply: dict[str, Any], got: list[int], argv0: str) -> tuple[int, ChildStatus]:
    """The pid and status pipe a spawn's reply gives (its descriptors taken).

    Raises:
        OSError: the guardian could not fork.
    """
    if "errno" in reply:
        for fd in got:
            os.close(fd)
        err = reply["errno"]
        raise OSError(err, f"{os.strerror(err)} {reply.get('detail', '')}".strip(), argv0)
    return reply["pid"], ChildStatus(got[0], argv0, got[1] if len(got) > 1 else -1)


def _readable(sock: socket.socket) -> bool:
    """A reply is waiting (or the guardian went away): a receive will not block."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


def _fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    out: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            out += array.array("i", data[:usable]).tolist()
    return out


_guardian = Guardian()


def guardian() -> Guardian:
    """This process's guardian (started on first use)."""
    return _guardian


def guardian_pids() -> set[int]:
    """The guardian's pid and those of its parked spares (see ``Guardian.own_pids``):
    what a check for leftover processes leaves out. Empty before it started."""
    return _guardian.own_pids()


def start_guardian() -> int | None:
    """Start this process's guardian now, so that the first spawn does not wait for it.

    A command that will start extensions calls this first thing: the guardian's
    start-up (a fresh interpreter, ~20 ms) then overlaps the host's own.

    Returns:
        The guardian's pid; None if it could not be started (the first spawn then
        says why).
    """
    try:
        _guardian.start()
    except OSError:
        return None
    return _guardian.pid


def sweep_orphans() -> list[tuple[int, int]]:
    """Kill whatever children spawned through :func:`sandbox.spawn` left behind.

    Every process whose parent has exited is adopted by the guardian (a child
    subreaper): the group of an extension that exited, a daemon that left its
    session and cleared its environment. This SIGKILLs them all in one pass.

    Returns:
        ``(pid, pidfd)`` per process killed: wait for each pidfd to become readable
        (the process is gone), then close it. Empty on a platform without pidfds.
    """
    if not hasattr(os, "pidfd_open"):
        return []
    return _guardian.sweep()
