"""One step's tool calls: vet, announce, run, and the answers the transcript is owed.

A :class:`ToolRound` is made when the model's message calls tools. It runs them
(:meth:`ToolRound.run`)::

    per call, concurrently: intercept tool_call (+ audit), the host's preview
    tool_call event per call, in the model's order
    per call, concurrently: blocked? error result with reason
                            else tell extensions, run the tool with the args that run
                            tool_result event

and, whatever stopped it (a cancellation at any await, a failure), it can say at
once what answers every call (:meth:`ToolRound.answer`): the result where the tool
finished, else an "aborted" error result. :meth:`ToolRound.report_aborted` gives
the client a ``tool_result`` for every ``tool_call`` event it saw without one.
"""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

from sandbox.log import get_logger
from supervisor import EmitEvent, InterceptOutcome, SupervisorError

from ._audit import AuditLog
from ._events import Emit, ToolProgress, ToolResultEvent
from ._exchanges import ABORTED_BEFORE_RUN, ABORTED_WHILE_RUNNING, aborted_result
from ._hooks import Hooks, blocked_text, call_event, intervention_records
from ._messages import Message, ToolResultContent, now_iso
from ._providers.base import ProviderToolCall
from ._registry import ToolRegistry
from ._tools.base import ToolKind, ToolRunResult, error_result

__all__ = ["ToolRound", "each"]

log = get_logger(__name__)

_ALLOW = InterceptOutcome()


async def each(count: int, work: Callable[[int], Awaitable[None]]) -> None:
    """``work(0)`` … ``work(count - 1)``, concurrently when there is more than one."""
    if count == 1:
        await work(0)
        return
    async with trio.open_nursery() as nursery:
        for index in range(count):
            nursery.start_soon(work, index)


async def consult(ask: Awaitable[InterceptOutcome]) -> InterceptOutcome:
    """An intercept chain's outcome; a supervisor failure counts as "allow"."""
    try:
        return await ask
    except SupervisorError as exc:
        log.warning("intercept_unavailable", error=str(exc))
        return _ALLOW


async def tell(hooks: Hooks, event: EmitEvent) -> None:
    """Send a lifecycle event to extensions; a supervisor failure only drops it."""
    try:
        await hooks.emit(event)
    except SupervisorError as exc:
        log.debug("lifecycle_event_dropped", event_name=event.event, error=str(exc))


