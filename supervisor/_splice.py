"""Copying one connected socket into another, both ways, as the egress proxy relays.

On Linux the bytes never come up to Python: ``splice(2)`` moves them from the
source socket into a pipe and from the pipe into the destination, in the kernel,
up to the pipe's size at a time (raised to 1 MiB where allowed). Elsewhere, or
when a pipe cannot be made, one reused buffer per direction: ``recv_into`` and
``send`` of a view, no allocation per read. Either way the task waits on the
sockets with trio (``wait_readable``/``wait_writable``), never polls, and yields
to the scheduler at least every few megabytes of a fast stream.

:func:`relay` copies both directions until both ended (each end of input is passed
on as a half-close), or until either side breaks, then returns; the caller closes
the sockets.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import typing
from collections.abc import Callable

import trio

Socket = trio.socket.SocketType

__all__ = ["relay"]

#: Bytes moved per call at most; also the pipe size asked for (``F_SETPIPE_SZ``).
CHUNK = 1024 * 1024
#: Yield to the scheduler after this many calls that did not wait.
_YIELD_EVERY = 8
_SPLICE: Callable[..., int] | None = getattr(os, "splice", None)
_SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


class _Broken(Exception):
    """A side reset or closed under us: the relay ends."""


def _pipe() -> tuple[int, int] | None:
    """A non-blocking pipe as large as allowed, or None (no splice here)."""
    if _SPLICE is None:
        return None
    try:
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    # Above fs.pipe-max-size it stays at the default (64 KiB), which works too.
    with contextlib.suppress(OSError):
        fcntl.fcntl(w, _F_SETPIPE_SZ, CHUNK)
    return r, w


class _Via(typing.Protocol):
    """How bytes go from one socket to the other: taken in, then given out."""

    def take(self, src: int) -> int:
        """Take what ``src`` has (at most :data:`CHUNK`); 0 at its end.
        ``BlockingIOError`` when it has nothing yet."""
        ...

    def give(self, dst: int, start: int, end: int) -> int:
        """Give bytes ``start:end`` of what was taken to ``dst``; how many it took."""
        ...


@typing.final
class _Spliced:
    """Through a pipe, in the kernel."""

    def __init__(self, pipe: tuple[int, int]) -> None:
        assert _SPLICE is not None
        self._splice = _SPLICE
        self._r, self._w = pipe

    def take(self, src: int) -> int:
        return self._splice(src, self._w, CHUNK, flags=_SPLICE_FLAGS)

    def give(self, dst: int, start: int, end: int) -> int:
        return self._splice(self._r, dst, end - start, flags=_SPLICE_FLAGS)


@typing.final
class _Copied:
    """Through one reused buffer."""

    def __init__(self) -> None:
        self._buffer = bytearray(CHUNK)
        self._view = memoryview(self._buffer)

    def take(self, src: int) -> int:
        return os.readv(src, [self._buffer])

    def give(self, dst: int, start: int, end: int) -> int:
        return os.write(dst, self._view[start:end])


async def _move(src: Socket, dst: Socket, via: _Via) -> None:
    """Move everything ``src`` sends to ``dst``, until its end."""
    calls = 0
    while True:
        try:
            got = via.take(src.fileno())
        except BlockingIOError:
            await trio.lowlevel.wait_readable(src)
            continue
        except OSError as exc:
            raise _Broken from exc
        if got == 0:
            return  # end of input
        sent = 0
        while sent < got:
            try:
                sent += via.give(dst.fileno(), sent, got)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(dst)
            except OSError as exc:
                raise _Broken from exc
        calls += 1
        if calls % _YIELD_EVERY == 0:
            await trio.lowlevel.checkpoint()


async def _one_way(src: Socket, dst: Socket, scope: trio.CancelScope) -> None:
    pipe = _pipe()
    try:
        await _move(src, dst, _Spliced(pipe) if pipe is not None else _Copied())
        try:
            dst.shutdown(socket.SHUT_WR)  # pass the end of input on
        except OSError as exc:
            if exc.errno != errno.ENOTCONN:
                raise _Broken from exc
    except _Broken:
        scope.cancel()  # one side broke: nothing more can go either way
    finally:
        if pipe is not None:
            os.close(pipe[0])
            os.close(pipe[1])


async def relay(a: Socket, b: Socket) -> None:
    """Copy ``a`` into ``b`` and ``b`` into ``a`` until both ended or one broke.

    Both must be connected, non-blocking stream sockets (trio's are); bytes
    already read from one are the caller's to send first.

    Cancellation: stops copying at once; the sockets are left open for the caller.
    """
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_one_way, a, b, nursery.cancel_scope)
        nursery.start_soon(_one_way, b, a, nursery.cancel_scope)
