"""What the driver writes: the results file, appended line by line, and transcripts.

What holds for ``RESULTS.jsonl``, and how:

* **One writer.** :meth:`ResultsFile.open` takes an exclusive ``flock`` on the file
  for as long as it is open; a second batch writing the same file is refused.
* **A line at a time.** Each result is one ``write`` of one whole line on an
  ``O_APPEND`` descriptor; a failed or short write (a full disk) is cut back off,
  so the file never keeps part of a line from a live writer. A reader sees a line
  once its newline is there; a last line without one is a write in progress, or
  the torn end of a crash.
* **Resume.** Opening with ``resume`` reads the file: a torn last line is dropped
  (its task runs again), ``cancelled`` results are dropped (those tasks run
  again; the file is rewritten: temporary file, ``fsync``, ``rename``), and every
  other id is done and skipped. A damaged line elsewhere is an error naming it.
* **fsync policy.** Lines are not synced one by one: :meth:`ResultsFile.run_syncer`
  syncs within a second of a write, and closing syncs. A crash of corral loses
  nothing written; a power loss loses at most the last second of results, whose
  tasks ``--resume`` runs again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import typing
from pathlib import Path

import msgspec
import trio

from sandbox.log import get_logger

from ._exceptions import OutputError
from ._results import Result, Status, result_decoder

__all__ = ["ResultsFile", "Resumed", "transcript_name", "write_transcript"]

log = get_logger(__name__)

_encoder = msgspec.json.Encoder()
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


class Resumed(msgspec.Struct, frozen=True, kw_only=True):
    """What :meth:`ResultsFile.open` found in an existing file."""

    #: Ids with a final result (done, error, timeout): not run again.
    done: frozenset[str] = frozenset()
    #: ``cancelled`` results dropped (their tasks run again).
    cancelled: int = 0
    #: Bytes of a torn last line dropped.
    torn_bytes: int = 0


@typing.final
class ResultsFile:
    """``RESULTS.jsonl``: open (lock, resume), append results, sync, close.

    The methods are synchronous (small local writes, done in the trio thread);
    :meth:`run_syncer` does the ``fsync`` calls in a worker thread.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd = -1
        self._size = 0
        self._dirty = trio.Event()
        self.written = 0

    def __repr__(self) -> str:
        return f"<ResultsFile {str(self.path)!r} open={self._fd >= 0} written={self.written}>"

    def _fail(self, reason: str) -> OutputError:
        return OutputError(str(self.path), reason)

    def _open_locked(self) -> int:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise self._fail(f"cannot open: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise self._fail("another batch is writing it") from None
            raise self._fail(f"cannot lock: {exc.strerror}") from None
        return fd

    def open(self, *, resume: bool) -> Resumed:
        """Lock the file and read what it holds.

        Raises:
            OutputError: another batch has it open; it holds results and ``resume``
                is false; a line other than a torn last one is not a result; it
                cannot be read or written.
        """
        self._fd = self._open_locked()
        try:
            data = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
            if data and not resume:
                raise self._fail(
                    "already holds results: --resume continues the batch, or remove the file"
                )
            end = data.rfind(b"\n") + 1
            torn = len(data) - end
            kept: list[bytes] = []
            done: set[str] = set()
            cancelled = 0
            for number, line in enumerate(data[:end].split(b"\n")[:-1], start=1):
                if not line.strip():
                    continue
                try:
                    result = result_decoder.decode(line)
                except msgspec.DecodeError as exc:
                    raise self._fail(
                        f"line {number} is not a result ({exc}); fix or remove it to resume"
                    ) from None
                if result.status is Status.CANCELLED:
                    cancelled += 1
                    continue
                done.add(result.id)
                kept.append(line + b"\n")
            if cancelled:
                self._rewrite(b"".join(kept))
            elif torn:
                os.ftruncate(self._fd, end)
                os.fsync(self._fd)
            self._size = os.fstat(self._fd).st_size
        except BaseException:
            self.close()
            raise
        if torn:
            log.warning("batch_results_torn_line_dropped", path=str(self.path), bytes=torn)
        return Resumed(done=frozenset(done), cancelled=cancelled, torn_bytes=torn)

    def _rewrite(self, data: bytes) -> None:
        """Replace the file's content with ``data`` atomically, keeping the lock."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            with open(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            # Lock the new file before it is visible under the name: a second batch
            # that opens it after the rename finds it locked.
            new = os.open(tmp, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise self._fail(f"cannot rewrite: {exc.strerror}") from None
        try:
            fcntl.flock(new, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.replace(tmp, self.path)
        except OSError as exc:
            os.close(new)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise self._fail(f"cannot rewrite: {exc.strerror}") from None
        directory = os.open(self.path.parent, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        os.close(self._fd)
        self._fd = new

    def append(self, result: Result) -> None:
        """Append ``result`` as one line, in one ``write``.

        Raises:
            OutputError: the write failed; the file is left as it was.
        """
        line = _encoder.encode(result) + b"\n"
        before = self._size
        try:
            written = os.write(self._fd, line)
        except OSError as exc:
            self._cut_back(before)
            raise self._fail(f"cannot write: {exc.strerror}") from None
        if written != len(line):
            self._cut_back(before)
            raise self._fail("cannot write: short write (disk full?)")
        self._size = before + written
        self.written += 1
        self._dirty.set()

    def _cut_back(self, size: int) -> None:
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, size)

    def sync(self) -> None:
        """``fsync`` the file (errors are logged: the lines are written already)."""
        if self._fd < 0:
            return
        try:
            os.fsync(self._fd)
        except OSError as exc:
            log.warning("batch_results_sync_failed", path=str(self.path), error=exc.strerror)

    async def run_syncer(
        self,
        interval: float = 1.0,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """``fsync`` within ``interval`` seconds of a write, at most that often; runs
        until cancelled (start it with ``nursery.start``).

        Cancellation: returns; :meth:`close` syncs what is left.
        """
        task_status.started()
        while True:
            await self._dirty.wait()
            self._dirty = trio.Event()
            await trio.to_thread.run_sync(self.sync)
            await trio.sleep(interval)

    def close(self) -> None:
        """Sync, unlock and close (idempotent)."""
        if self._fd >= 0:
            self.sync()
            os.close(self._fd)
            self._fd = -1


def transcript_name(task_id: str) -> str:
    """A file name for ``task_id``'s transcript: the id when it is a plain name, else
    its plain characters and a digest of the whole id (so ids never collide)."""
    safe = _SAFE.sub("_", task_id)[:100].lstrip(".") or "task"
    if safe != task_id:
        safe += "-" + hashlib.sha256(task_id.encode()).hexdigest()[:12]
    return f"{safe}.jsonl"


def write_transcript(directory: Path, task_id: str, data: bytes) -> Path:
    """Write a transcript atomically (temporary file, ``rename``): complete or absent.

    A retried task's transcript replaces the earlier one.

    Raises:
        OutputError: it cannot be written.
    """
    target = directory / transcript_name(task_id)
    tmp = directory / f".{target.name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        with open(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OutputError(str(target), f"cannot write the transcript: {exc.strerror}") from None
    return target
