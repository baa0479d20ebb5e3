"""A job of the runtime: one accepted prompt or compaction, its state, its ending, and
the stream of its events (:class:`EventStream`).

:class:`~agent._runtime.Runtime` keeps the queue; a :class:`Job` keeps everything
else about itself: it runs its body in a scope :meth:`Job.abort` cancels, and
always says its own ``done``, also when the runtime closes first.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Literal

import trio

from sandbox.log import get_logger

from ._events import AgentEvent, Done, Emit, ErrorEvent, TurnEnd
from ._exceptions import AgentError

__all__ = ["EventStream", "Job", "JobKind", "JobState"]

log = get_logger(__name__)

JobKind = Literal["prompt", "compact"]


class JobState(enum.Enum):
    """Where a job is in its life."""

    #: Accepted, not started yet (it may already be the head of the queue).
    QUEUED = "queued"
    #: Started by the job task.
    RUNNING = "running"
    #: Its work is over; its ``done`` is being delivered. Abort no longer applies.
    ENDING = "ending"
    #: ``done`` delivered; out of the queue.
    FINISHED = "finished"


@typing.final
class Job:
    """One accepted prompt or compaction; it keeps its own state and says its own ``done``.

    The runtime's job task runs it (:meth:`run`), or, when the runtime closes first,
    ends it (:meth:`abandon`); either way :meth:`finish` takes it out of the queue.
    Transitions (all here)::

        QUEUED -> RUNNING -> ENDING -> FINISHED        (run, finish)
        QUEUED | RUNNING | ENDING -> FINISHED          (the runtime closed: abandon, finish)

    Attributes:
        seq: acceptance number, from 1; the queue order.
        kind: ``"prompt"`` or ``"compact"``.
        aborted: set when the job ended because of :meth:`abort`.
    """

    def __init__(
        self, seq: int, kind: JobKind, body: Callable[[Emit], Awaitable[object]], emit: Emit
    ) -> None:
        self.seq = seq
        self.kind = kind
        self.aborted = False
        self._body = body
        self._emit = emit
        self._state = JobState.QUEUED
        #: Set while the body runs: what :meth:`abort` cancels.
        self._scope: trio.CancelScope | None = None
        #: :meth:`abort` came before the body started: it never starts.
        self._abort_requested = False
        self._done_sent = False
        self._finished = trio.Event()

    def __repr__(self) -> str:
        return f"<Job #{self.seq} {self.kind} state={self._state.value}>"

    @property
    def state(self) -> JobState:
        """Where the job is now."""
        return self._state

    def abort(self) -> bool:
        """Cancel the job: now if it runs, as soon as it starts if it is queued.

        Returns:
            False when the job's work was already over (nothing to cancel).
        """
        if self._state in (JobState.ENDING, JobState.FINISHED):
            return False
        self._abort_requested = True
        if self._scope is not None:
            self._scope.cancel()
        return True

    async def wait(self) -> None:
        """Wait until the job's ``done`` was delivered.

        Cancellation: only the wait is abandoned; the job goes on.
        """
        await self._finished.wait()

    async def run(self) -> None:
        """Do the job's work in a scope :meth:`abort` cancels, then send its ending and
        ``done``; the job task calls this for the head of the queue.

        Cancellation: the job's own scope catches an abort; a cancellation from
        outside (the runtime closing) propagates, and :meth:`abandon` ends the job.
        """
        self._state = JobState.RUNNING  # QUEUED -> RUNNING
        started = False
        with trio.CancelScope() as scope:
            self._scope = scope
            if not self._abort_requested:
                started = True
                try:
                    await self._body(self._emit)
                except AgentError as exc:
                    await self._emit(ErrorEvent(message=str(exc)))
                except Exception as exc:  # a bug in one job must not end the session
                    log.exception("runtime_job_failed", job=self.seq, kind=self.kind)
                    await self._emit(ErrorEvent(message=f"internal error: {exc!r}"))
        self._scope = None
        self._state = JobState.ENDING  # RUNNING -> ENDING
        if scope.cancelled_caught or not started:
            self.aborted = True
            log.info("runtime_job_aborted", job=self.seq, kind=self.kind, started=started)
            if self.kind == "compact":
                await self._emit(ErrorEvent(message="compaction aborted; transcript unchanged"))
            elif not started:
                # A prompt cancelled while running got this from the loop already.
                await self._emit(TurnEnd(stop="aborted"))
        await self._emit(Done())
        self._done_sent = True

    async def abandon(self) -> None:
        """The runtime is closing before this job ended: say why, then ``done``.

        Cancellation: what was not sent is not sent (the caller bounds this).
        """
        try:
            if self._state is JobState.QUEUED:
                await self._emit(ErrorEvent(message="the runtime closed before this job ran"))
            elif self._state is JobState.RUNNING and self.kind == "compact":
                await self._emit(ErrorEvent(message="compaction aborted; transcript unchanged"))
            if not self._done_sent:
                await self._emit(Done())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # nobody is listening any more

    def finish(self) -> None:
        """Out of the queue: its waiters go on."""
        self._state = JobState.FINISHED  # ENDING -> FINISHED (or QUEUED/RUNNING on close)
        self._finished.set()


@typing.final
class EventStream:
    """The events of one job, ending after its ``done``: an async iterator.

    Events are buffered without bound (a job's events are bounded by the job), so a
    slow reader never holds up the queue. Closing the stream early drops the rest of
    the job's events; the job itself goes on (use :meth:`Runtime.abort` to stop it).
    """

    def __init__(self, job: Job, receive: trio.MemoryReceiveChannel[AgentEvent]) -> None:
        self._job = job
        self._receive = receive
        self._ended = False

    def __repr__(self) -> str:
        return f"<EventStream {self._job!r} ended={self._ended}>"

    @property
    def job(self) -> Job:
        """The job whose events these are."""
        return self._job

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> AgentEvent:
        if self._ended:
            raise StopAsyncIteration
        try:
            event = await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            self._ended = True
            raise StopAsyncIteration from None
        if isinstance(event, Done):
            self._ended = True
            self._receive.close()
        return event

    async def collect(self) -> list[AgentEvent]:
        """Every remaining event, up to and including ``done``.

        Cancellation: the events read so far are lost; the job goes on.
        """
        return [event async for event in self]

    async def aclose(self) -> None:
        """Stop reading; the job's later events are dropped.

        Cancellation: not a checkpoint; closes at once.
        """
        self._ended = True
        self._receive.close()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
