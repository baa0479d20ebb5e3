"""Starting a plan: through the guardian, from any thread, without forking the host.

:func:`spawn` hands the plan to this process's guardian (:mod:`sandbox._guardian`),
which forks a child that prepares itself (session, limits, cgroup, death with the
guardian; :func:`sandbox._preexec.child_order`) and executes the plan. It returns a
:class:`Spawned`, a small ``Popen``-like handle. The child is the guardian's, not
ours: its exit status arrives on the status pipe, so it is never waited for with
``waitpid`` here.

A plan with an egress listener (a network list, ``plan.egress_port``) gets one more
descriptor: a socket on which the child, in its new network namespace, sends the
listening socket back before ``exec``; :meth:`Spawned.take_listener` receives it.
"""

from __future__ import annotations

import array
import contextlib
import errno
import os
import selectors
import signal
import socket
import subprocess
import time
import typing
from typing import IO, Any

from ._guardian import ChildStatus, Ticket, guardian, spawned
from ._plan import LaunchPlan
from ._preexec import child_order

__all__ = ["PendingSpawn", "Spawned", "spawn", "submit_spawn"]

_File = int | IO[Any] | None


@typing.final
class Spawned:
    """A child started by :func:`spawn`: the parts of ``subprocess.Popen`` corral uses.

    ``stdin``, ``stdout`` and ``stderr`` are binary files for the streams spawned
    with ``PIPE`` (else None); with ``files=False``, :attr:`fds` holds our ends as
    descriptors instead. The caller owns them and :attr:`status`.
    """

    def __init__(
        self,
        pid: int,
        args: list[str],
        status: ChildStatus,
        fds: tuple[int, int, int],
        files: bool,
        egress: socket.socket | None = None,
    ) -> None:
        self.pid = pid
        self.args = args
        #: Whether the program started, and its exit status (see :class:`ChildStatus`).
        self.status = status
        #: Our ends of the stdin, stdout and stderr pipes (-1: not piped), when not
        #: wrapped in :attr:`stdin`, :attr:`stdout` and :attr:`stderr`.
        self.fds = (-1, -1, -1) if files else fds
        #: What :meth:`communicate` read so far (stdout, stderr) and has yet to write.
        self._got = (bytearray(), bytearray())
        self._pending = memoryview(b"")
        self.stdin: IO[bytes] | None = None
        self.stdout: IO[bytes] | None = None
        self.stderr: IO[bytes] | None = None
        #: Our end of the socket the child sends the egress listener on (None: no list).
        self._egress = egress
        if files:
            r_in, r_out, r_err = fds
            self.stdin = os.fdopen(r_in, "wb") if r_in >= 0 else None
            self.stdout = os.fdopen(r_out, "rb") if r_out >= 0 else None
            self.stderr = os.fdopen(r_err, "rb") if r_err >= 0 else None

    def close(self) -> None:
        """Close our ends of the pipes and the status pipe."""
        for f in (self.stdin, self.stdout, self.stderr):
            if f is not None:
                f.close()
        for fd in self.fds:
            if fd >= 0:
                os.close(fd)
        self.fds = (-1, -1, -1)
        self.status.close()
        self.drop_egress()

    def drop_egress(self) -> None:
        """Close our end of the socket the egress listener comes on, if still open
        (a child that never started; :meth:`close` does it too)."""
        if self._egress is not None:
            self._egress.close()
            self._egress = None

    def take_listener(self) -> socket.socket | None:
        """The egress proxy's listener, which the child made in its own network namespace
        (None without a network list). Call it once the program runs (the child sent
        the listener before ``exec``); never blocks.

        Raises:
            OSError: the child did not send it (``EPROTO``).
        """
        if self._egress is None:
            return None
        got: list[int] = []
        try:
            _, ancdata, _, _ = self._egress.recvmsg(
                16, socket.CMSG_SPACE(4), socket.MSG_DONTWAIT | socket.MSG_CMSG_CLOEXEC
            )
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    got += array.array("i", data[: len(data) - len(data) % 4]).tolist()
        except BlockingIOError:
            pass
        finally:
            self.drop_egress()
        if len(got) != 1:
            for fd in got:
                os.close(fd)
            raise OSError(errno.EPROTO, "the child did not hand over its egress listener")
        return socket.socket(fileno=got[0])

    def __repr__(self) -> str:
        return f"<Spawned pid={self.pid} returncode={self.returncode}>"

    @property
    def returncode(self) -> int | None:
        """Exit status once it exited (negative: killed by that signal), else None."""
        return self.status.returncode

    def _block(self, deadline: float | None) -> bool:
        """Wait until the status pipe is readable (or closed); False on timeout."""
        fd = self.status.fileno()
        if fd < 0:
            return True
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            return bool(sel.select(timeout))

    def wait_started(self) -> None:
        """Block until the program runs.

        Raises:
            OSError: it could not be started (not found, not executable, bad cwd...).
        """
        while self.status.started is None:
            self._block(None)
            self.status.read()
        if self.status.error is not None:
            raise self.status.error

    def poll(self) -> int | None:
        """The exit status if it exited, else None (never blocks)."""
        self.status.read()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit; raises ``subprocess.TimeoutExpired`` after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if not self._block(deadline):
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        rc = self.returncode
        assert rc is not None
        return rc

    def send_signal(self, sig: int) -> None:
        """Signal the child, unless it already exited (its pid may be reused then)."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)

    def communicate(self, data: bytes = b"", timeout: float | None = None) -> tuple[bytes, bytes]:
        """Write ``data`` to stdin and close it, read stdout and stderr to the end, wait.

        Raises:
            subprocess.TimeoutExpired: not done within ``timeout``; what was read is
                kept, so call it again (after :meth:`kill`) to collect the rest.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        got = self._got
        with selectors.DefaultSelector() as sel:
            if self.stdin is not None and not self.stdin.closed:
                self._pending = self._pending or memoryview(data)
                if self._pending:
                    os.set_blocking(self.stdin.fileno(), False)
                    sel.register(self.stdin, selectors.EVENT_WRITE)
                else:
                    self.stdin.close()
            for f in (self.stdout, self.stderr):
                if f is not None and not f.closed:
                    sel.register(f, selectors.EVENT_READ)
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
                for key, _ in sel.select(left):
                    f = typing.cast(IO[bytes], key.fileobj)
                    if f is self.stdin:
                        try:
                            sent = os.write(f.fileno(), self._pending[:65536])
                            self._pending = self._pending[sent:]
                        except BrokenPipeError:
                            self._pending = memoryview(b"")
                        if not self._pending:
                            sel.unregister(f)
                            f.close()
                        continue
                    chunk = os.read(f.fileno(), 65536)
                    if chunk:
                        got[f is self.stderr].extend(chunk)
                    else:
                        sel.unregister(f)
                        f.close()
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        self.wait(left)
        return bytes(got[0]), bytes(got[1])


