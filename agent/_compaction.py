"""Compaction: the model summarises the transcript, or a local summary stands in.

:func:`summarize` asks the session's provider for a summary of the messages (the
prompts are :data:`~agent._transcript.COMPACT_SYSTEM` and
:data:`~agent._transcript.COMPACT_INSTRUCTION`); when the model fails or says
nothing, an extractive local summary is used, so compaction always bounds the
transcript. :meth:`agent._loop.AgentLoop.compact` stores the result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import aclosing

from ._exceptions import ProviderError
from ._messages import Message, TextContent, now_iso
from ._providers.base import ModelRequest, Provider, ProviderTextDelta, ProviderUsage
from ._transcript import COMPACT_INSTRUCTION, COMPACT_SYSTEM, local_summary

__all__ = ["summarize"]


async def summarize(
    provider: Provider,
    model: str,
    max_tokens: int,
    messages: list[Message],
    count: Callable[[ProviderUsage], Awaitable[None]],
) -> tuple[str, str | None]:
    """The summary of ``messages``, and why a local one was used instead (the model
    failed, or its summary was empty), or None.

    ``count`` is given the usage the model reports.

    Cancellation: the model call is abandoned; nothing is summarised.
    """
    ask = Message(role="user", content=[TextContent(text=COMPACT_INSTRUCTION)], time=now_iso())
    request = ModelRequest(
        model=model,
        system=COMPACT_SYSTEM,
        messages=[*messages, ask],
        tools=[],
        max_tokens=max_tokens,
    )
    parts: list[str] = []
    problem: str | None = None
    try:
        async with aclosing(provider.stream(request)) as stream:  # type: ignore[type-var]
            async for event in stream:
                if isinstance(event, ProviderTextDelta):
                    parts.append(event.text)
                elif isinstance(event, ProviderUsage):
                    await count(event)
    except ProviderError as exc:
        parts, problem = [], str(exc)
    summary = "".join(parts).strip()
    if summary:
        return summary, None
    return local_summary(messages), problem or "the model's summary was empty"
