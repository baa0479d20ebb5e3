"""Child processes of a launch plan, with piped stdio, awaited without polling.

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
    """A running child with piped stdio; :meth:`wait` reaps it."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdin: trio.lowlevel.FdStream,
        stdout: trio.lowlevel.FdStream,
        stderr: trio.lowlevel.FdStream,
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
                if self._pidfd is not None:
                    os.close(self._pidfd)
                    self._pidfd = None
        rc = self._popen.returncode
        assert rc is not None
        return rc

    def _wait_blocking(self) -> None:
        # WNOWAIT: only wait; the reaping waitpid happens in the trio thread.
        os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)


async def open_child(plan: LaunchPlan) -> ChildProcess:
    """Spawn ``plan`` with piped stdio (in a new session, from the spawner thread).

    Raises:
        OSError: the executable could not be started (not found, not executable).

    Cancellation: not cancellable once started (it takes milliseconds); the process
    is returned and a pending cancel arrives at the caller's next checkpoint, so
    the caller can always reap what was spawned.
    """
    # os.pipe() fds are close-on-exec (PEP 446); Popen dup2s the child's ends.
    fds: list[int] = []
    try:
        in_r, in_w = os.pipe()
        fds += [in_r, in_w]
        out_r, out_w = os.pipe()
        fds += [out_r, out_w]
        err_r, err_w = os.pipe()
        fds += [err_r, err_w]
        popen = await trio.to_thread.run_sync(
            functools.partial(spawn, plan, stdin=in_r, stdout=out_w, stderr=err_w)
        )
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    # The child has its copies; ours must go so EOF reaches the other side.
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    return ChildProcess(
        popen,
        trio.lowlevel.FdStream(in_w),
        trio.lowlevel.FdStream(out_r),
        trio.lowlevel.FdStream(err_r),
    )