def _child_end(spec: _File, fd: int, opened: list[int]) -> tuple[int, int]:
    """(descriptor for the child, our end or -1) for one standard stream."""
    if spec == subprocess.PIPE:
        r, w = os.pipe()
        opened += [r, w]
        return (r, w) if fd == 0 else (w, r)
    if spec == subprocess.DEVNULL:
        null = os.open(os.devnull, os.O_RDWR)
        opened.append(null)
        return null, -1
    if spec is None:
        return fd, -1
    if isinstance(spec, int):
        return spec, -1
    return spec.fileno(), -1


def spawn(
    plan: LaunchPlan,
    *,
    stdin: _File = subprocess.PIPE,
    stdout: _File = subprocess.PIPE,
    stderr: _File = subprocess.PIPE,
    prepare: bool = True,
    wait_started: bool = True,
    files: bool = True,
) -> Spawned:
    """Start ``plan`` through the guardian, from any thread.

    In a new session (its own process group), with only its standard streams and
    ``plan.pass_fds`` open, and (``prepare``) the plan's limits, cgroups, tmpfs and
    death with the guardian applied before ``exec``. The caller still owns the
    process: it waits for it (:meth:`Spawned.wait`) and then calls
    ``sandbox.cleanup(plan)``.

    Args:
        plan: the plan to start (each plan at most once).
        stdin: ``subprocess.PIPE``, ``DEVNULL``, None (this process's), a descriptor
            or a file.
        stdout: as ``stdin``.
        stderr: as ``stdin``, or ``subprocess.STDOUT``.
        prepare: see :func:`sandbox._preexec.child_order`.
        wait_started: block until the program runs (and raise if it could not
            start); False returns at once, and :meth:`Spawned.wait_started` or the
            status pipe tell.
        files: wrap our ends of the pipes in file objects (else :attr:`Spawned.fds`).

    Raises:
        OSError: the program could not be started (with ``wait_started``), or the
            guardian could not fork.
    """
    pending = submit_spawn(
        plan, stdin=stdin, stdout=stdout, stderr=stderr, prepare=prepare, files=files
    )
    child = pending.finish()
    if wait_started:
        try:
            child.wait_started()
        except OSError:
            child.close()
            raise
    return child


