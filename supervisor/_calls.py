"""The calls an extension has not answered yet: ids, deadlines, counters, latencies.

Pure bookkeeping owned by one :class:`~supervisor._extension.Extension`; it never
touches a pipe. Deadlines are enforced by :meth:`PendingCalls.run_timer`, one task
per incarnation, instead of a cancel scope in every caller: each kind of call has
one constant timeout, so each kind's deadlines arrive in order and the earliest is
at the front of its queue.
"""

from __future__ import annotations

import itertools
import math
import time
import typing
from collections import deque
from typing import Any

import structlog
import trio

from ._api import ExtensionStats, Reply
from ._exceptions import CallTimeout, ExtensionGone, ProtocolViolation

__all__ = ["Pending", "PendingCalls"]

log = structlog.get_logger("corral.supervisor")

#: Request ids are unique per host, not per extension (SPEC).
_REQUEST_IDS = itertools.count(1)


@typing.final
class Pending:
    """One call waiting for its answer."""

    __slots__ = ("kind", "reply", "t0", "what")

    def __init__(self, kind: str, what: str, reply: Reply[Any]) -> None:
        self.kind = kind
        self.what = what
        self.reply = reply
        self.t0 = time.perf_counter()


@typing.final
class PendingCalls:
    """Pending calls of one extension, their deadlines and its call statistics."""

    def __init__(self, name: str, timeouts: dict[str, float]) -> None:
        self._name = name
        self._timeouts = timeouts
        self._pending: dict[str, Pending] = {}
        self._deadlines: dict[str, deque[tuple[float, str]]] = {k: deque() for k in timeouts}
        self._timer_target = math.inf
        self._timer_wake = trio.Event()
        self.counts = {"calls": 0, "errors": 0, "timeouts": 0, "bad_frames": 0}
        self._latencies: deque[float] = deque(maxlen=2048)

    def __len__(self) -> int:
        return len(self._pending)

    @staticmethod
    def new_id(kind: str) -> str:
        """A request id unique in this host, e.g. ``t17``."""
        return f"{kind[0]}{next(_REQUEST_IDS)}"

    def add(self, rid: str, kind: str, what: str, reply: Reply[Any]) -> None:
        """Track a call that was sent; its deadline starts now."""
        self._pending[rid] = Pending(kind, what, reply)
        reply.bind(lambda seconds: self.give_up(rid, seconds))
        deadline = trio.current_time() + self._timeouts[kind]
        queue = self._deadlines[kind]
        queue.append((deadline, rid))
        # Calls are mostly answered in order: keep the queue about as long as the
        # number of calls in flight.
        while queue and queue[0][1] not in self._pending:
            queue.popleft()
        if deadline < self._timer_target:
            self._timer_wake.set()

    def take(self, rid: str, kind: str) -> Pending | None:
        """Remove and return the call an answer of ``kind`` is for (None: unknown id)."""
        pending = self._pending.get(rid)
        if pending is None or pending.kind != kind:
            return None
        del self._pending[rid]
        self._latencies.append(time.perf_counter() - pending.t0)
        return pending

    def violated(self, rid: str, message: str, excerpt: str) -> None:
        """The extension answered call ``rid`` with a frame the protocol forbids."""
        pending = self._pending.pop(rid, None)
        if pending is not None:
            self.counts["errors"] += 1
            pending.reply.fail(ProtocolViolation(self._name, pending.what, message, excerpt))

    def give_up(self, rid: str, seconds: float | None) -> None:
        """Forget call ``rid``: its deadline of ``seconds`` passed, or (None) its caller left."""
        pending = self._pending.pop(rid, None)
        if pending is None:
            return
        if seconds is None:
            pending.reply.fail(ExtensionGone(self._name, pending.what, "the caller gave up"))
            return
        self.counts["timeouts"] += 1
        log.warning("call_timeout", call=pending.what, seconds=seconds)
        pending.reply.fail(CallTimeout(self._name, pending.what, seconds))

    def fail_all(self, error: ExtensionGone) -> None:
        """Fail every pending call at once with (a copy of) ``error``."""
        pending, self._pending = self._pending, {}
        for queue in self._deadlines.values():
            queue.clear()
        for p in pending.values():
            self.counts["errors"] += 1
            err = type(error)(self._name, p.what, str(error).split(": ", 1)[-1])
            err.returncode = error.returncode
            p.reply.fail(err)

    async def run_timer(self) -> None:
        """Fail calls whose deadline passed, until cancelled. Never polls.

        Cancellation: the timer stops; pending calls are left to the owner.
        """
        while True:
            now = trio.current_time()
            target = math.inf
            for queue in self._deadlines.values():
                while queue and (queue[0][1] not in self._pending or queue[0][0] <= now):
                    deadline, rid = queue.popleft()
                    if deadline <= now and rid in self._pending:
                        self.give_up(rid, self._timeouts[self._pending[rid].kind])
                if queue:
                    target = min(target, queue[0][0])
            self._timer_target = target
            self._timer_wake = trio.Event()
            with trio.move_on_at(target):
                await self._timer_wake.wait()

    def stats(self, **extra: Any) -> ExtensionStats:
        """Counters and latency percentiles, plus ``extra`` fields."""
        lat = sorted(self._latencies)

        def pct(q: float) -> float | None:
            if not lat:
                return None
            return round(lat[min(len(lat) - 1, math.ceil(q * len(lat)) - 1)] * 1000, 3)

        return ExtensionStats(
            calls=self.counts["calls"],
            errors=self.counts["errors"],
            timeouts=self.counts["timeouts"],
            bad_frames=self.counts["bad_frames"],
            latency_p50_ms=pct(0.50),
            latency_p95_ms=pct(0.95),
            latency_p99_ms=pct(0.99),
            **extra,
        )