@typing.final
class ToolRound:
    """The tool calls of one assistant message, and what answers each of them."""

    def __init__(
        self,
        calls: list[ProviderToolCall],
        *,
        registry: ToolRegistry,
        hooks: Hooks,
        audit: AuditLog | None,
    ) -> None:
        self.calls = calls
        self._registry = registry
        self._hooks = hooks
        self._audit = audit
        count = len(calls)
        self._vetted: list[InterceptOutcome | None] = [None] * count
        self._results: list[ToolResultContent | None] = [None] * count
        #: The tool was started (a cancellation then stops it mid-run).
        self._started = [False] * count
        #: The client may have seen the call's ``tool_call`` event / its ``tool_result``.
        self._announced = [False] * count
        self._reported = [False] * count

    def __repr__(self) -> str:
        done = sum(r is not None for r in self._results)
        return f"<ToolRound calls={len(self.calls)} done={done}>"

    def answer(self) -> Message:
        """The ``tool`` message answering every call, now: finished results, else aborted.

        Not a checkpoint: it can be taken at any moment, also while unwinding.
        """
        content: list[Any] = [
            result
            if result is not None
            else aborted_result(call.id, ABORTED_WHILE_RUNNING if started else ABORTED_BEFORE_RUN)
            for call, result, started in zip(self.calls, self._results, self._started, strict=True)
        ]
        records = [
            record
            for c, outcome in zip(self.calls, self._vetted, strict=True)
            if outcome is not None
            for record in intervention_records("tool_call", outcome, tool_id=c.id, tool=c.name)
        ]
        return Message(role="tool", content=content, time=now_iso(), interventions=records)

    async def report_aborted(self, emit: Emit, answer: Message) -> None:
        """A ``tool_result`` for each announced call the client has none for (from ``answer``).

        Cancellation: the remaining events are not sent.
        """
        for index, block in enumerate(answer.content):
            if self._announced[index] and not self._reported[index]:
                assert isinstance(block, ToolResultContent)
                self._reported[index] = True
                await emit(ToolResultEvent(id=block.call_id, is_error=True, content=block.content))

    async def run(self, emit: Emit) -> None:
        """Vet, announce and run every call; their results are kept for :meth:`answer`.

        Cancellation: tools are stopped and reaped; calls without a result are
        answered "aborted" by :meth:`answer`.
        """
        calls = self.calls
        previews: list[str | None] = [None] * len(calls)

        async def vet(index: int) -> None:
            call = calls[index]
            self._vetted[index] = outcome = await self._vet(call)
            if not outcome.block:  # a tool host's one-line rendering of what runs
                args = call.args if outcome.args is None else outcome.args
                previews[index] = await self._registry.preview(call.name, args)

        async def run(index: int) -> None:
            call, outcome = calls[index], self._vetted[index]
            assert outcome is not None
            self._started[index] = True
            r = await self._run_one(call, outcome, emit)
            self._results[index] = ToolResultContent(
                call_id=call.id, is_error=r.is_error, content=r.content, native=r.native
            )
            self._reported[index] = True  # set first: the event may be out once emit is called
            await emit(
                ToolResultEvent(
                    id=call.id, is_error=r.is_error, content=r.content, display=r.display
                )
            )

        await each(len(calls), vet)
        for index, (call, outcome, preview) in enumerate(
            zip(calls, self._vetted, previews, strict=True)
        ):
            assert outcome is not None
            self._announced[index] = True  # set first, as in run()
            await emit(call_event(call, outcome, preview))
        await each(len(calls), run)

    async def _vet(self, call: ProviderToolCall) -> InterceptOutcome:
        """Consult the ``tool_call`` chain and audit what it did."""
        tool = self._registry.get(call.name)
        # An unknown tool counts as built-in: a caller that cannot tell is strict.
        builtin = tool is None or tool.kind is ToolKind.BUILTIN
        outcome = await consult(
            self._hooks.intercept_tool_call(call.id, call.name, call.args, builtin=builtin)
        )
        if self._audit is not None:
            records = intervention_records("tool_call", outcome, tool_id=call.id, tool=call.name)
            await self._audit.record(records, model_args=call.args)
        return outcome

    async def _run_one(
        self, call: ProviderToolCall, outcome: InterceptOutcome, emit: Emit
    ) -> ToolRunResult:
        if outcome.block:
            log.info("tool_call_blocked", tool=call.name, by=outcome.blocked_by)
            return error_result(blocked_text(outcome))
        args = outcome.args if outcome.args is not None else call.args
        await tell(
            self._hooks,
            EmitEvent(event="tool_call", tool_id=call.id, tool_name=call.name, tool_args=args),
        )
        return await self._execute(call, args, emit)

    async def _execute(
        self, call: ProviderToolCall, args: dict[str, Any], emit: Emit
    ) -> ToolRunResult:
        tool = self._registry.get(call.name)
        if tool is None:
            names = ", ".join(self._registry.names()) or "none"
            return error_result(f"unknown tool {call.name!r}; available tools: {names}")

        async def progress(text: str, part: Any = msgspec.UNSET, /) -> None:
            await emit(ToolProgress(id=call.id, text=text, part=part))

        try:
            return await tool.run(call.id, args, progress)
        except Exception as exc:  # a tool bug becomes an error result, never a crash
            log.exception("tool_crashed", tool=call.name)
            return error_result(f"tool {call.name} failed unexpectedly: {exc!r}")
