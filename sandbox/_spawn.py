"""Spawning a plan from a thread that lives as long as the host.

``PR_SET_PDEATHSIG`` is tied to the thread that forks (see :mod:`sandbox._preexec`).
An async host usually forks from a worker thread that may exit at any time, so
:func:`spawn` hands the ``fork`` to one dedicated daemon thread, started on first
use and kept until the interpreter exits. It is a plain blocking call: from trio,
run it with ``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import queue
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import IO, Any

from ._plan import LaunchPlan
from ._preexec import allow_spawning_thread, preexec_for

__all__ = ["spawn"]

_File = int | IO[Any] | None

_jobs: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen[bytes]], Future[Any]]] = (
    queue.SimpleQueue()
)
_started = threading.Lock()
_thread: threading.Thread | None = None


def _serve() -> None:
    while True:
        job, future = _jobs.get()
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(job())
            except BaseException as exc:
                future.set_exception(exc)


def _ensure_thread() -> None:
    global _thread
    with _started:
        if _thread is None:
            _thread = threading.Thread(target=_serve, name="corral-sandbox-spawner", daemon=True)
            _thread.start()
            assert _thread.ident is not None
            allow_spawning_thread(_thread.ident)


def spawn(
    plan: LaunchPlan,
    *,
    stdin: _File = subprocess.PIPE,
    stdout: _File = subprocess.PIPE,
    stderr: _File = subprocess.PIPE,
    prepare: bool = True,
) -> subprocess.Popen[bytes]:
    """Start ``plan`` the way the sandbox expects, from the spawner thread.

    Equivalent to ``subprocess.Popen(plan.argv, env=plan.env, cwd=plan.cwd,
    start_new_session=True, close_fds=True, pass_fds=plan.pass_fds,
    preexec_fn=preexec_for(plan))``. The caller still owns the process: it reaps
    it and then calls ``sandbox.cleanup(plan)``.

    Args:
        plan: the plan to start (each plan at most once).
        stdin: as for ``Popen``.
        stdout: as for ``Popen``.
        stderr: as for ``Popen``.
        prepare: run :func:`preexec_for` in the child (limits, cgroup, death with
            the host); False starts ``plan.argv`` as a plain process in a new
            session (a caller that confines nothing, like an unsandboxed shell).

    Returns:
        The started process.

    Raises:
        OSError: the program could not be started.
    """
    _ensure_thread()
    future: Future[subprocess.Popen[bytes]] = Future()

    def job() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            plan.argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=plan.env,
            cwd=plan.cwd,
            start_new_session=True,
            close_fds=True,
            pass_fds=tuple(plan.pass_fds),
            preexec_fn=preexec_for(plan) if prepare else None,
        )

    _jobs.put((job, future))
    return future.result()
