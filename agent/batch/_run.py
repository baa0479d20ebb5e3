"""``run_many``: many tasks through one backend, each result delivered exactly once.

The driver side of every batch. A backend (:class:`~._local.LocalBackend` in this
process, :class:`~._ray.RayBackend` on a Ray cluster) runs the sessions and sends
their outcomes back; this module hands them to the caller as
:class:`~._results.Result` values, one per task id: an outcome for an id that was
delivered already (a task retried after its node was lost, whose first run
reported after all) is dropped here. With ``transcripts``, each transcript is
written (atomically) before its result is delivered, so a result that names a
transcript file can count on it.
"""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Protocol

import msgspec
import structlog
import trio

from ._exceptions import OutputError
from ._local import LocalBackend
from ._output import write_transcript
from ._results import Result
from ._session import Outcome
from ._tasks import Task, check_tasks

__all__ = ["Backend", "Batch", "run_many"]

log = structlog.get_logger(__name__)


class Backend(Protocol):
    """Where sessions run: the seam between the driver and the sessions' hosts."""

    @property
    def concurrency(self) -> int:
        """Sessions that run at once (the driver buffers this many outcomes)."""
        ...

    async def serve(
        self,
        tasks: Sequence[Task],
        out: trio.MemorySendChannel[Outcome],
        stop: trio.Event,
        *,
        transcripts: bool = False,
    ) -> None:
        """Run ``tasks``, sending one outcome per task to ``out`` (more than one is
        allowed after a retry: the driver keeps the first); return when done.

        Once ``stop`` is set no task starts, and running ones end ``cancelled``.

        Cancellation: every session is stopped; nothing more is sent.
        """
        ...


@typing.final
class Batch:
    """A running batch: an async iterator of results, one per task.

    Attributes:
        total: tasks in the batch.
        delivered: results delivered so far.
    """

    def __init__(
        self,
        receive: trio.MemoryReceiveChannel[Outcome],
        stop: trio.Event,
        total: int,
        transcripts: Path | None,
    ) -> None:
        self._receive = receive
        self._stop = stop
        self._transcripts = transcripts
        self._seen: set[str] = set()
        self.total = total
        self.delivered = 0

    def __repr__(self) -> str:
        return f"<Batch {self.delivered}/{self.total} stopping={self._stop.is_set()}>"

    @property
    def stopping(self) -> bool:
        """:meth:`stop` was called."""
        return self._stop.is_set()

    def stop(self) -> None:
        """Start no more tasks and cancel the running ones; their results (status
        ``cancelled``) still arrive, then the iteration ends."""
        self._stop.set()

    def __aiter__(self) -> Batch:
        return self

    async def __anext__(self) -> Result:
        while True:
            try:
                outcome = await self._receive.receive()
            except trio.EndOfChannel:
                raise StopAsyncIteration from None
            result = outcome.result
            if result.id in self._seen:
                log.info("batch_duplicate_dropped", task=result.id, node=result.node)
                continue
            self._seen.add(result.id)
            if self._transcripts is not None and outcome.transcript is not None:
                path = await trio.to_thread.run_sync(
                    write_transcript, self._transcripts, result.id, outcome.transcript
                )
                result = msgspec.structs.replace(result, transcript=str(path))
            self.delivered += 1
            return result


@asynccontextmanager
async def run_many(
    tasks: Iterable[Task],
    *,
    backend: Backend | None = None,
    transcripts: str | Path | None = None,
) -> AsyncIterator[Batch]:
    """Run ``tasks`` on ``backend``; iterate what this yields for their results.

    ::

        async with run_many(tasks, backend=LocalBackend(jobs=8)) as results:
            async for result in results:
                print(result.id, result.status)

    Results come in the order sessions finish, one per task id. Tasks are checked
    first (see :func:`~._tasks.check_tasks`; relative paths are taken from the
    current directory).

    Args:
        tasks: the tasks; ids must be unique.
        backend: where sessions run; None: :class:`~._local.LocalBackend` with one
            session per CPU.
        transcripts: a directory to write each session's transcript into (made if
            missing); the result's ``transcript`` names the file.

    Raises:
        TasksInvalid: a task is invalid; nothing was started.
        OutputError: the transcripts directory cannot be made.

    Cancellation: leaving the block before the iteration ended stops every running
    session (shielded and bounded: extensions go down the shutdown ladder) and
    drops their results; :meth:`Batch.stop` is the way to get them as
    ``cancelled`` results instead.
    """
    given = list(tasks)
    checked, _ = await trio.to_thread.run_sync(lambda: check_tasks(given))
    chosen: Backend = backend if backend is not None else LocalBackend()
    where = Path(transcripts) if transcripts is not None else None
    if where is not None:
        try:
            await trio.to_thread.run_sync(lambda: where.mkdir(parents=True, exist_ok=True))
        except OSError as exc:
            raise OutputError(str(where), f"cannot make the directory: {exc.strerror}") from None
    send, receive = trio.open_memory_channel[Outcome](max(1, chosen.concurrency))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:

        async def produce() -> None:
            async with send:
                await chosen.serve(checked, send, stop, transcripts=where is not None)

        nursery.start_soon(produce)
        try:
            with receive:
                yield Batch(receive, stop, len(checked), where)
        finally:
            nursery.cancel_scope.cancel()
