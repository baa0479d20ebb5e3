"""Keeping an extension's order across the tasks its events pass through.

An extension that sends ``notify`` and then answers its command expects the note
before the answer (the seed's reference example ``/summon`` does this). The answer
comes back to the caller directly; the note travels through two task hops (the
supervisor's channel to the runtime's forwarder, the runtime's channel to the RPC
server's pump). A :class:`Drain` counts what the reader of one channel has handled,
so the caller can wait, before it acts on the answer, until everything queued in
that channel before the answer is handled.
"""

from __future__ import annotations

import typing
from typing import TypeVar

import trio

__all__ = ["Drain"]

T = TypeVar("T")

#: Bound of one wait: a reader stuck on a full stdout must not hold answers forever.
_BOUND = 5.0


@typing.final
class Drain:
    """How far the one reader of a channel got (see the module docstring)."""

    def __init__(self) -> None:
        self._channel: trio.MemoryReceiveChannel[typing.Any] | None = None
        self._handled = 0
        self._busy = False
        self._lot = trio.lowlevel.ParkingLot()

    def __repr__(self) -> str:
        return f"<Drain handled={self._handled} busy={self._busy}>"

    async def next(self, channel: trio.MemoryReceiveChannel[T]) -> T:
        """The reader's next item from ``channel`` (its only channel), in hand until
        :meth:`handled`. Taken from the buffer without a checkpoint in between, so an
        item is always either queued or in hand (``async for`` yields after taking it).

        Raises:
            trio.EndOfChannel: the channel ended.

        Cancellation: nothing is taken.
        """
        self._channel = channel
        try:
            item = channel.receive_nowait()
        except trio.WouldBlock:
            item = await channel.receive()  # sent to this task directly, or the end
        self._busy = True
        return item

    def handled(self) -> None:
        """The reader is done with the item it took."""
        self._busy = False
        self._handled += 1
        self._lot.unpark_all()

    def stopped(self) -> None:
        """The reader is gone: nobody waits for it any more."""
        self._channel = None
        self._lot.unpark_all()

    async def drained(self) -> None:
        """Return once every item queued now (and the one in hand) was handled.

        Immediate when nobody reads the channel; bounded (a few seconds).

        Cancellation: only the wait is abandoned.
        """
        channel = self._channel
        if channel is None:
            return
        # An item sent while the reader waited went to it directly, not to the
        # buffer: the reader is scheduled but has not taken it yet. It was made
        # runnable before this checkpoint, so it runs in the batch this task runs in
        # next, or earlier; trio may run a batch in reverse order, so a second
        # checkpoint waits for that batch to end.
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()
        queued = channel.statistics().current_buffer_used + (1 if self._busy else 0)
        target = self._handled + queued
        with trio.move_on_after(_BOUND):
            while self._handled < target and self._channel is channel:
                await self._lot.park()
