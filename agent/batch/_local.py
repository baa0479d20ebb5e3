"""The embedded backend: every session in this process, in one trio host.

``jobs`` worker tasks take the next task in order and run it as a
:class:`~._session.Session` (its own supervisor and sandboxed extensions); the
sessions share the process, its sandbox guardian and the interpreter's imports,
which is what makes an additional concurrent session cost about 0.3 MiB of host
memory instead of a ``corral run`` process's 40 (docs/scale.md has the figures and
why one process rather than several).

Each run works under a directory of its own in the temporary directory
(``corral-batch-*``), locked while it runs; a run that was killed leaves its
directory behind, and the next one removes every such directory whose lock is free.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import tempfile
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path

import trio

from sandbox.log import get_logger

from ._session import Outcome, Session, local_node
from ._tasks import Task
from ._workspace import remove_tree

__all__ = ["LocalBackend", "session_area"]

log = get_logger(__name__)

_PREFIX = "corral-batch-"


def _sweep(parent: Path) -> None:
    """Remove the directories of earlier runs that were killed (their lock is free)."""
    with contextlib.suppress(OSError), os.scandir(parent) as entries:
        for entry in entries:
            if not entry.name.startswith(_PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                fd = os.open(Path(entry.path) / ".lock", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue  # not ours, or being created
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live run holds it
            finally:
                os.close(fd)
            if os.stat(entry.path).st_uid == os.getuid():
                log.info("batch_stale_area_removed", path=entry.path)
                remove_tree(Path(entry.path))


@contextlib.contextmanager
def session_area(parent: str | None = None) -> Iterator[Path]:
    """A locked directory for one run's sessions, removed afterwards (blocking).

    Args:
        parent: where to make it; None: the temporary directory.
    """
    where = Path(parent or tempfile.gettempdir())
    _sweep(where)
    area = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=where))
    fd = os.open(area / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield area
    finally:
        remove_tree(area)
        os.close(fd)


@typing.final
class LocalBackend:
    """Run sessions in this process, ``jobs`` at a time.

    Args:
        jobs: sessions at once; None: the number of CPUs.
        workdir: where sessions' directories go; None: the temporary directory.
    """

    def __init__(self, jobs: int | None = None, *, workdir: str | None = None) -> None:
        if jobs is not None and jobs < 1:
            raise ValueError("jobs must be at least 1")
        self.jobs = jobs or os.cpu_count() or 1
        self.workdir = workdir

    def __repr__(self) -> str:
        return f"<LocalBackend jobs={self.jobs}>"

    @property
    def concurrency(self) -> int:
        """Sessions that run at once."""
        return self.jobs

    async def serve(
        self,
        tasks: Sequence[Task],
        out: trio.MemorySendChannel[Outcome],
        stop: trio.Event,
        *,
        transcripts: bool = False,
    ) -> None:
        """Run ``tasks`` and send each outcome to ``out``; return when all are sent.

        Once ``stop`` is set, no task starts and the running ones are cancelled (each
        sends a ``cancelled`` outcome).

        Cancellation: the running sessions are stopped (their extensions go down
        the shutdown ladder) and their directories removed; nothing more is sent.
        """
        todo = iter(tasks)
        active: set[Session] = set()
        node = local_node()
        numbers = itertools.count(1)
        area_cm = session_area(self.workdir)
        area = await trio.to_thread.run_sync(area_cm.__enter__)
        try:

            async def worker() -> None:
                for task in todo:
                    if stop.is_set():
                        return
                    session = Session(
                        task, root=area / f"s{next(numbers)}", node=node, transcript=transcripts
                    )
                    active.add(session)
                    try:
                        outcome = await session.run()
                    finally:
                        active.discard(session)
                    await out.send(outcome)

            async def on_stop() -> None:
                await stop.wait()
                for session in list(active):
                    session.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(on_stop)
                async with trio.open_nursery() as workers:
                    for _ in range(max(1, min(self.jobs, len(tasks)))):
                        workers.start_soon(worker)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(area_cm.__exit__, None, None, None)
