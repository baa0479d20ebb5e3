"""Child processes of a launch plan, with piped stdio, awaited without polling.

The one wrapper for a child corral spawns: :func:`spawn_child` gives a
:class:`ChildProcess`, which the owner of a supervised child (an incarnation) and
the one-block child helper (:func:`supervisor._child.open_child`: ``bash``, the
browser, dynamic tools) both hold.

Children are started by the sandbox's guardian (:func:`sandbox.spawn`): the host
never forks, and spawning is a message to the guardian and back (a fraction of a
millisecond), made right here in the trio thread, with no worker thread. The
child is the guardian's: its start and its exit arrive on a status pipe, which
:meth:`ChildProcess.wait` waits on like any other descriptor; nothing polls.

A child with a network list comes with the egress proxy's listener, made inside
its network namespace (:attr:`ChildProcess.egress_listener`); its owner serves it
with an :class:`~supervisor._egress.Egress` for as long as it owns the child.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import typing

import trio

from sandbox import LaunchPlan, PendingSpawn, Spawned, submit_spawn

__all__ = ["ChildProcess", "spawn_child"]


@typing.final
class ChildProcess:
    """A running child; :meth:`wait` waits for its exit, :meth:`aclose` closes its pipes.

    ``stdin``, ``stdout`` and ``stderr`` are the host's ends of the pipes
    :func:`spawn_child` made (None for a stream that was not piped).
    """

    def __init__(
        self,
        child: Spawned,
        stdin: trio.lowlevel.FdStream | None,
        stdout: trio.lowlevel.FdStream | None,
        stderr: trio.lowlevel.FdStream | None,
    ) -> None:
        self._child = child
        self._status = child.status
        self.pid = child.pid
        self.args = child.args
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        #: The egress proxy's listener in the child's network namespace (a network
        #: list), once the program runs; closed with the pipes.
        self.egress_listener: socket.socket | None = None
        self._lock = trio.Lock()
        self._gone = False

    def __repr__(self) -> str:
        return f"<ChildProcess pid={self.pid} returncode={self.returncode}>"

    @property
    def returncode(self) -> int | None:
        """Exit status once it exited (negative: killed by that signal), else None."""
        return self._status.returncode

    @property
    def left_nothing(self) -> bool:
        """It exited and left no process behind (the guardian adopted none of its
        orphans): there is nothing of it to sweep. False while it runs, or when it may
        have (or the guardian has not said so yet: reads what it wrote, never blocks)."""
        status = self._status
        if not status.said_all:  # (then it writes nothing more: no read)
            status.read()
        return status.left_nothing

    @property
    def guardian_lost(self) -> bool:
        """It died because the guardian that started it died (``returncode`` is -9)."""
        return self._status.guardian_lost

    async def _until(self, done: typing.Callable[[], bool]) -> None:
        # One reader of the status pipe at a time (another may wait on it): a free
        # lock is taken without a scheduler pass, and an answer already there needs none.
        await _take(self._lock)
        try:
            status = self._status
            status.read()
            while not done():
                await trio.lowlevel.wait_readable(status.fileno())
                status.read()
        finally:
            self._lock.release()

    async def started(self) -> None:
        """Wait until the program runs.

        Raises:
            OSError: it could not be started (not found, not executable, ...).

        Cancellation: stops waiting; the child may still start (wait for it).
        """
        await self._until(lambda: self._status.started is not None)
        if self._status.error is not None:
            raise self._status.error
        if self.egress_listener is None:
            self.egress_listener = self._child.take_listener()

    def ended_now(self) -> bool:
        """The guardian has said all about the child (its exit status, whether it left
        anything): what :meth:`ended` waits for, read now, never blocking."""
        status = self._status
        if not status.said_all:
            status.read()
        return status.said_all

    async def ended(self) -> None:
        """Wait until the guardian said all about the child: its exit status, and
        whether it left anything behind (:attr:`left_nothing`).

        Cancellation: stops waiting.
        """
        await self._until(lambda: self._status.said_all)

    @property
    def gone(self) -> bool:
        """It exited (:meth:`exited` saw it, or its exit status came)."""
        return self._gone or self._status.returncode is not None

    async def exited(self) -> None:
        """Wait until the child exited: its pidfd tells at once, a hop before the
        guardian reaps it and writes the exit status :meth:`wait` waits for (the
        rest of a stop need not wait for that). Without a pidfd, as :meth:`wait`.
        One task at a time.

        Cancellation: stops waiting; the child is not signalled.
        """
        fd = self._status.pidfd
        if fd < 0:
            await self.wait()
            return
        self._status.read()
        if self._status.returncode is None:
            await trio.lowlevel.wait_readable(fd)
        self._gone = True

    async def wait(self) -> int:
        """Wait for the child to exit.

        Cancellation: stops waiting; the child is not signalled, so the caller must
        wait again (the shutdown ladder does).
        """
        await self._until(lambda: self._status.returncode is not None)
        rc = self._status.returncode
        assert rc is not None
        return rc

    def close(self) -> None:
        """Close the pipes (and the status pipe of a child that exited), at once."""
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        if self.egress_listener is not None:
            self.egress_listener.close()
        self._child.drop_egress()
        if self._status.returncode is not None:
            if self._status.pidfd >= 0:
                trio.lowlevel.notify_closing(self._status.pidfd)
            self._status.close()

    async def aclose(self) -> None:
        """Close the pipes (and the status pipe of a child that exited).

        Cancellation: the pipes are closed all the same.
        """
        self.close()
        await trio.lowlevel.checkpoint()


#: One task per event loop waits for the guardian's socket (trio allows one reader per
#: descriptor); the others wait for it to pass the replies on.
_GUARDIAN_READER: trio.lowlevel.RunVar[trio.Lock] = trio.lowlevel.RunVar("guardian_reader")


async def _answered(pending: PendingSpawn) -> None:
    """Until the guardian answered ``pending``, without blocking the event loop.

    The replies come in the order of the requests to whichever task reads them;
    a reader wakes when the socket is readable, or after 50 ms to look again (the
    guardian may have been replaced meanwhile, by another thread).
    """
    try:
        lock = _GUARDIAN_READER.get()
    except LookupError:
        lock = trio.Lock()
        _GUARDIAN_READER.set(lock)
    while not pending.answered():
        await _take(lock)
        try:
            if pending.answered():
                return
            fd = pending.fileno()
            with trio.move_on_after(0.05):
                if fd >= 0:
                    await trio.lowlevel.wait_readable(fd)
                else:
                    await trio.sleep_forever()
        finally:
            lock.release()


async def _take(lock: trio.Lock) -> None:
    """Acquire ``lock``: at once when it is free (no scheduler pass: the caller waits for
    a descriptor next, or has its answer already), else waiting in line."""
    try:
        lock.acquire_nowait()
    except trio.WouldBlock:
        await lock.acquire()


async def spawn_child(
    plan: LaunchPlan,
    *,
    stdin: int = subprocess.PIPE,
    stdout: int = subprocess.PIPE,
    stderr: int = subprocess.PIPE,
    prepare: bool = True,
) -> ChildProcess:
    """Spawn ``plan`` in a new session (its own process group).

    The new session detaches the child from the user's terminal, so it cannot read
    from it or inject input; the process group lets the host signal the child and
    its children at once. Owners stop it with their own ladder and
    :func:`~supervisor._reap.reap_group`; :func:`~supervisor._child.open_child`
    does all of it for a child that lives as long as one block.

    Args:
        plan: what to run.
        stdin: ``subprocess.PIPE`` (default), ``DEVNULL`` or a descriptor.
        stdout: as ``stdin``.
        stderr: as ``stdin``, or ``subprocess.STDOUT`` (into the stdout pipe).
        prepare: apply the plan's preparation in the child (limits, cgroup, death
            with the host); False starts ``plan.argv`` as a plain process in a new
            session (the unsandboxed ``bash`` tool). See :func:`sandbox.spawn`.

    Raises:
        OSError: the executable could not be started (not found, not executable), or
            a child with a network list did not hand over its egress listener.

    Cancellation: the spawn itself is not cancellable (the guardian's answer, a
    fraction of a millisecond on a quiet machine; other tasks run meanwhile, and
    many spawns at once are pipelined to the guardian); cancelled while waiting
    for the program to start, the child is killed and waited for before the
    cancellation propagates.
    """
    pending = submit_spawn(
        plan, stdin=stdin, stdout=stdout, stderr=stderr, prepare=prepare, files=False
    )
    try:
        with trio.CancelScope(shield=True):  # the guardian answers within ASK_TIMEOUT
            await _answered(pending)
    except BaseException:
        with contextlib.suppress(OSError):  # the child, if it came, must not stay
            orphan = pending.finish()
            orphan.kill()
            orphan.close()
        raise
    child = pending.finish()  # answered: at once
    streams = [trio.lowlevel.FdStream(fd) if fd >= 0 else None for fd in child.fds]
    proc = ChildProcess(child, *streams)
    try:
        await proc.started()
    except BaseException:
        with trio.CancelScope(shield=True):
            child.kill()
            await proc.wait()
            await proc.aclose()
        raise
    return proc
