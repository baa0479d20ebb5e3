"""Answers the agent waits for, and the calls an extension has not answered yet.

A :class:`Reply` is the one object a request costs: the caller's one-shot answer
slot and, for a call sent to an extension, the pending call's record (id, kind,
name, start time). A tool host's call may stream ``part`` s before its answer
(:attr:`Reply.on_part`), and a protocol may chain a follow-up to an answer
(:attr:`Reply.then`) without a task of its own. :class:`PendingCalls` is the
bookkeeping of one extension: ids, deadlines, counters and latencies. It never
touches a pipe.

Deadlines are enforced by :meth:`PendingCalls.run_timer`, one task per
incarnation, instead of a cancel scope in every caller: each kind of call has one
constant timeout and its own table of pending calls in the order they were sent,
so each kind's deadlines arrive in that order and the earliest is the table's
first entry (no deadline queue to keep beside the tables).
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import math
import time
import typing
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import trio

from sandbox.log import get_logger

from ._api import ExtensionStats
from ._exceptions import CallTimeout, ExtensionGone, ProtocolViolation, SupervisorError

__all__ = ["REQUEST_IDS", "CallKind", "PendingCalls", "Reply", "Spin"]

log = get_logger(__name__)

T = TypeVar("T")

#: Request ids are unique per host, not per extension (SPEC): ``t17`` is
#: ``f"t{next(REQUEST_IDS)}"`` (see :meth:`PendingCalls.new_id`).
REQUEST_IDS = itertools.count(1)
_reschedule = trio.lowlevel.reschedule
_wait_rescheduled = trio.lowlevel.wait_task_rescheduled
_current_task = trio.lowlevel.current_task


class CallKind(enum.Enum):
    """What a request asks of an extension; each kind has its own deadline."""

    #: ``tool_call``, answered by ``tool_result`` (``tool_timeout``).
    TOOL = "tool"
    #: ``command_invoked``, answered by ``command_response`` (``command_timeout``).
    COMMAND = "command"
    #: ``event_intercept``, answered by ``event_intercept_response`` (``intercept_timeout``).
    INTERCEPT = "intercept"
    #: A tool host's optional method (``format_tool_result``, ...; ``hook_timeout``).
    HOOK = "hook"

    # Members are singletons compared by identity: hash them by identity too, in C
    # (Enum's own __hash__ is a Python function, and kinds are looked up on every call).
    __hash__ = object.__hash__


_PREFIX = {kind: kind.value[0] for kind in CallKind}
_WHAT = {
    CallKind.TOOL: "tool ",
    CallKind.COMMAND: "command /",
    CallKind.INTERCEPT: "intercept ",
    CallKind.HOOK: "",
}


#: What spins for a reply (see :meth:`Reply.wait`): reads the extension's stdout
#: without waiting and handles what came, until ``reply`` is answered or time is up.
Spin = Callable[["Reply[Any]"], None]

#: A caller answered while spinning does not yield to the scheduler; one does at
#: least this often (seconds), so that other tasks are never held up for longer.
_YIELD_EVERY = 0.0005
_last_yield = 0.0
#: Callers in :meth:`Reply.wait` (woken or not): only a caller alone there spins,
#: so that many concurrent callers never hold each other up; and while one is
#: (or was just woken and has not run), a new call is not alone: more frames follow
#: in this scheduler pass (see :meth:`PendingCalls.add`).
_waiting = 0


@typing.final
class Reply(Generic[T]):
    """A one-shot answer: set once by the supervisor, awaited once by the caller.

    Answering twice is a no-op, so a late answer after a timeout or a crash can
    never overwrite the first one. Once sent to an extension it also records the
    call (:meth:`PendingCalls.add`), so a caller that gives up forgets it there.
    It is the one object a request costs: no event, no closure; the waiting task
    is rescheduled directly.
    """

    __slots__ = (
        "_calls",
        "_done",
        "_error",
        "_task",
        "_value",
        "kind",
        "name",
        "on_part",
        "rid",
        "spin",
        "t0",
        "then",
    )

    def __init__(self) -> None:
        self._done = False
        self._task: trio.lowlevel.Task | None = None
        self._value: T | None = None
        self._error: BaseException | None = None
        self._calls: PendingCalls | None = None
        #: The request id, once sent to an extension.
        self.rid = ""
        self.kind = CallKind.TOOL
        #: The tool or command name, or the intercepted event.
        self.name = ""
        #: When it was sent (trio's clock), once sent to an extension.
        self.t0 = 0.0
        #: Set by the sender when the caller may spin for the answer (see :meth:`wait`).
        self.spin: Spin | None = None
        #: Receives each streamed ``{"part": payload}`` chunk of a tool host's call,
        #: in order, before the answer (never blocks; None: parts are dropped).
        self.on_part: Callable[[dict[str, Any]], None] | None = None
        #: Called once with this reply when it is answered (value or error): a
        #: protocol's follow-up, run in the answering task. It must not raise.
        self.then: Callable[[Reply[T]], None] | None = None

    def __repr__(self) -> str:
        return f"<Reply {self.rid or '-'} done={self.done}>"

    @property
    def done(self) -> bool:
        """True once a value or an error was set."""
        return self._done

    @property
    def what(self) -> str:
        """The call for errors and logs, e.g. ``"tool weather"`` or ``"command /clock"``."""
        return _WHAT[self.kind] + self.name

    @property
    def value(self) -> T | None:
        """The value it was answered with (None until then, or when it failed)."""
        return self._value

    @property
    def error(self) -> BaseException | None:
        """The error it was answered with, if any."""
        return self._error

    def set(self, value: T) -> None:
        """Answer with a value (ignored if already answered)."""
        if not self._done:
            self._value = value
            self._done = True
            self.spin = None
            task = self._task
            if task is not None:
                self._task = None
                _reschedule(task)
            if self.then is not None:
                self.then(self)

    def fail(self, error: BaseException) -> None:
        """Answer with an error (ignored if already answered)."""
        if not self._done:
            self._error = error
            self.set(typing.cast(T, None))

    def abandon(self) -> None:
        """The caller stopped waiting (it was cancelled): forget the call and answer it."""
        calls, self._calls = self._calls, None
        if calls is not None:
            calls.give_up(self.rid, None)
        self.fail(SupervisorError("the caller gave up"))

    def _abort(self, _: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        self._task = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def wait(self) -> T:
        """Wait for the answer and return it, or raise the error it carries.

        With :attr:`spin` set (a lone call to an extension, see
        ``SupervisorConfig.reply_spin``), the caller first reads the extension's
        answer itself for a bounded time, without parking; an answer found that way
        costs no task switch. It then only checks for cancellation, and yields to
        the scheduler if it has not done so in the last half millisecond.

        Cancellation: abandons the call (:meth:`abandon`): it is forgotten, and a
        late answer is dropped.
        """
        global _last_yield, _waiting
        try:
            spin = self.spin
            if spin is not None and not self._done and not _waiting:
                spin(self)
                if self.done:  # (a property: the spin may have answered it)
                    now = time.perf_counter()
                    if now - _last_yield < _YIELD_EVERY:
                        await trio.lowlevel.checkpoint_if_cancelled()
                    else:
                        _last_yield = now
                        await trio.lowlevel.checkpoint()
            elif self._done:
                await trio.lowlevel.checkpoint()
            if not self._done:
                self._task = _current_task()
                _waiting += 1
                try:
                    await _wait_rescheduled(self._abort)
                finally:
                    _waiting -= 1
        except trio.Cancelled:
            self.abandon()
            raise
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # (set: a T; no cast call)


@typing.final
class PendingCalls:
    """Pending calls of one extension, their deadlines and its call statistics."""

    def __init__(self, name: str, timeouts: Mapping[CallKind, float]) -> None:
        self._name = name
        self._timeouts = timeouts
        #: Pending calls by kind, each table in the order they were sent (= deadline
        #: order: one timeout per kind, a monotonic clock).
        self._pending: dict[CallKind, dict[str, Reply[Any]]] = {k: {} for k in timeouts}
        self._tables = tuple(self._pending.values())
        self._timer_target = math.inf
        self._timer_wake = trio.Event()
        #: Where the timer task runs once a deadline needs it (see :meth:`timer_in`).
        self._timer_nursery: trio.Nursery | None = None
        self._timer_running = False
        #: trio's clock, read once when a call is sent (its deadline and the start of
        #: its latency) and once when it is answered.
        self._now: Callable[[], float] = trio.current_time
        self.counts = {"calls": 0, "errors": 0, "timeouts": 0, "bad_frames": 0}
        self._latencies: deque[float] = deque(maxlen=2048)

    def __len__(self) -> int:
        return sum(map(len, self._tables))

    @staticmethod
    def new_id(kind: CallKind) -> str:
        """A request id unique in this host, e.g. ``t17``."""
        return f"{_PREFIX[kind]}{next(REQUEST_IDS)}"

    def add(self, rid: str, reply: Reply[Any]) -> bool:
        """Track a call sent as ``rid`` (``reply.kind`` and ``reply.name`` set); its
        deadline starts now. Returns whether it is alone: no other call was pending
        here and no caller waits for a reply anywhere; the sender then writes it at
        once, else it joins the write of the others in this scheduler pass.

        Added before its line is written: :meth:`drop` it if the write fails.
        """
        alone = not _waiting and not any(self._tables)
        kind = reply.kind
        now = self._now()
        reply.rid = rid
        reply.t0 = now
        reply._calls = self
        self._pending[kind][rid] = reply
        if now + self._timeouts[kind] < self._timer_target:
            self._wake_timer()
        return alone

    def _wake_timer(self) -> None:
        if self._timer_running:
            self._timer_wake.set()
        elif self._timer_nursery is not None:
            self._timer_running = True
            self._timer_nursery.start_soon(self.run_timer)

    def _pop(self, rid: str) -> Reply[Any] | None:
        """Remove call ``rid`` whatever its kind, without answering it."""
        for table in self._tables:
            reply = table.pop(rid, None)
            if reply is not None:
                reply._calls = None
                return reply
        return None

    def drop(self, rid: str) -> None:
        """Forget call ``rid`` without answering it (its line could not be sent)."""
        self._pop(rid)

    def peek(self, rid: str, kind: CallKind) -> Reply[Any] | None:
        """The pending call ``rid`` of ``kind``, left pending (None: unknown id)."""
        return self._pending[kind].get(rid)

    def take(self, rid: str, kind: CallKind) -> Reply[Any] | None:
        """Remove and return the call an answer of ``kind`` is for (None: unknown id)."""
        reply = self._pending[kind].pop(rid, None)
        if reply is not None:
            reply._calls = None
            self._latencies.append(self._now() - reply.t0)
        return reply

    def take_any(self, rid: str) -> Reply[Any] | None:
        """Remove and return call ``rid`` whatever its kind (None: unknown id)."""
        for kind, table in self._pending.items():
            if rid in table:
                return self.take(rid, kind)
        return None

    def violated(self, rid: str, message: str, excerpt: str) -> None:
        """The extension answered call ``rid`` with a frame the protocol forbids."""
        reply = self._pop(rid)
        if reply is not None:
            self.counts["errors"] += 1
            reply.fail(ProtocolViolation(self._name, reply.what, message, excerpt))

    def give_up(self, rid: str, seconds: float | None) -> None:
        """Forget call ``rid``: its deadline of ``seconds`` passed, or (None) its caller left."""
        reply = self._pop(rid)
        if reply is None:
            return
        if seconds is None:
            reply.fail(ExtensionGone(self._name, reply.what, "the caller gave up"))
            return
        self.counts["timeouts"] += 1
        log.warning("call_timeout", call=reply.what, seconds=seconds)
        reply.fail(CallTimeout(self._name, reply.what, seconds))

    def fail_all(
        self, error: type[ExtensionGone], message: str, *, returncode: int | None = None
    ) -> None:
        """Fail every pending call at once with ``error(name, what, message, returncode=...)``."""
        pending = [reply for table in self._tables for reply in table.values()]
        for table in self._tables:
            table.clear()
        for reply in pending:
            self.counts["errors"] += 1
            reply._calls = None
            reply.fail(error(self._name, reply.what, message, returncode=returncode))

    @contextlib.contextmanager
    def timer_in(self, nursery: trio.Nursery) -> Iterator[None]:
        """Within the block, run the deadline timer in ``nursery`` from the first call
        that has a deadline on: an incarnation that is never called runs no timer task
        (one task fewer to start and to end, which a stop of many feels)."""
        self._timer_nursery = nursery
        self._now = trio.lowlevel.current_clock().current_time  # one call, not two
        try:
            if any(self._tables):
                self._wake_timer()
            yield
        finally:
            self._timer_nursery = None
            self._timer_running = False
            self._timer_target = math.inf

    async def run_timer(self) -> None:
        """Fail calls whose deadline passed, until cancelled. Never polls.

        Cancellation: the timer stops; pending calls are left to the owner.
        """
        self._timer_running = True
        while True:
            now = self._now()
            target = math.inf
            for kind, table in self._pending.items():
                timeout = self._timeouts[kind]
                late = []
                for rid, reply in table.items():  # oldest first
                    deadline = reply.t0 + timeout
                    if deadline > now:
                        target = min(target, deadline)
                        break
                    late.append(rid)
                for rid in late:
                    self.give_up(rid, timeout)
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
