"""The stderr of one extension process: its log file and a tail for crash reports.

:class:`StderrLog` appends to ``logs/ext-<name>.log`` (rotated by size), each line
starting with the UTC time it was written (``2026-04-19T11:30:00.123Z``; given by
corral, never by the extension), and keeps a short in-memory tail for crash reports.
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import time
import typing

import trio

__all__ = ["BESIDE", "StderrBeside", "StderrLog"]

_CHUNK = 65536


@typing.final
class StderrLog:
    """An extension's stderr: appended to its log file and kept as a short tail."""

    def __init__(self, path: str | os.PathLike[str], max_bytes: int, tail_lines: int) -> None:
        self.path = os.fspath(path)
        self._max = max_bytes
        self.tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._partial = b""
        self._fd: int | None = None
        self._size = 0
        self._line_start = True

    def open(self) -> None:
        """Open the log for appending (creating its directory)."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        try:
            self._fd = os.open(self.path, flags, 0o600)
        except FileNotFoundError:  # the first start: its directory first
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._fd = os.open(self.path, flags, 0o600)
        self._size = os.fstat(self._fd).st_size

    def note(self, *texts: str) -> None:
        """Write host-side lines (start, exit, refusal) into the log, in one write."""
        self._write("".join(f"[corral] {text}\n" for text in texts).encode())

    def feed(self, chunk: bytes) -> None:
        """Record a chunk of stderr."""
        self._write(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        if len(self._partial) > 4096:
            lines.append(self._partial)
            self._partial = b""
        for line in lines[-(self.tail.maxlen or 1) :]:
            self.tail.append(line.decode("utf-8", "replace")[:500])

    def _stamped(self, data: bytes) -> bytes:
        """``data`` with the time in front of every line that starts in it."""
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
        prefix = f"{stamp}.{int(now * 1000) % 1000:03d}Z ".encode()
        out = bytearray()
        for line in data.splitlines(keepends=True):
            if self._line_start:
                out += prefix
            out += line
            self._line_start = line.endswith(b"\n")
        return bytes(out)

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            return
        data = self._stamped(data)
        if self._size + len(data) > self._max and self._size > 0:
            self._rotate()
        try:
            os.write(self._fd, data)
            self._size += len(data)
        except OSError:
            pass  # a full disk must not take the extension (or the host) down

    def _rotate(self) -> None:
        assert self._fd is not None
        mine = os.fstat(self._fd).st_ino
        os.close(self._fd)
        with contextlib.suppress(OSError):
            # Two writers share the log while a reload overlaps two generations of one
            # extension: when the other one rotated first, only reopen.
            if os.stat(self.path).st_ino == mine:
                os.replace(self.path, self.path + ".1")
        self._fd = None
        self.open()

    def flush_tail(self) -> list[str]:
        """The tail including a last unterminated line."""
        if self._partial:
            self.tail.append(self._partial.decode("utf-8", "replace")[:500])
            self._partial = b""
        return list(self.tail)

    def close(self) -> None:
        """Close the log file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    async def drain(self, stream: trio.abc.ReceiveStream) -> None:
        """Copy ``stream`` into the log until EOF.

        Cancellation: stops copying; what was received is already written.
        """
        while True:
            chunk = await stream.receive_some(_CHUNK)
            if not chunk:
                return
            self.feed(bytes(chunk))

    def feed_pending(self, stream: trio.lowlevel.FdStream) -> bool:
        """Feed what ``stream`` holds right now, without waiting (the drain may be
        parked): once the process has exited, everything it wrote is in the pipe,
        so a crash report gets its real last line. False once the pipe ended (or
        was closed)."""
        fd = stream.fileno()
        while True:
            try:
                chunk = os.read(fd, _CHUNK)
            except BlockingIOError:  # nothing more now
                return True
            except OSError:  # the pipe is gone
                return False
            if not chunk:
                return False
            self.feed(chunk)


#: The reader of a child's stdout serves its stderr too where one descriptor can
#: watch both (Linux's epoll); elsewhere stderr has a task of its own.
BESIDE = hasattr(select, "epoll")


@typing.final
class StderrBeside:
    """A child's stderr, drained by the task that reads its stdout (no task of its own).

    One epoll descriptor watches both pipes: the reader waits for it instead of its
    pipe, and after each wake logs what stderr holds before it reads stdout (see
    :class:`~supervisor._lines.LineReader`), so what the child wrote to stderr before
    a frame is in its log when the frame is handled. Only where :data:`BESIDE`.
    """

    def __init__(self, log: StderrLog, stderr: trio.lowlevel.FdStream, stdout_fd: int) -> None:
        self._log = log
        self._stderr = stderr
        self._fd = stderr.fileno()
        self._epoll = select.epoll()
        self._epoll.register(stdout_fd, select.EPOLLIN)
        self._epoll.register(self._fd, select.EPOLLIN)
        #: stderr reached its end (everything the child said is logged).
        self.ended = False

    def __repr__(self) -> str:
        return f"<StderrBeside ended={self.ended}>"

    def fileno(self) -> int:
        """What the reader waits for: readable when stdout or stderr is."""
        return self._epoll.fileno()

    def drain(self) -> bool:
        """Log what stderr holds now, if anything (one look at both pipes, never
        blocks); False once it ended."""
        if self.ended:
            return False
        for fd, _ in self._epoll.poll(0):
            if fd == self._fd and not self._log.feed_pending(self._stderr):
                self.ended = True
        return not self.ended

    async def rest(self) -> None:
        """Log stderr until its end, waiting for it alone (stdout ended).

        Cancellation: stops; what was read is logged.
        """
        while not self.ended:
            if not self._log.feed_pending(self._stderr):
                self.ended = True
                return
            await trio.lowlevel.wait_readable(self._fd)

    def close(self) -> None:
        """Close the epoll descriptor (the reader is done with it)."""
        if not self._epoll.closed:
            trio.lowlevel.notify_closing(self._epoll.fileno())
            self._epoll.close()
