"""Retrying model calls: the policy as pure functions, and the loop that applies it.

A call is retried when it failed with a retryable :class:`ProviderError` (429, 408,
409, 5xx, a connection that failed or broke, a timeout) *before it produced any
output*: once a text delta or a tool call was streamed, a retry would show the
user a second answer, so the error stands. Delays grow exponentially with "equal
jitter" (half fixed, half random) up to a cap; a server's ``Retry-After`` (seconds
or an HTTP date; OpenAI's ``retry-after-ms`` too) replaces the computed delay. The
number of retries and the total time spent are both bounded; a ``Retry-After``
that does not fit in what is left ends the retries at once.

The policy is written here rather than taken from a library (``stamina``,
``tenacity``): each wait must be announced as a :class:`ProviderRetry` event
*before* it starts, with the server's own delay, from inside an async generator,
which their decorator and context-manager shapes do not offer without global
instrumentation hooks.
"""

from __future__ import annotations

import email.utils
import math
import random
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from datetime import UTC, datetime

import trio

from sandbox.log import get_logger

from .._exceptions import ProviderError
from .base import ProviderEvent, ProviderRetry, ProviderSettings

__all__ = ["parse_retry_after", "retry_delay", "with_retries"]

log = get_logger()


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for: delta-seconds or an HTTP date.

    Returns None for a missing or unreadable value; a date in the past is 0.
    """
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)


def retry_delay(
    settings: ProviderSettings,
    retry: int,
    *,
    retry_after: float | None,
    elapsed: float,
    rng: Callable[[float, float], float] = random.uniform,
) -> float | None:
    """The wait before retry number ``retry`` (from 1), or None to give up.

    Args:
        settings: ``retries``, ``retry_base``, ``retry_cap``, ``retry_max_time``.
        retry: which retry this would be.
        retry_after: what the server asked for, in seconds, if it did.
        elapsed: seconds spent on this call so far.
        rng: ``uniform(a, b)``; a seam for tests.
    """
    if retry > settings.retries:
        return None
    if retry_after is not None:
        delay = retry_after
    else:
        ceiling = min(settings.retry_cap, settings.retry_base * 2.0 ** (retry - 1))
        delay = ceiling / 2 + rng(0.0, ceiling / 2)
    if elapsed + delay > settings.retry_max_time:
        return None
    return delay


def _reason(error: ProviderError) -> str:
    if error.status is not None:
        return str(error.status)
    text = str(error).removeprefix(f"{error.provider}: ")
    return text if len(text) <= 60 else text[:59] + "…"


async def with_retries(
    settings: ProviderSettings,
    attempt: Callable[[], AsyncIterator[ProviderEvent]],
) -> AsyncIterator[ProviderEvent]:
    """Run ``attempt()`` until it streams, retrying under ``settings``.

    Yields the attempt's events, and a :class:`ProviderRetry` before each wait.

    Raises:
        ProviderError: the last failure, once retries are exhausted, the error is not
            retryable, or output had already been streamed; its message says how
            many attempts were made.

    Cancellation: the attempt in flight is closed; a wait ends at once.
    """
    started = trio.current_time()
    retry = 0
    while True:
        produced = False
        try:
            async with aclosing(attempt()) as events:  # type: ignore[type-var]
                async for event in events:
                    produced = True
                    yield event
            return
        except ProviderError as exc:
            if produced or not exc.retryable:
                raise
            retry += 1
            elapsed = trio.current_time() - started
            delay = retry_delay(settings, retry, retry_after=exc.retry_after, elapsed=elapsed)
            if delay is None:
                if retry == 1:
                    raise
                raise ProviderError(
                    exc.provider,
                    f"{str(exc).removeprefix(exc.provider + ': ')} "
                    f"(gave up after {retry} attempts in {elapsed:.0f} s)",
                    status=exc.status,
                    retryable=exc.retryable,
                    retry_after=exc.retry_after,
                ) from exc
            log.warning(
                "provider_retry",
                provider=exc.provider,
                retry=retry,
                delay=round(delay, 3),
                status=exc.status,
                error=str(exc),
            )
            notice = ProviderRetry(
                attempt=retry + 1, delay=delay, reason=_reason(exc), error=str(exc)
            )
        yield notice
        await trio.sleep(delay)
