"""``--reasoning off|low|medium|high``: what a level asks of a model, and who may ask.

Each provider maps a level to its own control (OpenAI-style ``reasoning_effort``,
Anthropic-style extended thinking with a token budget); this module holds what they
share: the thinking budget of each level, the token limit of a call that thinks,
and the check that refuses a level for a model that cannot reason.

A call that thinks spends tokens on thinking before its answer, inside the same
``max_tokens``; so the limit of such a call grows by the level's budget, up to the
model's maximum output when the model table knows it. Anthropic also wants the
budget at least 1024 tokens and below ``max_tokens``.
"""

from __future__ import annotations

from .._exceptions import ReasoningRefused
from .base import REASONING_LEVELS, Provider, ReasoningLevel

__all__ = ["MIN_BUDGET", "THINKING_BUDGET", "check_reasoning", "limits"]

#: Thinking tokens a level allows (Anthropic's ``budget_tokens``; added to every
#: provider's ``max_tokens``, as reasoning counts against it there too).
THINKING_BUDGET: dict[ReasoningLevel, int] = {"off": 0, "low": 2048, "medium": 8192, "high": 24576}
#: Anthropic refuses a smaller ``budget_tokens``.
MIN_BUDGET = 1024


def limits(level: ReasoningLevel, max_tokens: int, max_output: int = 0) -> tuple[int, int]:
    """``(max_tokens, budget)`` of a call at ``level``: the answer's own ``max_tokens``
    plus the level's thinking budget, at most ``max_output`` (0: not known); the
    budget shrinks to fit, never below :data:`MIN_BUDGET`."""
    budget = THINKING_BUDGET[level]
    if budget == 0:
        return max_tokens, 0
    total = max_tokens + budget
    if max_output and total > max_output:
        total = max_output
        budget = max(MIN_BUDGET, min(budget, total - max(1, max_tokens // 4)))
    return max(total, budget + 1), budget


def check_reasoning(provider: Provider, model: str, level: str | None) -> None:
    """Refuse ``level`` for ``model`` when the provider knows the model does not reason.

    ``off`` (and no level) is always fine: nothing asks the model to think.

    Raises:
        ReasoningRefused: the level is unknown, or the model cannot reason.
    """
    if level is None or level == "off":
        return
    if level not in REASONING_LEVELS:
        raise ReasoningRefused(
            f"unknown reasoning level {level!r}; valid: {', '.join(REASONING_LEVELS)}"
        )
    if provider.reasoning_support(model) is not False:
        return
    able = [m.id for m in provider.models() if m.reasoning]
    hint = f", or a model that reasons ({', '.join(able)})" if able else ""
    raise ReasoningRefused(
        f"model {model!r} ({provider.name}) does not support reasoning: --reasoning "
        f"{level} cannot be used with it; use --reasoning off{hint}"
    )
