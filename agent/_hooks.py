"""The loop's side of extension interception: what it asks, and what it records.

:class:`Hooks` is what the loop needs of the supervisor's intercept chain and event
fan-out (:class:`~supervisor.SupervisorClient` implements it; pure-logic tests fake
it). The functions turn a chain's :class:`~supervisor.InterceptOutcome` into what
the loop shows and keeps: the ``tool_call`` event, the text of a block, and the
provenance records (transcript and audit log).
"""

from __future__ import annotations

from typing import Any, Protocol

from supervisor import EmitEvent, InterceptKind, InterceptOutcome

from ._events import ToolCallEvent
from ._messages import InterventionRecord
from ._providers.base import ProviderToolCall

__all__ = ["Hooks", "blocked_text", "call_event", "intervention_records"]


class Hooks(Protocol):
    """The supervisor's intercept chain and event fan-out, as the loop uses them.

    :class:`~supervisor.SupervisorClient` is the implementation; the protocol is
    the seam that lets pure-logic tests run without extension processes.
    """

    async def intercept_turn_start(self, step: int) -> InterceptOutcome: ...

    async def intercept_tool_call(
        self, tool_id: str, tool_name: str, tool_args: dict[str, Any], *, builtin: bool = True
    ) -> InterceptOutcome: ...

    async def intercept_assistant_message(self, text: str) -> InterceptOutcome: ...

    async def emit(self, event: EmitEvent) -> None: ...

    async def set_host_info(self, provider: str, model: str, cwd: str) -> None: ...


def blocked_text(outcome: InterceptOutcome) -> str:
    who = f"extension {outcome.blocked_by}" if outcome.blocked_by else "an extension"
    return f"blocked by {who}: {outcome.reason or 'no reason given'}"


def intervention_records(
    event: InterceptKind, outcome: InterceptOutcome, **context: Any
) -> list[InterventionRecord]:
    """The provenance records of ``outcome`` (``context``: tool_id, tool or step)."""
    return [
        InterventionRecord(
            extension=i.extension,
            event=event,
            kind=i.kind,
            applied=i.applied,
            reason=i.reason,
            args=i.args,
            text=i.text,
            **context,
        )
        for i in outcome.interventions
    ]


def call_event(
    call: ProviderToolCall, outcome: InterceptOutcome, preview: str | None = None
) -> ToolCallEvent:
    """The ``tool_call`` event: the model's call, who intervened, the host's preview."""
    if outcome.block:
        return ToolCallEvent(
            id=call.id, name=call.name, args=call.args, blocked_by=outcome.blocked_by
        )
    rewritten_by = outcome.rewritten_by
    return ToolCallEvent(
        id=call.id,
        name=call.name,
        args=call.args,
        ran_args=outcome.args if rewritten_by else None,
        rewritten_by=rewritten_by,
        preview=preview,
    )
