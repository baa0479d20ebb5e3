"""NDJSON plumbing: bounded line reading and ordered line writing over trio streams.

The one reader and the one writer of corral's line protocols: an extension's stdio
(the supervisor) and the RPC server's (the agent).

:class:`LineReader` splits a byte stream into lines without ever buffering more
than ``limit`` bytes of one line: a longer line is skipped as it arrives and
reported once as an :class:`Oversize` (with its first bytes, so the caller can
match it to a request). Over a pipe (a :class:`trio.lowlevel.FdStream`) it reads
the descriptor itself: a read that came back short drained the pipe, so the next
one waits for it to become readable instead of trying first (trio's
``receive_some`` would yield to the scheduler and fail a read before every wait);
and :meth:`LineReader.read_nowait` lets a caller waiting for an answer read
without waiting (see :mod:`supervisor._calls`).

:class:`LineWriter` keeps lines in order and never interleaves them: a line that
finds nothing queued and nothing being written goes straight to the stream's
non-blocking file descriptor (no task switch; on trio one costs about as much as a
round trip to a child); anything else, and whatever the descriptor does not take
at once, goes through one writer task, which writes everything queued with one
system call (started only when first needed, for a writer given a nursery). A
caller that knows more lines will follow in the same scheduler pass (many calls in
flight) asks for that batching with ``coalesce=True``.
"""

from __future__ import annotations

import enum
import os
import stat
import typing

import trio

__all__ = ["MORE", "Beside", "LineReader", "LineWriter", "Oversize", "Unsent"]

_CHUNK = 65536
#: Bytes of an oversize line kept for the caller (to find its id).
_HEAD = 4096


class Oversize(typing.NamedTuple):
    """A line longer than the limit, skipped: its size and its first bytes."""

    size: int
    head: bytes


def _is_pipe(stream: trio.lowlevel.FdStream) -> bool:
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class _More(enum.Enum):
    MORE = "more"


#: What :meth:`LineReader.next_nowait` returns when no whole line is buffered.
MORE = _More.MORE


class Beside(typing.Protocol):
    """Another pipe served by the task that reads the lines, while it waits for them."""

    def fileno(self) -> int:
        """A descriptor readable when the line pipe or the other one is (what to wait for)."""
        ...

    def drain(self) -> bool:
        """Serve the other pipe if it holds something now (never waits); False once it
        ended."""
        ...