def submit_spawn(
    plan: LaunchPlan,
    *,
    stdin: _File = subprocess.PIPE,
    stdout: _File = subprocess.PIPE,
    stderr: _File = subprocess.PIPE,
    prepare: bool = True,
    files: bool = True,
) -> PendingSpawn:
    """Send ``plan``'s order to the guardian and return without waiting for its fork.

    As :func:`spawn` (same arguments), in two halves: many orders go out back to
    back, and each :meth:`PendingSpawn.finish` takes its child once the guardian
    answered (:meth:`PendingSpawn.answered`, after :meth:`PendingSpawn.fileno`
    became readable), so an event loop starting many children never blocks on
    one fork. Call ``finish`` exactly once, whatever happens in between: it owns
    the child's descriptors until then.

    Raises:
        OSError: a pipe could not be made.
    """
    opened: list[int] = []
    egress: socket.socket | None = None
    try:
        child_in, our_in = _child_end(stdin, 0, opened)
        child_out, our_out = _child_end(stdout, 1, opened)
        if stderr == subprocess.STDOUT:
            child_err, our_err = child_out, -1
        else:
            child_err, our_err = _child_end(stderr, 2, opened)
        fds = [child_in, child_out, child_err, *plan.pass_fds]
        order = child_order(plan, [0, 1, 2, *plan.pass_fds], prepare=prepare)
        if plan.egress_port and prepare:
            egress, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            opened.append(theirs.detach())
            target = max([2, *plan.pass_fds]) + 1
            fds.append(opened[-1])
            order["targets"].append(target)
            order["egress"] = [target, plan.egress_port]
        ticket = guardian().submit(order, fds)
    except BaseException:
        for fd in opened:
            os.close(fd)
        if egress is not None:
            egress.close()
        raise
    return PendingSpawn(plan, order, fds, ticket, opened, (our_in, our_out, our_err), files, egress)


@typing.final
class PendingSpawn:
    """An order sent to the guardian whose reply may not have come (:func:`submit_spawn`)."""

    def __init__(
        self,
        plan: LaunchPlan,
        order: dict[str, Any],
        fds: list[int],
        ticket: Ticket,
        opened: list[int],
        ours: tuple[int, int, int],
        files: bool,
        egress: socket.socket | None,
    ) -> None:
        self._plan = plan
        self._order = order
        self._fds = fds
        self._ticket = ticket
        self._opened = opened
        self._ours = ours
        self._files = files
        self._egress = egress

    def __repr__(self) -> str:
        return f"<PendingSpawn {self._plan.argv[0]!r} answered={self._ticket.done}>"

    def fileno(self) -> int:
        """The guardian's connection (-1: gone): readable when a reply may have come."""
        return guardian().fileno()

    def answered(self) -> bool:
        """Take the replies that came; True once this order's did (never blocks)."""
        return guardian().collect(self._ticket, block=False)

    def finish(self) -> Spawned:
        """The child (waiting for the guardian's reply if it has not come).

        A guardian that went away before answering is replaced and asked once more.

        Raises:
            OSError: the guardian could not fork, or did not answer in time.
        """
        argv0 = self._plan.argv[0]
        try:
            guardian().collect(self._ticket, block=True)
            ticket = self._ticket
            if ticket.reply is not None:
                pid, status = spawned(ticket.reply, ticket.fds, argv0)
            elif ticket.lost:
                pid, status = guardian().spawn(self._order, self._fds, argv0)
            else:
                assert ticket.error is not None
                raise ticket.error
        except BaseException:
            for fd in self._opened:
                os.close(fd)
            if self._egress is not None:
                self._egress.close()
            raise
        # The child has its copies; ours must go so that EOF reaches the other side.
        for fd in self._opened:
            if fd not in self._ours:
                os.close(fd)
        return Spawned(pid, list(self._plan.argv), status, self._ours, self._files, self._egress)
