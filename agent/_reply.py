"""One model reply, read from the provider's stream: its text, tool calls,
thinking, usage and stop reason, with the live events it produces on the way.

:func:`read_reply` is the loop's only reader of a provider stream. Text deltas are
relayed live unless ``hold`` (an extension may still rewrite the answer); thinking
deltas always are (interceptors of ``assistant_message`` see and rewrite the answer
only); retries are relayed as ``retry`` events. A failure of the caller's ``emit``
(a closed stdout) comes out as :class:`EmitFailed`, never mistaken for the provider's.
"""

from __future__ import annotations

import typing
from contextlib import aclosing
from dataclasses import dataclass, field

import msgspec

from ._events import AgentEvent, Emit, Retry, TextDelta, ThinkingDelta
from ._messages import ThinkingContent
from ._providers.base import (
    ModelRequest,
    Provider,
    ProviderRetry,
    ProviderStop,
    ProviderTextDelta,
    ProviderThinkingBlock,
    ProviderThinkingDelta,
    ProviderToolCall,
    ProviderUsage,
)

__all__ = ["EmitFailed", "Reply", "read_reply"]


@dataclass
class Reply:
    """What one model reply said; ``stop`` is None when the stream ended early."""

    parts: list[str] = field(default_factory=list)
    calls: list[ProviderToolCall] = field(default_factory=list)
    thinking: list[ThinkingContent] = field(default_factory=list)
    usage: ProviderUsage | None = None
    stop: str | None = None

    @property
    def text(self) -> str:
        """The answer's text, whole."""
        return "".join(self.parts)


@typing.final
class EmitFailed(Exception):
    """The caller's ``emit`` raised while the provider's stream was open: its error,
    not the provider's (a closed stdout must not be logged as a provider crash)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


async def _relay(emit: Emit, event: AgentEvent) -> None:
    try:
        await emit(event)
    except Exception as exc:
        raise EmitFailed(exc) from exc


async def read_reply(provider: Provider, request: ModelRequest, emit: Emit, *, hold: bool) -> Reply:
    """Read one reply of ``provider`` to ``request`` to its end.

    Raises:
        ProviderError: the provider failed (or any other exception of its stream).
        EmitFailed: ``emit`` raised (its error is ``error``).

    Cancellation: the stream is closed (``aclosing``); what was read is lost.
    """
    reply = Reply()
    async with aclosing(provider.stream(request)) as stream:  # type: ignore[type-var]
        async for event in stream:
            if isinstance(event, ProviderTextDelta):
                reply.parts.append(event.text)
                if not hold and event.text:
                    await _relay(emit, TextDelta(delta=event.text))
            elif isinstance(event, ProviderThinkingDelta):
                if event.text:
                    await _relay(emit, ThinkingDelta(delta=event.text))
            elif isinstance(event, ProviderThinkingBlock):
                reply.thinking.append(event.block)
            elif isinstance(event, ProviderToolCall):
                reply.calls.append(event)
            elif isinstance(event, ProviderUsage):
                reply.usage = event
            elif isinstance(event, ProviderStop):
                reply.stop = event.reason
            elif isinstance(event, ProviderRetry):
                await _relay(emit, Retry(**msgspec.structs.asdict(event)))
    return reply