@typing.final
class LineReader:
    """Lines from a byte stream, never buffering more than ``limit`` bytes of one line.

    Over a pipe, ``beside`` lets the waiting reader serve another pipe too (a child's
    stderr): it waits for ``beside``'s descriptor, readable when either pipe is, and
    after each wake serves the other pipe (when it holds something) before reading
    its own; once the other pipe ended, the reader waits for its own alone.
    """

    def __init__(
        self,
        stream: trio.abc.ReceiveStream,
        limit: int,
        chunk: int = _CHUNK,
        *,
        beside: Beside | None = None,
    ) -> None:
        self._stream = stream
        #: The pipe (or socket) to read directly, else None: a regular file (the RPC
        #: server's stdin may be one) cannot be waited for, only read.
        self._pipe = (
            stream if isinstance(stream, trio.lowlevel.FdStream) and _is_pipe(stream) else None
        )
        self._limit = limit
        self._chunk = chunk
        self._buf = bytearray()
        self._pos = 0
        self._scan = 0
        self._skipped: int | None = None  # bytes of an oversize line dropped so far
        self._head = b""
        self._eof = False
        #: The last read came back short: the pipe is (most likely) empty.
        self._drained = True
        self._beside = beside if self._pipe is not None else None

    def __repr__(self) -> str:
        return f"<LineReader buffered={len(self._buf) - self._pos} limit={self._limit}>"

    @property
    def eof(self) -> bool:
        """The stream ended (lines may still be buffered)."""
        return self._eof

    def next_nowait(self) -> bytes | Oversize | _More | None:
        """The next buffered line, :data:`MORE` when none is complete, None at the end.

        Never reads: see :meth:`read_nowait` and :meth:`fill`.
        """
        newline = self._buf.find(b"\n", self._scan)
        if newline < 0 and self._eof and self._pos < len(self._buf):
            newline = len(self._buf)  # the last line has no newline
        if newline >= 0:
            line = bytes(self._buf[self._pos : newline])
            self._pos = self._scan = newline + 1
            if self._pos > _CHUNK and self._pos * 2 > len(self._buf):
                del self._buf[: self._pos]
                self._scan = self._pos = 0
            if self._skipped is None and len(line) <= self._limit:
                return line
            head = self._head if self._skipped is not None else line[:_HEAD]
            size, self._skipped = (self._skipped or 0) + len(line), None
            return Oversize(size, head)
        if self._eof:
            if self._skipped is None:
                return None
            size, self._skipped = self._skipped, None
            return Oversize(size, self._head)
        pending = len(self._buf) - self._pos
        if self._skipped is not None or pending > self._limit:
            # Too long already: remember its start (for the id), drop the rest.
            if self._skipped is None:
                self._head = bytes(self._buf[self._pos : self._pos + _HEAD])
                self._skipped = 0
            self._skipped += pending
            self._buf.clear()
            self._pos = 0
        self._scan = len(self._buf)
        return MORE

    def lines_nowait(self) -> list[bytes]:
        """Every whole line buffered now, at once (none: ``[]``), when none of them
        is too long and no oversize line is being skipped; else ``[]``, and
        :meth:`next_nowait` takes them one by one. Never reads.

        One split for a whole read's worth of lines, instead of one call per line.
        """
        buf = self._buf
        end = buf.rfind(b"\n", self._scan)
        if end < 0 or self._skipped is not None:
            return []
        lines = bytes(buf[self._pos : end]).split(b"\n")
        if max(map(len, lines)) > self._limit:
            return []
        if end + 1 == len(buf):
            buf.clear()
            self._pos = self._scan = 0
        else:
            self._pos = self._scan = end + 1
            if self._pos > _CHUNK and self._pos * 2 > len(buf):
                del buf[: self._pos]
                self._scan = self._pos = 0
        return lines

    def _take(self, data: bytes | bytearray) -> None:
        self._eof = not data
        self._drained = len(data) < self._chunk
        self._buf += data

    def read_nowait(self) -> bool:
        """Read what the pipe holds now, without waiting; False when it held nothing.

        Only for a pipe (an FdStream) that is still open; for any other stream, or
        a closed one, it reads nothing.
        """
        fd = self._pipe.fileno() if self._pipe is not None else -1
        if fd < 0 or self._eof:
            return False
        try:
            data = os.read(fd, self._chunk)
        except BlockingIOError:
            self._drained = True
            return False
        except OSError:
            data = b""  # a broken pipe ends the stream like EOF
        self._take(data)
        return True

    async def fill(self) -> None:
        """Wait for more bytes (or the end) and buffer them.

        Cancellation: safe; nothing received is lost.

        Raises:
            trio.ClosedResourceError: the stream was closed under us.
        """
        pipe = self._pipe
        if pipe is None:
            self._take(await self._stream.receive_some(self._chunk))
            return
        if self._eof or (not self._drained and self.read_nowait()):
            await trio.lowlevel.checkpoint()
            return
        while True:
            fd = pipe.fileno()
            if fd < 0:
                raise trio.ClosedResourceError("the stream was closed")
            beside = self._beside
            if beside is None:
                await trio.lowlevel.wait_readable(fd)
            else:
                await trio.lowlevel.wait_readable(beside.fileno())
                # The other pipe first: what it said before these lines is served first.
                if not beside.drain():
                    self._beside = None  # it ended: wait for this pipe alone
            # Someone else (a caller spinning for its answer) may have read it first.
            if self.read_nowait() or self._eof:
                return

    async def next(self) -> bytes | Oversize | None:
        """The next line (newline stripped), an :class:`Oversize`, or None at the end.

        A last line without a newline is returned as a line.

        Cancellation: safe at any point; no received byte is lost, so the next call
        goes on where this one stopped.
        """
        while (item := self.next_nowait()) is MORE:
            await self.fill()
        return item


class Unsent(enum.Enum):
    """Why :meth:`LineWriter.write_nowait` did not take a line."""

    #: The stream broke (the reader closed its end).
    BROKEN = "broken"
    #: ``backlog`` lines are already waiting (the reader is not reading).
    FULL = "full"
    #: The writer was closed or its task has ended.
    CLOSED = "closed"


