"""The model provider interface.

A provider turns a :class:`ModelRequest` into a stream of :data:`ProviderEvent`:
text deltas, complete tool calls, usage, and exactly one final :class:`Stop`.
Providers raise :class:`~agent._exceptions.ProviderError` for failures (HTTP
errors, broken streams); the loop turns those into a ``turn_end`` with
``stop="error"``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol

import msgspec

from .._messages import Message

__all__ = [
    "ModelInfo",
    "ModelRequest",
    "Provider",
    "ProviderEvent",
    "ProviderStop",
    "ProviderTextDelta",
    "ProviderToolCall",
    "ProviderUsage",
    "ToolSpec",
]


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


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One model call."""

    model: str
    system: str
    messages: list[Message]
    tools: list[ToolSpec]
    max_tokens: int = 4096


class ProviderTextDelta(msgspec.Struct, frozen=True, kw_only=True, tag="text"):
    """Partial assistant text."""

    text: str


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


ProviderEvent = ProviderTextDelta | ProviderToolCall | ProviderUsage | ProviderStop


class Provider(Protocol):
    """A model provider."""

    @property
    def name(self) -> str:
        """Provider id, e.g. ``"offline"`` or ``"anthropic"``."""
        ...

    def models(self) -> list[ModelInfo]:
        """Models this provider knows."""
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
