"""A runtime job keeps its own state: its transitions and its endings, without a runtime.

Pure logic (a body that records, an emit that collects); the runtime's queue around
jobs is exercised end to end in ``test_runtime.py`` and ``test_cancel_runtime.py``.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from agent import AgentEvent, Done, ErrorEvent, TurnEnd
from agent._exceptions import AgentError
from agent._jobs import Job, JobKind, JobState


def _job(kind: JobKind = "prompt", fail: Exception | None = None) -> tuple[Job, list[object]]:
    seen: list[object] = []

    async def emit(event: AgentEvent) -> None:
        seen.append(event)

    async def body(out: object) -> None:
        seen.append(("body", job.state))
        if fail is not None:
            raise fail
        await trio.sleep_forever()

    job = Job(1, kind, body, emit)
    return job, seen


async def test_a_job_runs_aborts_and_ends_with_done() -> None:
    job, seen = _job()
    assert job.state is JobState.QUEUED
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(job.run)
            await trio.testing.wait_all_tasks_blocked()
            assert seen == [("body", JobState.RUNNING)]
            assert job.abort()
    assert job.state is JobState.ENDING
    assert job.aborted
    assert not job.abort()  # its work is over
    assert seen[1:] == [Done()]  # a prompt's turn_end(aborted) comes from the loop
    job.finish()
    assert job.state is JobState.FINISHED
    with trio.fail_after(1):
        await job.wait()


@pytest.mark.parametrize(
    ("kind", "ending"),
    [
        ("prompt", [TurnEnd(stop="aborted"), Done()]),
        ("compact", [ErrorEvent(message="compaction aborted; transcript unchanged"), Done()]),
    ],
)
async def test_a_job_aborted_while_queued_never_starts(kind: JobKind, ending: list[object]) -> None:
    job, seen = _job(kind)
    assert job.abort()
    with trio.fail_after(5):
        await job.run()
    assert job.aborted
    assert seen == ending


async def test_a_failing_body_is_an_error_event_then_done() -> None:
    job, seen = _job(fail=AgentError("no key"))
    with trio.fail_after(5):
        await job.run()
    assert seen[1:] == [ErrorEvent(message="no key"), Done()]
    assert not job.aborted


async def test_abandoned_jobs_say_why_and_done_once() -> None:
    queued, seen_queued = _job()
    await queued.abandon()
    assert seen_queued == [ErrorEvent(message="the runtime closed before this job ran"), Done()]
    finished, seen_finished = _job(fail=AgentError("x"))
    await finished.run()
    await finished.abandon()  # done was sent: not again
    assert sum(isinstance(e, Done) for e in seen_finished) == 1
