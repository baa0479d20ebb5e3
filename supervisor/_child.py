"""A child that lives as long as one block: plan, spawn, serve, stop, reap, release.

A ``bash`` command, a dynamic tool's run and the headless browser each run a
program the agent does not trust, for as long as one call takes.
:func:`open_child` is the one way they start and stop it:

1. **plan**: a :class:`~sandbox.LaunchRequest` is planned by the backend given (in a
   worker thread: planning opens and checks paths), or by the ``none`` backend
   (unconfined, with the request's limits); a plan the caller made
   (:func:`sandbox.plan_shell`, or a plain process) is taken as it is. What the
   sandbox must do (a private network, descriptors to pass) is a field of the
   request, planned by ``sandbox``, never an edit of the plan's argv here;
2. **spawn**: through the guardian, in a new session (its own process group); a
   plan whose spawn fails or is cancelled is released at once (its descriptors:
   the bound paths, the seccomp filter);
3. **serve**: a network list's egress proxy (:class:`~supervisor._egress.Egress`)
   accepts on the child's listener while the block runs;
4. **stop**, however the block ends (its end, an error, cancellation), shielded
   and bounded: the :class:`StopLadder` (stdin closed, a grace period, ``SIGTERM``
   to the group, a second grace), then ``SIGKILL`` to the group, the child reaped,
   the guardian's orphans (what escaped the group) killed and awaited
   (:func:`~supervisor._reap.reap_group`), the pipes closed and the plan released
   (``sandbox.cleanup``, which also kills what is left in the plan's cgroup).

With bubblewrap the process held here is bwrap; killing its process group ends
the sandbox, whose pid namespace takes every process in it along.

Supervised children (extensions, tool hosts, stdio MCP servers) live across
calls and restarts: an :class:`~supervisor._incarnation.Incarnation` owns each
process, with a ladder that speaks its protocol, and ends it with the same reap.
How any child ended is told by :func:`~supervisor._restart.describe_exit`.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import typing
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
import trio

from sandbox import LaunchPlan, LaunchRequest, Sandbox, select_sandbox
from sandbox.log import get_logger

from ._egress import Egress
from ._process import ChildProcess, spawn_child
from ._reap import reap_group, signal_group

__all__ = ["Child", "StopLadder", "open_child"]

log = get_logger(__name__)

#: Bound on the shielded reap after SIGKILL (immediate in practice).
_REAP_GRACE = 5.0


class StopLadder(msgspec.Struct, frozen=True, kw_only=True):
    """How a child is asked to stop before it is killed (seconds; 0 skips a rung)."""

    #: After stdin is closed, wait this long for the child to exit by itself.
    close_grace: float = 0.0
    #: After ``SIGTERM`` to the process group, wait this long before ``SIGKILL``.
    term_grace: float = 0.0


@typing.final
class Child:
    """A started child: its pid, pipes and exit, and the plan it was spawned from.

    Attributes:
        pid: the process id (bwrap's, when sandboxed); also its process group.
        plan: what was spawned (backend, notes).
        stdin: the child's stdin (None unless piped).
        stdout: the child's stdout (None unless piped).
        stderr: the child's stderr (None unless piped).
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
        """The exit status once it exited (negative: killed by that signal)."""
        return self._process.returncode

    @property
    def guardian_lost(self) -> bool:
        """It died because the guardian that started it died."""
        return self._process.guardian_lost

    async def wait(self) -> int:
        """Wait for the child to exit; returns its status.

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
        """The stop ladder, then the reap (bounded); callers shield it."""
        if self.stdin is not None:
            with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
                await self.stdin.aclose()
        if not await self._wait_for(ladder.close_grace) and ladder.term_grace > 0:
            signal_group(self.pid, signal.SIGTERM)
            await self._wait_for(ladder.term_grace)
        # Even after a clean exit: background jobs may still hold the group.
        await reap_group(self._process, grace=_REAP_GRACE)
        if self.returncode is None:
            log.error("child_not_reaped", pid=self.pid)
        await self._process.aclose()


@asynccontextmanager
async def open_child(
    sandbox: Sandbox | None,
    launch: LaunchRequest | LaunchPlan,
    *,
    ladder: StopLadder | None = None,
    egress: Egress | None = None,
    stdin: int = subprocess.PIPE,
    stdout: int = subprocess.PIPE,
    stderr: int = subprocess.PIPE,
    prepare: bool = True,
) -> AsyncIterator[Child]:
    """Start ``launch`` and stop it when the block ends (see the module docstring).

    Args:
        sandbox: the backend that plans a request and releases the plan (None: a
            request is planned by the ``none`` backend; a plan is not released).
        launch: what to run (``argv[0]`` absolute): a request to plan, or a plan
            made by ``sandbox`` (or a plain one, with ``sandbox`` None), which this
            owns from the call on: it is released whatever happens.
        ladder: how the child is asked to stop (default: killed at once).
        egress: the proxy of a network list, served on the child's listener while
            the block runs.
        stdin: ``subprocess.PIPE`` (default), ``DEVNULL`` or a descriptor.
        stdout: as ``stdin``.
        stderr: as ``stdin``, or ``subprocess.STDOUT``.
        prepare: apply the plan's preparation in the child (see
            :func:`sandbox.spawn`); False for a plain process in a new session.

    Raises:
        SandboxError: the backend cannot plan the request (``PlanError``, ``GrantChanged``).
        OSError: the program could not be started.

    Cancellation: the child's process group and what escaped it are killed and
    the child reaped, its pipes closed and its plan released (shielded, bounded)
    before ``Cancelled`` propagates; also when it lands while the child starts.
    """
    if isinstance(launch, LaunchPlan):
        backend, plan = sandbox, launch
    else:
        backend = sandbox if sandbox is not None else select_sandbox("off")
        plan = await trio.to_thread.run_sync(backend.plan, launch)
    try:
        process = await spawn_child(
            plan, stdin=stdin, stdout=stdout, stderr=stderr, prepare=prepare
        )
    except BaseException:
        # Failed, or cancelled while the program started (an abort): the plan's
        # descriptors must not outlive the call.
        _release(backend, plan)
        raise
    child = Child(process, plan)
    log.debug("child_started", pid=child.pid, backend=plan.backend)
    listener = process.egress_listener
    try:
        if egress is None or listener is None:
            yield child
        else:
            async with _serving(egress, listener):
                yield child
    finally:
        with trio.CancelScope(shield=True):
            await child._stop(ladder or StopLadder())
            _release(backend, plan)
        log.debug("child_stopped", pid=child.pid, status=child.returncode)


@asynccontextmanager
async def _serving(egress: Egress, listener: socket.socket) -> AsyncIterator[None]:
    """Serve ``egress`` on ``listener`` while the block runs; the block's exception
    leaves as itself (the proxy never raises, so a group holds only the block's)."""
    lone: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(egress.serve, listener)
            try:
                yield
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) != 1:
            raise
        lone = group.exceptions[0]
    if lone is not None:
        raise lone  # out of the except clause: its own context stays


def _release(sandbox: Sandbox | None, plan: LaunchPlan) -> None:
    if sandbox is None:
        return
    try:
        sandbox.cleanup(plan)
    except Exception as exc:  # best effort: the process is already gone
        log.warning("sandbox_cleanup_failed", backend=plan.backend, error=str(exc))
