"""The agent loop: model calls, tool calls, hooks, and the events they produce.

One :meth:`AgentLoop.prompt` adds the user's message and then runs *steps* until the
model stops asking for tools, a hook blocks, something fails, or ``max_steps`` is
reached. One step::

    turn_start  ─ intercept turn_start ─ blocked? → turn_end(blocked, reason)
    assistant_start, text_delta…          (held back while an interceptor may rewrite)
    intercept assistant_message            (transcript keeps the original text)
    assistant_message, usage              (what the user sees: rewritten or suppressed)
    per call, concurrently: intercept tool_call            (agent._toolround)
    tool_call…                            (the model's args, and the args that run)
      per call, concurrently: blocked? error result with reason
                              else run the tool with the rewritten args
    tool_result…, turn_end(tool_use | end_turn | length | error)

The transcript's invariant (:mod:`agent._exchanges`): every tool call has exactly
one result. An assistant message without tool calls enters the transcript as soon
as the stream is complete; one with tool calls enters *together with* the ``tool``
message answering it, when its tools are done, in one step
(:meth:`Transcript.append_exchange`). Whatever ends the step early (an abort,
Ctrl-C, SIGTERM, a failure) at whatever await, the step's ``finally`` writes the
exchange at once, shielded, each unfinished call answered "aborted", and the client
gets a ``tool_result`` for each ``tool_call`` event it saw. A stream that breaks
(a provider error, a cut) leaves nothing of its message in the transcript.

Extensions hear about ``turn_start``, ``tool_call`` (the args that actually run),
``assistant_message`` (the text the user sees) and ``turn_end`` through
:meth:`Hooks.emit`. Every hook failure counts as "allow" (the seed's default).

Every block and rewrite is recorded with the extension's name on the transcript
message of its turn (``interventions``) and in the audit log (``applied: false``
when the supervisor ignored it); the ``tool_call`` event names who did it.
Text deltas stream live only once no extension intercepts ``assistant_message``;
else the text is one delta after the interceptors, so a redaction is never shown.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from sandbox.log import get_logger
from supervisor import EmitEvent, SupervisorError

from ._audit import AuditLog
from ._compaction import summarize
from ._events import (
    AssistantMessage,
    AssistantStart,
    CompactDone,
    Emit,
    ErrorEvent,
    ExtDisplay,
    StopReason,
    TextDelta,
    TurnEnd,
    TurnStart,
    Usage,
    UsageTotals,
    UserMessage,
)
from ._exceptions import AgentBusy, ProviderError, SessionError
from ._exchanges import unique_ids
from ._hooks import Hooks, blocked_text, intervention_records
from ._messages import (
    Block,
    ImageContent,
    InterventionRecord,
    Message,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    annotated,
    now_iso,
)
from ._prompt import SystemPrompt
from ._providers.base import (
    ModelInfo,
    ModelRequest,
    Provider,
    ProviderToolCall,
    ProviderUsage,
    ReasoningLevel,
    ToolSpec,
)
from ._providers.reasoning import check_reasoning
from ._registry import ToolRegistry
from ._reply import EmitFailed, read_reply
from ._toolround import ToolRound, consult, tell
from ._transcript import Transcript, summary_message

__all__ = ["AgentLoop", "LoopState"]

log = get_logger(__name__)

#: Bound on shielded clean-up work after a cancellation (an emit, a transcript write).
_CLEANUP_GRACE = 5.0


class LoopState(enum.Enum):
    """What the loop is doing."""

    #: Waiting for a prompt.
    IDLE = "idle"
    #: Running a prompt (model calls and tools).
    RUNNING = "running"
    #: Summarising the transcript.
    COMPACTING = "compacting"


def _all_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


@typing.final
class AgentLoop:
    """One agent session's loop: a transcript, a model, tools, and the supervisor behind them."""

    def __init__(
        self,
        *,
        provider: Provider,
        model: str,
        cwd: str,
        registry: ToolRegistry,
        hooks: Hooks,
        transcript: Transcript | None = None,
        max_steps: int = 16,
        system_prompt: str | None = None,
        append_system_prompt: str | None = None,
        compact_threshold: int | None = 400_000,
        max_tokens: int = 4096,
        audit: AuditLog | None = None,
        reasoning: ReasoningLevel | None = None,
    ) -> None:
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self._provider = provider
        self._model = model
        self._cwd = cwd
        self._registry = registry
        self._hooks = hooks
        self._transcript = transcript if transcript is not None else Transcript()
        self.max_steps = max_steps
        self._system = SystemPrompt(cwd, system_prompt, append_system_prompt)
        self.compact_threshold = compact_threshold
        self._max_tokens = max_tokens
        self._audit = audit
        check_reasoning(provider, model, reasoning)
        self._reasoning = reasoning
        #: The level of the prompt running now (a prompt may bring its own).
        self._prompt_reasoning = reasoning
        self._totals = UsageTotals()
        self._state = LoopState.IDLE
        self._host_info_stale = False
        #: Whether some extension intercepts assistant_message: None = not known yet.
        self._text_interceptors: bool | None = None

    def __repr__(self) -> str:
        return (
            f"<AgentLoop state={self._state.value} provider={self._provider.name} "
            f"model={self._model!r} messages={len(self._transcript)}>"
        )

    # --- Engine: read-only facts ---------------------------------------------------

    @property
    def state(self) -> LoopState:
        """What the loop is doing now."""
        return self._state

    @property
    def provider_name(self) -> str:
        """The provider's id."""
        return self._provider.name

    @property
    def model(self) -> str:
        """The model in use."""
        return self._model

    @property
    def cwd(self) -> str:
        """The working directory of the built-in tools."""
        return self._cwd

    @property
    def transcript(self) -> Transcript:
        """The transcript (the model's view: original texts)."""
        return self._transcript

    @property
    def registry(self) -> ToolRegistry:
        """The tool registry."""
        return self._registry

    def messages(self) -> list[Message]:
        """A copy of the transcript."""
        return self._transcript.messages()

    def tools(self) -> list[ToolSpec]:
        """The tools the model is offered now."""
        self._sync_tools()
        return self._registry.specs()

    def models(self) -> list[ModelInfo]:
        """The provider's models."""
        return self._provider.models()

    def usage(self) -> UsageTotals:
        """Token and cost totals of this session."""
        return self._totals

    @property
    def reasoning(self) -> ReasoningLevel | None:
        """The reasoning level of the next prompts (None: the provider's default)."""
        return self._reasoning

    # --- Engine: changes ----------------------------------------------------------

    def set_model(self, model: str) -> None:
        """Switch model within the provider (extensions learn it at the next prompt).

        Raises:
            ValueError: the provider lists models and ``model`` is not one of them.
            ReasoningRefused: the reasoning level is on and ``model`` cannot reason.
        """
        known = [m.id for m in self._provider.models()]
        if known and model not in known:
            raise ValueError(f"unknown model {model!r} for {self._provider.name}: {known}")
        check_reasoning(self._provider, model, self._reasoning)
        self._model = model
        self._host_info_stale = True

    def set_reasoning(self, level: ReasoningLevel | None) -> None:
        """Set the reasoning level of the next prompts (None: the provider's default).

        Raises:
            ReasoningRefused: an unknown level, or one the model cannot take.
        """
        self.check_reasoning(level)
        self._reasoning = level

    def check_reasoning(self, level: str | None) -> None:
        """Refuse ``level`` if the model in use cannot take it (``ReasoningRefused``)."""
        check_reasoning(self._provider, self._model, level)

    def clear(self) -> None:
        """Drop the transcript (and empty its saved file).

        Raises:
            AgentBusy: a prompt or compaction is running.
            SessionError: the saved file could not be rewritten.
        """
        if self._state is not LoopState.IDLE:
            raise AgentBusy("cannot clear while a prompt or compaction runs")
        self._transcript.clear()

    def extensions_changed(self) -> None:
        """Forget what is known about interceptors (after a reload, start or enable)."""
        self._text_interceptors = None
        self._sync_tools()

    def assume_no_interceptors(self) -> None:
        """Stream text live from the start (no extension can intercept it)."""
        self._text_interceptors = False

    def _sync_tools(self) -> None:
        if self._registry.sync():
            self._text_interceptors = None

    # --- hooks (every failure is "allow") -----------------------------------------

    async def _audit_records(
        self, records: list[InterventionRecord], model_args: dict[str, Any] | None = None
    ) -> None:
        if self._audit is not None:
            await self._audit.record(records, model_args=model_args)

    async def _annotate(self, records: list[InterventionRecord]) -> None:
        """Record ``records`` on the last transcript message and in the audit log."""
        if records:
            await self._transcript.annotate(records)
            await self._audit_records(records)

    async def _tell(self, event: EmitEvent) -> None:
        await tell(self._hooks, event)

    # --- prompt -----------------------------------------------------------------------

    async def prompt(
        self,
        text: str,
        images: list[ImageContent],
        emit: Emit,
        *,
        reasoning: ReasoningLevel | None = None,
    ) -> None:
        """Run one prompt to the end of the loop, emitting every event but ``done``.

        A provider failure ends the step with ``turn_end(stop="error")`` then an
        ``error`` event with its message (a failed tool is an error result); nothing
        raises. A step limit emits ``error``; a turn an extension blocks ends with
        ``turn_end(stop="blocked")`` and no ``error`` (a decision, not a failure).
        ``reasoning`` is this prompt's level (None: the session's).

        Raises:
            AgentBusy: another prompt or a compaction is running.
            ReasoningRefused: ``reasoning`` is a level the model cannot take.

        Cancellation: the running step ends (tools are stopped and reaped); if the
        model's message called tools, it enters the transcript with a result for
        every call ("aborted" where the tool did not finish, also when it never
        started), so every tool call stays answered; ``tool_result`` events for the
        calls the client saw, then ``turn_end(stop="aborted")``, are emitted
        (shielded, bounded) and ``Cancelled`` propagates. The transcript keeps what
        completed.
        """
        if self._state is not LoopState.IDLE:
            raise AgentBusy("a prompt or compaction is already running")
        self.check_reasoning(reasoning)
        self._prompt_reasoning = reasoning if reasoning is not None else self._reasoning
        self._state = LoopState.RUNNING  # IDLE -> RUNNING
        try:
            await self._maybe_compact(emit)
            if self._host_info_stale:
                self._host_info_stale = False
                try:
                    await self._hooks.set_host_info(self._provider.name, self._model, self._cwd)
                except SupervisorError as exc:
                    log.warning("host_info_not_updated", error=str(exc))
            user = Message(role="user", content=[TextContent(text=text), *images], time=now_iso())
            await self._transcript.append(user)
            await emit(UserMessage(content=user.content, time=user.time))
            for step in range(1, self.max_steps + 1):
                if not await self._step(step, emit):
                    return
            await emit(
                ErrorEvent(
                    message=f"stopped after {self.max_steps} steps (the step limit); "
                    "send another prompt to continue, or raise --max-steps"
                )
            )
        except BaseException as exc:
            if _all_cancelled(exc):
                with trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_GRACE):
                    await emit(TurnEnd(stop="aborted"))
                    await self._tell(EmitEvent(event="turn_end", stop="aborted"))
            raise
        finally:
            self._state = LoopState.IDLE  # RUNNING -> IDLE

    async def _end(self, emit: Emit, stop: StopReason, error: str | None = None) -> None:
        await emit(TurnEnd(stop=stop, error=error))
        await self._tell(EmitEvent(event="turn_end", stop=stop))

    async def _fail(self, emit: Emit, message: str) -> None:
        """The model call failed: ``turn_end(stop="error")``, then ``error`` (the
        reference's clients detect a failed prompt through ``error`` only)."""
        await self._end(emit, "error", message)
        await emit(ErrorEvent(message=message))

    async def _step(self, step: int, emit: Emit) -> bool:
        """One model call and its tools; True when the loop should go on."""
        await emit(TurnStart(step=step))
        gate = await consult(self._hooks.intercept_turn_start(step))
        if gate.block:
            log.info("turn_blocked", step=step, by=gate.blocked_by, reason=gate.reason)
            await self._annotate(intervention_records("turn_start", gate, step=step))
            await emit(TurnEnd(stop="blocked", error=blocked_text(gate)))
            return False
        await self._tell(EmitEvent(event="turn_start", step=step))
        self._sync_tools()
        tools = self._registry.specs()
        request = ModelRequest(
            model=self._model,
            system=self._system.render(tools, self._registry.generation),
            messages=self._transcript.messages(),
            tools=tools,
            max_tokens=self._max_tokens,
            reasoning=self._prompt_reasoning,
        )
        hold = self._text_interceptors is not False
        await emit(AssistantStart())
        try:
            reply = await read_reply(self._provider, request, emit, hold=hold)
        except EmitFailed as exc:
            raise exc.error from None
        except ProviderError as exc:
            log.info("provider_failed", provider=self._provider.name, error=str(exc))
            await self._fail(emit, str(exc))
            return False
        except Exception as exc:  # a provider bug must end the step, not the session
            log.exception("provider_crashed", provider=self._provider.name)
            await self._fail(emit, f"{self._provider.name}: unexpected failure: {exc!r}")
            return False
        calls, thinking, usage, text = reply.calls, reply.thinking, reply.usage, reply.text
        if reply.stop is None:
            await self._fail(emit, f"{self._provider.name}: the stream ended early")
            return False
        if not calls:
            message = Message(
                role="assistant",
                content=[TextContent(text=text)] if text else [],
                time=now_iso(),
                thinking=thinking,
            )
            await self._transcript.append(message)
            await self._show(text, [], hold, emit, message.time, self._annotate)
            if usage is not None:
                await self._count(usage, emit)
            await self._end(emit, "length" if reply.stop == "length" else "end_turn")
            return False
        await self._exchange(text, unique_ids(calls), usage, hold, emit, thinking)
        await self._end(emit, "tool_use")
        return True

    async def _exchange(
        self,
        text: str,
        calls: list[ProviderToolCall],
        usage: ProviderUsage | None,
        hold: bool,
        emit: Emit,
        thinking: list[ThinkingContent],
    ) -> None:
        """Show a message that calls tools, run them, and write message and results as one."""
        call_blocks: list[Block] = [
            ToolCallContent(id=c.id, name=c.name, args=c.args) for c in calls
        ]
        text_blocks: list[Block] = [TextContent(text=text)] if text else []
        message = Message(
            role="assistant", content=text_blocks + call_blocks, time=now_iso(), thinking=thinking
        )
        kept: list[InterventionRecord] = []

        async def keep(records: list[InterventionRecord]) -> None:
            kept.extend(records)
            await self._audit_records(records)

        tools = ToolRound(calls, registry=self._registry, hooks=self._hooks, audit=self._audit)
        try:
            await self._show(text, call_blocks, hold, emit, message.time, keep)
            if usage is not None:
                await self._count(usage, emit)
            await tools.run(emit)
        except BaseException:
            await self._settle(annotated(message, kept), tools, emit, aborted=True)
            raise
        await self._settle(annotated(message, kept), tools, emit, aborted=False)

    async def _settle(
        self, message: Message, tools: ToolRound, emit: Emit, *, aborted: bool
    ) -> None:
        """Write ``message`` and its answers to the transcript, whatever happened.

        The answers are taken and entered into memory before the first checkpoint;
        the file write and the events run shielded (bounded). While unwinding
        (``aborted``) a failed save is logged, not raised: the error being unwound
        is the one to report.
        """
        answer = tools.answer()
        with trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_GRACE):
            try:
                await self._transcript.append_exchange(message, answer)
            except SessionError as exc:
                if not aborted:
                    raise
                log.error("session_write_failed", error=str(exc))
            if aborted:
                await tools.report_aborted(emit, answer)

    async def _show(
        self,
        text: str,
        call_blocks: list[Block],
        hold: bool,
        emit: Emit,
        time: str,
        keep: Callable[[list[InterventionRecord]], Awaitable[None]],
    ) -> None:
        """Let interceptors see the text, then show what they allow (``keep`` their records)."""
        visible = text
        if text:
            outcome = await consult(self._hooks.intercept_assistant_message(text))
            self._text_interceptors = bool(outcome.consulted)
            await keep(intervention_records("assistant_message", outcome))
            if outcome.block:
                log.info("assistant_message_suppressed", by=outcome.blocked_by)
                visible = ""
                if outcome.reason:
                    who = outcome.blocked_by or "extension"
                    note = f"assistant message hidden: {outcome.reason}"
                    await emit(ExtDisplay(extension=who, text=note))
            elif outcome.text is not None:
                visible = outcome.text
            if hold and visible:
                await emit(TextDelta(delta=visible))
        shown: list[Block] = [TextContent(text=visible)] if visible else []
        await emit(AssistantMessage(content=shown + call_blocks, time=time))
        if visible:
            await self._tell(EmitEvent(event="assistant_message", text=visible))

    async def _count(self, usage: ProviderUsage, emit: Emit) -> None:
        self._totals = self._totals.plus(usage)
        await emit(
            Usage(
                input=usage.input,
                output=usage.output,
                cache_read=usage.cache_read,
                cache_write=usage.cache_write,
                cost_usd=usage.cost_usd,
                cumulative=self._totals,
            )
        )

    # --- compaction --------------------------------------------------------------------

    async def _maybe_compact(self, emit: Emit) -> None:
        limit = self.compact_threshold
        if limit is not None and self._transcript.size > limit and len(self._transcript) > 1:
            log.info("auto_compact", size=self._transcript.size, limit=limit)
            await self._compact(emit)

    async def compact(self, emit: Emit) -> str:
        """Summarise the transcript into one message; returns the summary.

        The model writes the summary; if it fails or returns nothing, a local
        extractive summary is used (an ``error`` event says so), so compaction
        always bounds the transcript. Emits ``compact_done``.

        Raises:
            AgentBusy: a prompt or compaction is running.

        Cancellation: the transcript is left unchanged.
        """
        if self._state is not LoopState.IDLE:
            raise AgentBusy("a prompt or compaction is already running")
        self._state = LoopState.COMPACTING  # IDLE -> COMPACTING
        try:
            return await self._compact(emit)
        finally:
            self._state = LoopState.IDLE  # COMPACTING -> IDLE

    async def _compact(self, emit: Emit) -> str:
        messages = self._transcript.messages()
        if not messages:
            await emit(CompactDone(summary=""))
            return ""

        async def count(usage: ProviderUsage) -> None:
            await self._count(usage, emit)

        summary, problem = await summarize(
            self._provider, self._model, self._max_tokens, messages, count
        )
        if problem is not None:
            await emit(ErrorEvent(message=f"compaction: {problem}; used a local summary instead"))
        await self._transcript.replace([summary_message(summary)])
        await emit(CompactDone(summary=summary))
        return summary