@typing.final
class LineWriter:
    """Ordered lines to a send stream (see the module docstring).

    Start :meth:`run` as a task, or let :meth:`run_in` start it when a line first has
    to wait; :meth:`close` lets it write what is queued and end.
    """

    def __init__(self, stream: trio.abc.SendStream, backlog: int, batch: int = 64) -> None:
        self._stream = stream
        self._backlog = backlog
        self._batch = batch
        #: The stream's non-blocking fd while the writer task may use it (-1: none).
        self._fd = stream.fileno() if isinstance(stream, trio.lowlevel.FdStream) else -1
        self._queue: list[bytes] = []
        self._writing = False
        self._closed = False
        self._ended = False
        #: The writer task, while it waits for lines.
        self._idle: trio.lowlevel.Task | None = None
        #: Tasks in :meth:`write` waiting for room in the backlog.
        self._room = trio.lowlevel.ParkingLot()
        self._scope: trio.CancelScope | None = None
        #: Where to start :meth:`run` when a line first has to wait (see :meth:`run_in`).
        self._nursery: trio.Nursery | None = None
        #: :meth:`run` was started (it may not have run yet).
        self._running = False
        #: The stream broke: a write failed because the reader went away.
        self.broken = False

    def __repr__(self) -> str:
        return (
            f"<LineWriter queued={len(self._queue)} writing={self._writing} broken={self.broken}>"
        )

    @property
    def busy(self) -> bool:
        """Lines are queued or being written (a cancelled write may leave half a line)."""
        return self._writing or bool(self._queue)

    def _direct(self, data: bytes) -> bytes | Unsent:
        """Write what the fd takes at once, when nothing is ahead; returns the rest."""
        try:
            n = os.write(self._fd, data)
        except BlockingIOError:
            return data
        except OSError:
            self._break()
            return Unsent.BROKEN
        return data[n:]

    def write_nowait(self, data: bytes, *, coalesce: bool = False) -> Unsent | None:
        """Write ``data`` or queue it; never blocks. Returns why it was not taken.

        Args:
            data: whole lines.
            coalesce: queue it even when the writer is idle, so that the writer task
                sends it with whatever else is queued in this scheduler pass (one
                system call for many lines).
        """
        if self._closed:
            return Unsent.BROKEN if self.broken else Unsent.CLOSED
        if not coalesce and self._fd >= 0 and not self._writing and not self._queue:
            rest = self._direct(data)
            if not rest:
                return None
            if isinstance(rest, Unsent):
                return rest
            data = rest
        elif len(self._queue) >= self._backlog:
            return Unsent.FULL
        self._queue.append(data)
        if self._idle is not None:  # (_wake, inlined: once per queued line)
            task, self._idle = self._idle, None
            trio.lowlevel.reschedule(task)
        elif not self._running and self._nursery is not None:
            self._running = True
            self._nursery.start_soon(self.run)
        return None

    async def write(self, data: bytes) -> None:
        """Write ``data`` or queue it, waiting while ``backlog`` lines are queued.

        Raises:
            trio.BrokenResourceError: the stream broke.
            trio.ClosedResourceError: the writer was closed.

        Cancellation: the line is not written (unless it already went out).
        """
        while True:
            unsent = self.write_nowait(data)
            if unsent is None:
                await trio.lowlevel.checkpoint()
                return
            if unsent is Unsent.BROKEN:
                raise trio.BrokenResourceError("the stream broke")
            if unsent is Unsent.CLOSED:
                raise trio.ClosedResourceError("the writer was closed")
            await self._room.park()

    def end_nowait(self, data: bytes) -> bytes:
        """Write what the stream takes of ``data`` (the last lines) now, and close.

        For a stop after :meth:`cancel`: nothing queued is written any more. Never
        blocks. Returns the rest the stream did not take (the caller sends it, or
        gives up): ``b""`` when all of it went out or nobody reads the stream.
        """
        self._closed = True
        self._queue.clear()
        self._room.unpark_all()
        if self.broken:
            return b""
        if self._fd < 0 or not data:
            return data
        rest = self._direct(data)
        return b"" if isinstance(rest, Unsent) else rest

    def _wake(self) -> None:
        if self._idle is not None:
            task, self._idle = self._idle, None
            trio.lowlevel.reschedule(task)

    def close(self) -> None:
        """No more lines: :meth:`run` writes what is queued, then returns."""
        self._closed = True
        self._wake()
        self._room.unpark_all()

    def run_in(self, nursery: trio.Nursery) -> None:
        """Start :meth:`run` in ``nursery`` only once a line has to wait (the stream
        did not take it at once, or it was queued to ``coalesce``): a writer whose
        lines all go straight to the pipe never costs a task. Before ``nursery``
        closes, :meth:`cancel` (or :meth:`close`, and :meth:`run` ends by itself)."""
        self._nursery = nursery

    def cancel(self) -> None:
        """Stop :meth:`run` now, even in the middle of a write (see :attr:`busy`); with
        no writer task running, nothing more is written from now on."""
        if self._scope is not None:
            self._scope.cancel()
        elif self._nursery is not None:
            self._nursery = None
            self._end()

    def _break(self) -> None:
        self.broken = True
        self._fd = -1
        self._closed = True
        self._queue.clear()
        self._room.unpark_all()

    def _abort(self, _: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        self._idle = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def _park(self) -> None:
        self._idle = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._abort)

    def _end(self) -> None:
        """Nothing more is written (the writer task ends, or none will run)."""
        self._fd = -1
        self._closed = True
        self._queue.clear()
        self._room.unpark_all()

    async def run(self) -> None:
        """The writer task: write queued lines, batched, until closed, cancelled or broken.

        Cancellation: returns (through :meth:`cancel` too); queued lines are dropped.
        """
        self._running = True
        with trio.CancelScope() as self._scope:
            try:
                while True:
                    if not self._queue:
                        if self._closed:
                            break
                        await self._park()
                        continue
                    batch = self._queue[: self._batch]
                    del self._queue[: self._batch]
                    self._room.unpark_all()
                    data = b"".join(batch) if len(batch) > 1 else batch[0]
                    self._writing = True
                    if self._fd >= 0:
                        rest = self._direct(data)
                        if isinstance(rest, Unsent):
                            break
                        data = rest
                    if data:
                        await self._stream.send_all(data)
                    self._writing = False
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._break()
            finally:
                self._end()
        self._scope = None
        self._nursery = None
