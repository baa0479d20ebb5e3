"""The gate between intercept chains and reloads: no chain ever runs on a partial set.

A reload swaps the set of extensions: the new generation starts beside the running
one, then the supervisor switches to it and stops what it replaced. A chain that
straddled the switch could consult an old interceptor that is being stopped (its
answer lost, the call allowed: a guard's ``block`` silently skipped) or mix the two
sets. So chains and the swap exclude each other, the way readers and a writer do:

* a chain runs while no swap is running or waiting; many chains run at once;
* the swap first closes the gate to new chains, then waits for the chains in
  flight (each bounded by ``intercept_timeout`` per subscriber), switches, and
  opens the gate again; only then are the replaced extensions stopped;
* a chain that arrives meanwhile waits, and then consults the complete new set.

The wait is in the supervisor, where the chain lives, so it holds for every
client (RPC, chat, embedders) and for every interceptable event. A turn is not
held up by a reload except at its interception points, and a reload is never held
up by a long turn, only by the chains in flight.
"""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

__all__ = ["ReloadGate"]


@typing.final
class ReloadGate:
    """Chains share the gate; a reload has it alone. Reloads must not overlap."""

    def __init__(self) -> None:
        self._chains = 0
        #: Set while no chain is running.
        self._idle = trio.Event()
        self._idle.set()
        #: Set while no reload is running or waiting to run.
        self._open = trio.Event()
        self._open.set()

    def __repr__(self) -> str:
        return f"<ReloadGate chains={self._chains} open={self.is_open}>"

    @property
    def is_open(self) -> bool:
        """No reload is running or waiting: a chain would start at once."""
        return self._open.is_set()

    @asynccontextmanager
    async def chain(self) -> AsyncIterator[None]:
        """Hold the gate for one chain; waits while a reload runs or waits.

        Cancellation: a chain still waiting gives up without having held the gate.
        """
        # A reload may close the gate again between the event and this task
        # running: check once more after every wake-up.
        while not self._open.is_set():
            await self._open.wait()
        if self._chains == 0:
            self._idle = trio.Event()
        self._chains += 1
        try:
            yield
        finally:
            self._chains -= 1
            if self._chains == 0:
                self._idle.set()

    @asynccontextmanager
    async def reload(self) -> AsyncIterator[None]:
        """Close the gate to new chains, wait for those in flight, then hold it alone.

        Cancellation: the gate opens again at once, whether the reload was still
        waiting for chains or running.
        """
        closed = self._open = trio.Event()
        try:
            await self._idle.wait()
            yield
        finally:
            closed.set()
