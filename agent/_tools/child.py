"""One confined child process, owned by the task that opened it.

Dynamic tools (one run per call) and stdio MCP servers (long-lived) both start a
program the agent does not trust. :func:`open_child` plans it with the
:mod:`sandbox` package (the backend the session chose; without one, the ``none``
backend, which still applies the request's limits), spawns it with
:func:`supervisor.open_child` (the one child wrapper), and hands back its pipes as
trio streams. Leaving the block stops it, whatever happened (normal
exit, error, cancellation): the stop ladder of :class:`StopLadder` (stdin closed,
a grace period, ``SIGTERM`` to the process group, a second grace, ``SIGKILL``),
then ``SIGKILL`` to the group again so no background job survives, the process
reaped, every descriptor closed and the plan released (``sandbox.cleanup``, which
also kills what is left in the plan's cgroup). All of it is shielded and bounded.

With bubblewrap the process held here is bwrap; killing its process group ends
the sandbox, whose pid namespace takes every process in it along. A child with a
network list gets its egress proxy (an :class:`~supervisor.Egress`) for as long as
the block runs.
"""

from __future__ import annotations

import contextlib
import signal
import typing
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
import trio

from sandbox import LaunchPlan, LaunchRequest, Sandbox, select_sandbox
from sandbox._log import get_logger
from supervisor.lowlevel import ChildProcess, Egress, signal_group
from supervisor.lowlevel import open_child as spawn_child

__all__ = ["Child", "StopLadder", "exit_text", "open_child"]

log = get_logger(__name__)

#: Bound on the shielded reap after SIGKILL (immediate in practice).
_REAP_GRACE = 5.0


class StopLadder(msgspec.Struct, frozen=True, kw_only=True):
    """How a child is asked to stop before it is killed (seconds; 0 skips a rung)."""

    #: After stdin is closed, wait this long for the child to exit by itself.
    close_grace: float = 0.0
    #: After ``SIGTERM`` to the process group, wait this long before ``SIGKILL``.
    term_grace: float = 0.0


def exit_text(returncode: int | None) -> str:
    """``exit status 3`` or ``killed by SIGKILL`` (bwrap reports signal N as status 128 + N)."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


@typing.final
class Child:
    """A started child: its pid, pipes and exit (a :class:`supervisor.ChildProcess`
    with the plan it was spawned from and the stop ladder).

    Attributes:
        pid: the process id (bwrap's, when sandboxed); also its process group.
        plan: what was spawned (backend, notes).
        stdin: the child's stdin.
        stdout: the child's stdout.
        stderr: the child's stderr.
    """

    def __init__(self, process: ChildProcess, plan: LaunchPlan) -> None:
        self._process = process
        self.pid = process.pid
        self.plan = plan
        self.stdin = process.stdin
        self.stdout = process.stdout
        self.stderr = process.stderr

    def __repr__(self) -> str:
        return f"<Child pid={self.pid} backend={self.plan.backend} returncode={self.returncode}>"

    @property
    def returncode(self) -> int | None:
        """The exit status once reaped (negative: killed by that signal)."""
        return self._process.returncode

    async def wait(self) -> int:
        """Wait for the child to exit and reap it; returns its status.

        Cancellation: only the wait is abandoned; the child keeps running.
        """
        return await self._process.wait()

    def kill(self) -> None:
        """``SIGKILL`` to the child's process group, which may outlive the child itself."""
        signal_group(self.pid, signal.SIGKILL)

    async def _wait_for(self, seconds: float) -> bool:
        if seconds > 0:
            with trio.move_on_after(seconds):
                await self.wait()
        return self.returncode is not None

    async def _stop(self, ladder: StopLadder) -> None:
        """The stop ladder, then SIGKILL to the group and the reap (bounded)."""
        if self.stdin is not None:
            with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
                await self.stdin.aclose()
        if not await self._wait_for(ladder.close_grace) and ladder.term_grace > 0:
            signal_group(self.pid, signal.SIGTERM)
            await self._wait_for(ladder.term_grace)
        # Even after a clean exit: background jobs may still hold the group.
        self.kill()
        with trio.move_on_after(_REAP_GRACE):
            await self.wait()
        if self.returncode is None:
            log.error("child_not_reaped", pid=self.pid)
        await self._process.aclose()


@asynccontextmanager
async def open_child(
    sandbox: Sandbox | None,
    request: LaunchRequest,
    *,
    ladder: StopLadder | None = None,
    egress: Egress | None = None,
) -> AsyncIterator[Child]:
    """Plan ``request`` with ``sandbox``, start it, and stop it when the block ends.

    Args:
        sandbox: the backend (None: the ``none`` backend: unconfined, with limits).
        request: what to run; ``argv[0]`` must be absolute.
        ladder: how the child is asked to stop (default: killed at once).
        egress: the proxy of a network list, served on the child's listener while the
            block runs (and stopped with the child).

    Raises:
        SandboxError: the backend cannot plan the request (``PlanError``, ``GrantChanged``).
        OSError: the program could not be started.

    Cancellation: the child's process group is killed and the child reaped, its
    pipes closed and its plan released (shielded, bounded) before ``Cancelled``
    propagates.
    """
    backend = sandbox if sandbox is not None else await trio.to_thread.run_sync(_unconfined)
    plan = await trio.to_thread.run_sync(backend.plan, request)
    try:
        process = await spawn_child(plan)
    except BaseException:
        _release(backend, plan)
        raise
    child = Child(process, plan)
    log.debug("child_started", name=request.name, pid=child.pid, backend=plan.backend)
    try:
        async with trio.open_nursery() as nursery:
            if egress is not None and process.egress_listener is not None:
                nursery.start_soon(egress.serve, process.egress_listener)
            try:
                yield child
            finally:
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await child._stop(ladder or StopLadder())
            _release(backend, plan)
        log.debug("child_stopped", name=request.name, pid=child.pid, status=child.returncode)


def _unconfined() -> Sandbox:
    return select_sandbox("off")


def _release(sandbox: Sandbox, plan: LaunchPlan) -> None:
    try:
        sandbox.cleanup(plan)
    except Exception as exc:  # best effort: the process is already gone
        log.warning("sandbox_cleanup_failed", backend=plan.backend, error=str(exc))
