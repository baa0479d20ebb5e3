"""Child processes spawned from one long-lived thread.

Why not ``trio.lowlevel.open_process``: it forks from a trio worker thread, and
worker threads exit after 10 s idle. ``PR_SET_PDEATHSIG`` (which the sandbox sets
so a child dies with the host, and which bwrap's ``--die-with-parent`` uses) fires
when the *thread* that forked the child exits, so every extension would be killed
10 s after the last spawn. Forking from one daemon thread that lives as long as
the host process keeps "dies with the host" true and idle extensions alive.

Exit is awaited on a pidfd where the kernel has them (Linux ≥ 5.3), else in a
worker thread; never by polling.
"""

from __future__ import annotations

import os
import queue
import subprocess
import threading
import typing
from collections.abc import Callable

import outcome
import trio

__all__ = ["ChildProcess", "open_child"]


@typing.final
class _SpawnThread:
    """A daemon thread that runs spawn jobs for the whole life of the process."""

    _lock = threading.Lock()
    _instance: _SpawnThread | None = None

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="corral-spawner", daemon=True).start()

    @classmethod
    def get(cls) -> _SpawnThread:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def _loop(self) -> None:
        while True:
            self._jobs.get()()

    async def run(self, fn: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        box: list[outcome.Outcome[subprocess.Popen[bytes]]] = []

        def job() -> None:
            box.append(outcome.capture(fn))
            token.run_sync_soon(done.set)

        self._jobs.put(job)
        # Shielded: once queued, the process will exist, and only our caller can own
        # (and so reap) it. A pending cancel is delivered at the caller's next checkpoint.
        with trio.CancelScope(shield=True):
            await done.wait()
        return box[0].unwrap()


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


async def open_child(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str,
    preexec_fn: Callable[[], None] | None,
) -> ChildProcess:
    """Spawn ``argv`` with piped stdio in a new session, from the spawner thread.

    Raises:
        OSError: the executable could not be started (not found, not executable).

    Cancellation: not cancellable once the spawn is queued (it takes milliseconds);
    the process is returned and a pending cancel arrives at the next checkpoint.
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

        def spawn() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                argv,
                stdin=in_r,
                stdout=out_w,
                stderr=err_w,
                env=env,
                cwd=cwd,
                close_fds=True,
                start_new_session=True,
                preexec_fn=preexec_fn,
            )

        popen = await _SpawnThread.get().run(spawn)
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
