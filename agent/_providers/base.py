"""The model provider interface.

A provider turns a :class:`ModelRequest` into a stream of :data:`ProviderEvent`:
text deltas, complete tool calls, usage, and exactly one final :class:`Stop`; an
HTTP provider may also announce a retry (:class:`ProviderRetry`) before any output.
A provider that reasons may also stream its thinking (:class:`ProviderThinkingDelta`)
and close each thinking block (:class:`ProviderThinkingBlock`, with the signature
the API wants back); thinking is never text. Providers raise
:class:`~agent._exceptions.ProviderError` for failures (HTTP
errors, broken streams); the loop turns those into a ``turn_end`` with
``stop="error"``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol

import msgspec

from .._messages import Message, ThinkingContent

__all__ = [
    "REASONING_LEVELS",
    "ModelInfo",
    "ModelRequest",
    "Provider",
    "ProviderEvent",
    "ProviderRetry",
    "ProviderSettings",
    "ProviderStop",
    "ProviderTextDelta",
    "ProviderThinkingBlock",
    "ProviderThinkingDelta",
    "ProviderToolCall",
    "ProviderUsage",
    "ReasoningLevel",
    "ToolSpec",
]

#: What ``--reasoning`` takes: how hard the model may think before it answers.
ReasoningLevel = Literal["off", "low", "medium", "high"]
#: The levels, in order.
REASONING_LEVELS: tuple[ReasoningLevel, ...] = ("off", "low", "medium", "high")


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool as the model sees it."""

    name: str
    description: str
    schema: dict[str, Any]


class ModelInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A model a provider offers (the RPC ``get_models`` shape)."""

    id: str
    provider: str
    context_window: int = 0
    max_output: int = 0
    reasoning: bool = False


class ProviderSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Timeouts, limits and the retry policy of the HTTP providers (seconds)."""

    #: Time to open a connection.
    connect_timeout: float = 10.0
    #: Longest gap between two bytes of a reply (not a bound on the whole reply).
    read_timeout: float = 120.0
    #: ``max_tokens`` of every model call.
    max_tokens: int = 4096
    #: Retries after the first attempt, at most.
    retries: int = 4
    #: The first retry waits about this long; each further one twice as long...
    retry_base: float = 1.0
    #: ...up to this.
    retry_cap: float = 30.0
    #: No retry starts once this much time went into one call.
    retry_max_time: float = 120.0


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One model call."""

    model: str
    system: str
    messages: list[Message]
    tools: list[ToolSpec]
    max_tokens: int = 4096
    #: How hard the model may think (``--reasoning``); None: the provider's default,
    #: no reasoning control sent.
    reasoning: ReasoningLevel | None = None


class ProviderTextDelta(msgspec.Struct, frozen=True, kw_only=True, tag="text"):
    """Partial assistant text."""

    text: str


class ProviderThinkingDelta(msgspec.Struct, frozen=True, kw_only=True, tag="thinking"):
    """Partial thinking text (shown as thinking, never part of the answer)."""

    text: str


class ProviderThinkingBlock(msgspec.Struct, frozen=True, kw_only=True, tag="thinking_block"):
    """A complete thinking block, as the transcript keeps it (signature included)."""

    block: ThinkingContent


class ProviderToolCall(msgspec.Struct, frozen=True, kw_only=True, tag="tool_call"):
    """A complete tool call (arguments fully received and parsed)."""

    id: str
    name: str
    args: dict[str, Any]


class ProviderUsage(msgspec.Struct, frozen=True, kw_only=True, tag="usage"):
    """Token counts of this call, and its cost in USD when the price is known."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost_usd: float = 0.0


class ProviderStop(msgspec.Struct, frozen=True, kw_only=True, tag="stop"):
    """The call ended; always the last event."""

    reason: Literal["end_turn", "tool_use", "length"]


class ProviderRetry(msgspec.Struct, frozen=True, kw_only=True, tag="retry"):
    """The call failed before any output and is tried again after ``delay`` seconds."""

    #: The attempt that starts after the wait (2 for the first retry).
    attempt: int
    delay: float
    #: Short cause: the HTTP status (``"429"``) or what broke.
    reason: str
    #: The whole error.
    error: str


ProviderEvent = (
    ProviderTextDelta
    | ProviderThinkingDelta
    | ProviderThinkingBlock
    | ProviderToolCall
    | ProviderUsage
    | ProviderStop
    | ProviderRetry
)


class Provider(Protocol):
    """A model provider."""

    @property
    def name(self) -> str:
        """Provider id, e.g. ``"offline"`` or ``"anthropic"``."""
        ...

    def models(self) -> list[ModelInfo]:
        """Models this provider knows."""
        ...

    def reasoning_support(self, model: str) -> bool | None:
        """Whether ``model`` takes a reasoning level: True, False (``--reasoning`` is
        refused for it), or None when not known (a model of a server the table does
        not list: the level is sent and the server decides)."""
        ...

    async def prepare(self) -> None:
        """Check the setup before anything else starts: API key, model (may ask the server).

        Raises:
            ProviderError: the provider cannot work as configured; the message says why.

        Cancellation: any request in flight is abandoned.
        """
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Stream one model call.

        The caller consumes the iterator in one task and closes it (``aclosing``).

        Raises:
            ProviderError: the call failed; the message names the provider and cause.

        Cancellation: closes the underlying stream or connection at once.
        """
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...
