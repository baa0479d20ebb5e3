"""A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe``.

Chromium started with ``--remote-debugging-pipe`` reads commands from its file
descriptor 3 and writes replies and events to descriptor 4, one JSON message per
frame, each frame ended by a NUL byte. No port is opened, so no other local
process can drive the browser.

:class:`CdpConnection` writes commands (:meth:`~CdpConnection.call` waits for the
matching reply) and one reader task (:meth:`~CdpConnection.run`) routes replies
to their callers and events to :attr:`~CdpConnection.events`. When the browser
closes the pipe, every pending call fails at once with :class:`CdpClosed`.
"""

from __future__ import annotations

import contextlib
import itertools
import typing
from typing import Any

import msgspec
import trio

from .errors import BrowserError

__all__ = ["CdpClosed", "CdpConnection", "CdpEvent", "CdpFailed"]


class CdpClosed(BrowserError):
    """The browser closed the protocol pipe (it exited or crashed)."""

    def __init__(self) -> None:
        super().__init__("render", "the browser closed its DevTools pipe (it exited or crashed)")


class CdpFailed(BrowserError):
    """A command was answered with an error.

    Attributes:
        method: the command.
        code: the protocol's error code.
    """

    def __init__(self, method: str, code: int, message: str) -> None:
        super().__init__("render", f"{method} failed: {message} ({code})")
        self.method = method
        self.code = code


class _Error(msgspec.Struct):
    code: int = 0
    message: str = ""


class _Incoming(msgspec.Struct):
    """A reply (``id``) or an event (``method``), as Chromium sends them."""

    id: int | None = None
    method: str | None = None
    params: dict[str, Any] = {}
    result: dict[str, Any] | None = None
    error: _Error | None = None
    sessionId: str | None = None


class CdpEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An event from the browser."""

    method: str
    params: dict[str, Any]
    #: The target session it belongs to; None for the browser itself.
    session: str | None = None


_decoder = msgspec.json.Decoder(_Incoming)
_encoder = msgspec.json.Encoder()


@typing.final
class _Slot:
    __slots__ = ("done", "reply")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.reply: _Incoming | None = None


@typing.final
class CdpConnection:
    """Commands out, replies and events in, over the two pipe ends.

    Args:
        send: the stream Chromium reads as descriptor 3.
        receive: the stream Chromium writes as descriptor 4.
        max_message: largest frame accepted; a larger one is a protocol error.
        event_buffer: events held for a slow consumer before the reader waits.
    """

    def __init__(
        self,
        send: trio.abc.SendStream,
        receive: trio.abc.ReceiveStream,
        *,
        max_message: int = 64 * 1024 * 1024,
        event_buffer: int = 1024,
    ) -> None:
        self._send = send
        self._receive = receive
        self._max_message = max_message
        self._ids = itertools.count(1)
        self._pending: dict[int, _Slot] = {}
        self._send_lock = trio.Lock()
        self._closed = False
        self._event_in, self.events = trio.open_memory_channel[CdpEvent](event_buffer)

    def __repr__(self) -> str:
        return f"<CdpConnection pending={len(self._pending)} closed={self._closed}>"

    async def aclose(self) -> None:
        """Close both pipe ends (the reader, if running, sees the end).

        Cancellation: both ends are closed all the same.
        """
        self._closed = True
        await self._send.aclose()
        await self._receive.aclose()

    async def call(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None
    ) -> dict[str, Any]:
        """Send a command and wait for its reply.

        Raises:
            CdpFailed: the browser answered with an error.
            CdpClosed: the pipe closed before the reply came.

        Cancellation: the reply, if it comes, is dropped.
        """
        if self._closed:
            raise CdpClosed
        ident = next(self._ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        slot = self._pending[ident] = _Slot()
        try:
            async with self._send_lock:
                try:
                    await self._send.send_all(_encoder.encode(message) + b"\0")
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    raise CdpClosed from exc
            await slot.done.wait()
        finally:
            del self._pending[ident]
        reply = slot.reply
        if reply is None:
            raise CdpClosed
        if reply.error is not None:
            raise CdpFailed(method, reply.error.code, reply.error.message)
        return reply.result or {}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read frames until the browser closes the pipe, routing each one.

        On return every pending call has failed with :class:`CdpClosed` and
        :attr:`events` is closed.

        Raises:
            BrowserError: a frame is larger than ``max_message``.

        Cancellation: stops reading; pending calls fail as on close.
        """
        task_status.started()
        buffer = bytearray()
        try:
            async with self._event_in:
                while chunk := await self._receive_some():
                    buffer += chunk
                    while (end := buffer.find(b"\0")) >= 0:
                        frame = bytes(buffer[:end])
                        del buffer[: end + 1]
                        await self._route(frame)
                    if len(buffer) > self._max_message:
                        raise BrowserError("render", "a DevTools message exceeds the size limit")
        finally:
            self._closed = True
            for slot in self._pending.values():
                slot.done.set()

    async def _receive_some(self) -> bytes:
        try:
            return bytes(await self._receive.receive_some(1 << 16))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return b""

    async def _route(self, frame: bytes) -> None:
        try:
            incoming = _decoder.decode(frame)
        except msgspec.DecodeError:
            return  # not ours to fix; a reply we cannot read fails its call by timeout
        if incoming.id is not None:
            slot = self._pending.get(incoming.id)
            if slot is not None:
                slot.reply = incoming
                slot.done.set()
        elif incoming.method:
            event = CdpEvent(
                method=incoming.method, params=incoming.params, session=incoming.sessionId
            )
            with contextlib.suppress(trio.BrokenResourceError):  # nobody listens any more
                await self._event_in.send(event)
