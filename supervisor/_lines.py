"""NDJSON plumbing: bounded line reading and ordered line writing over trio streams.

The one reader and the one writer of corral's line protocols: an extension's stdio
(the supervisor) and the RPC server's (the agent).

:class:`LineReader` splits a byte stream into lines without ever buffering more
than ``limit`` bytes of one line: a longer line is skipped as it arrives and
reported once as an :class:`Oversize` (with its first bytes, so the caller can
match it to a request).

:class:`LineWriter` keeps lines in order and never interleaves them: a line that
finds nothing queued and nothing being written goes straight to the stream's
non-blocking file descriptor (no task switch; on trio one costs about as much as a
round trip to a child); anything else, and whatever the descriptor does not take
at once, goes through one writer task, which batches what is queued into one
write.
"""

from __future__ import annotations

import enum
import os
import typing

import trio

__all__ = ["LineReader", "LineWriter", "Oversize", "Unsent"]

_CHUNK = 65536
#: Bytes of an oversize line kept for the caller (to find its id).
_HEAD = 4096


class Oversize(typing.NamedTuple):
    """A line longer than the limit, skipped: its size and its first bytes."""

    size: int
    head: bytes


@typing.final
class LineReader:
    """Lines from a byte stream, never buffering more than ``limit`` bytes of one line."""

    def __init__(self, stream: trio.abc.ReceiveStream, limit: int, chunk: int = _CHUNK) -> None:
        self._stream = stream
        self._limit = limit
        self._chunk = chunk
        self._buf = bytearray()
        self._pos = 0
        self._scan = 0
        self._skipped: int | None = None  # bytes of an oversize line dropped so far
        self._head = b""
        self._eof = False

    def __repr__(self) -> str:
        return f"<LineReader buffered={len(self._buf) - self._pos} limit={self._limit}>"

    async def next(self) -> bytes | Oversize | None:
        """The next line (newline stripped), an :class:`Oversize`, or None at the end.

        A last line without a newline is returned as a line.

        Cancellation: safe at any point; no received byte is lost, so the next call
        goes on where this one stopped.
        """
        while True:
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
            data = await self._stream.receive_some(self._chunk)
            self._eof = not data
            self._buf += data


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

    Start :meth:`run` as a task; :meth:`close` lets it write what is queued and end.
    """

    def __init__(self, stream: trio.abc.SendStream, backlog: int, batch: int = 64) -> None:
        self._stream = stream
        self._batch = batch
        #: The stream's non-blocking fd while the writer task may use it (-1: none).
        self._fd = stream.fileno() if isinstance(stream, trio.lowlevel.FdStream) else -1
        self._in, self._out = trio.open_memory_channel[bytes](backlog)
        self._queued = 0
        self._writing = False
        self._scope: trio.CancelScope | None = None
        #: The stream broke: a write failed because the reader went away.
        self.broken = False

    def __repr__(self) -> str:
        return f"<LineWriter queued={self._queued} writing={self._writing} broken={self.broken}>"

    @property
    def busy(self) -> bool:
        """Lines are queued or being written (a cancelled write may leave half a line)."""
        return self._writing or self._queued > 0

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

    def write_nowait(self, data: bytes) -> Unsent | None:
        """Write ``data`` or queue it; never blocks. Returns why it was not taken."""
        if self._fd >= 0 and not self._writing and not self._queued:
            rest = self._direct(data)
            if not rest:
                return None
            if isinstance(rest, Unsent):
                return rest
            data = rest
        try:
            self._in.send_nowait(data)
        except trio.WouldBlock:
            return Unsent.FULL
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return Unsent.BROKEN if self.broken else Unsent.CLOSED
        self._queued += 1
        return None

    async def write(self, data: bytes) -> None:
        """Write ``data`` or queue it, waiting while ``backlog`` lines are queued.

        Raises:
            trio.BrokenResourceError: the stream broke.
            trio.ClosedResourceError: the writer was closed.

        Cancellation: the line is not written (unless it already went out).
        """
        if self._fd >= 0 and not self._writing and not self._queued:
            rest = self._direct(data)
            if not rest:
                await trio.lowlevel.checkpoint()
                return
            if isinstance(rest, Unsent):
                raise trio.BrokenResourceError("the stream broke")
            data = rest
        self._queued += 1
        try:
            await self._in.send(data)
        except trio.ClosedResourceError:
            self._queued -= 1
            if self.broken:
                raise trio.BrokenResourceError("the stream broke") from None
            raise
        except BaseException:
            self._queued -= 1
            raise

    def close(self) -> None:
        """No more lines: :meth:`run` writes what is queued, then returns."""
        self._in.close()

    def cancel(self) -> None:
        """Stop :meth:`run` now, even in the middle of a write (see :attr:`busy`)."""
        if self._scope is not None:
            self._scope.cancel()

    def _break(self) -> None:
        self.broken = True
        self._fd = -1
        self._in.close()

    async def run(self) -> None:
        """The writer task: write queued lines, batched, until closed, cancelled or broken.

        Cancellation: returns (through :meth:`cancel` too); queued lines are dropped.
        """
        lines = self._out
        with trio.CancelScope() as self._scope:
            try:
                async for first in lines:
                    batch = [first]
                    while len(batch) < self._batch:
                        try:
                            batch.append(lines.receive_nowait())
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                    self._queued -= len(batch)
                    self._writing = True
                    await self._stream.send_all(b"".join(batch) if len(batch) > 1 else first)
                    self._writing = False
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._break()
            finally:
                self._fd = -1
                lines.close()
        self._scope = None
