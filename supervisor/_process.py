"""Child processes of a launch plan, with piped stdio, awaited without polling.

The one wrapper for a child corral spawns: extensions (the supervisor) and the
agent's ``bash`` tool both use :func:`open_child` and :class:`ChildProcess`.

Why not ``trio.lowlevel.open_process``: it forks from a trio worker thread, and
worker threads exit after 10 s idle. ``PR_SET_PDEATHSIG`` (which the sandbox sets
so a child dies with the host, and which bwrap's ``--die-with-parent`` uses) fires
when the *thread* that forked the child exits, so every extension would be killed
10 s after the last spawn. :func:`sandbox.spawn` forks from one daemon thread that
lives as long as the host process, which keeps "dies with the host" true and idle
extensions alive.

Exit is awaited on a pidfd where the kernel has them (Linux ≥ 5.3), else in a
worker thread; never by polling.
"""

from __future__ import annotations

import functools
import os
import subprocess
import typing

import trio

from sandbox import LaunchPlan, spawn

__all__ = ["ChildProcess", "open_child"]


@typing.final
class ChildProcess:
    """A running child; :meth:`wait` reaps it, :meth:`aclose` closes its pipes.

    ``stdin``, ``stdout`` and ``stderr`` are the host's ends of the pipes
    :func:`open_child` made (None for a stream that was not piped).
    """

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdin: trio.lowlevel.FdStream | None,
        stdout: trio.lowlevel.FdStream | None,
        stderr: trio.lowlevel.FdStream | None,
    ) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.args = popen.args
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self._lock = trio.Lock()
        self._pidfd: int | None = None
        if hasattr(os, "pidfd_open"):
            try:
                self._pidfd = os.pidfd_open(popen.pid)
            except OSError:  # an old kernel or a seccomp filter: use a thread instead
                self._pidfd = None

    def __repr__(self) -> str:
        return f"<ChildProcess pid={self.pid} returncode={self.returncode}>"

    @property
    def returncode(self) -> int | None:
        """Exit status once reaped (negative: killed by that signal), else None."""
        return self._popen.returncode

    async def wait(self) -> int:
        """Wait for the child to exit and reap it.

        Cancellation: stops waiting; the child is not signalled and not reaped, so
        the caller must wait again (the shutdown ladder does).
        """
        async with self._lock:
            if self._popen.returncode is None:
                if self._pidfd is not None:
                    await trio.lowlevel.wait_readable(self._pidfd)
                else:
                    await trio.to_thread.run_sync(self._wait_blocking, abandon_on_cancel=True)
                self._popen.wait()
                self._close_pidfd()
        rc = self._popen.returncode
        assert rc is not None
        return rc

    def _wait_blocking(self) -> None:
        # WNOWAIT: only wait; the reaping waitpid happens in the trio thread.
        os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    async def aclose(self) -> None:
        """Close the pipes (and the pidfd of a child never waited for).

        Cancellation: the pipes are closed all the same.
        """
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                await stream.aclose()
        if self._popen.returncode is not None:
            self._close_pidfd()


async def open_child(
    plan: LaunchPlan, *, stdin: bool = True, merge_stderr: bool = False, prepare: bool = True
) -> ChildProcess:
    """Spawn ``plan`` in a new session (its own process group) with piped stdio.

    The new session detaches the child from the user's terminal, so it cannot read
    from it or inject input; the process group lets the host signal the child and
    its children at once.

    Args:
        plan: what to run.
        stdin: pipe stdin (False: ``/dev/null``).
        merge_stderr: send stderr into the stdout pipe (``stderr`` is then None).
        prepare: run the plan's preparation in the child (limits, cgroup, death
            with the host); False starts ``plan.argv`` as a plain process in a new
            session (the unsandboxed ``bash`` tool). See :func:`sandbox.spawn`.

    Raises:
        OSError: the executable could not be started (not found, not executable).

    Cancellation: not cancellable once started (it takes milliseconds); the process
    is returned and a pending cancel arrives at the caller's next checkpoint, so
    the caller can always reap what was spawned.
    """
    # os.pipe() fds are close-on-exec (PEP 446); Popen dup2s the child's ends.
    ours: list[int] = []
    theirs: list[int] = []
    try:
        child_in = subprocess.DEVNULL
        if stdin:
            child_in, w = os.pipe()
            ours.append(w)
            theirs.append(child_in)
        r, child_out = os.pipe()
        ours.append(r)
        theirs.append(child_out)
        child_err = subprocess.STDOUT
        if not merge_stderr:
            r, child_err = os.pipe()
            ours.append(r)
            theirs.append(child_err)
        start = functools.partial(
            spawn, plan, stdin=child_in, stdout=child_out, stderr=child_err, prepare=prepare
        )
        popen = await trio.to_thread.run_sync(start)
    except BaseException:
        for fd in ours + theirs:
            os.close(fd)
        raise
    # The child has its copies; ours must go so EOF reaches the other side.
    for fd in theirs:
        os.close(fd)
    streams = [trio.lowlevel.FdStream(fd) for fd in ours]
    return ChildProcess(
        popen,
        streams.pop(0) if stdin else None,
        streams.pop(0),
        streams.pop(0) if not merge_stderr else None,
    )
