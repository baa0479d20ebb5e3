"""Cancel a turn at its N-th checkpoint, and a model as strict as the real APIs.

* :class:`CancelAtStep`: a trio instrument that counts the steps of the tasks under
  one root task and cancels a scope (or calls a function) at the N-th, so the
  cancellation lands on the N-th checkpoint of that work;
* :class:`StrictModel`: a provider answering by the last message (tool calls named
  by the prompt) that refuses a request OpenAI or Anthropic would refuse, mapped as
  the real providers map it (:func:`refusal`).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable

import trio

from agent import ProviderError, TextContent
from agent._providers.anthropic import _map_messages as anthropic_messages
from agent._providers.base import (
    ModelInfo,
    ModelRequest,
    ProviderEvent,
    ProviderStop,
    ProviderTextDelta,
    ProviderToolCall,
    ProviderUsage,
)
from agent._providers.openai import _map_messages as openai_messages
from agent._transcript import is_compaction
from helpers.api_rules import anthropic_problem, openai_problem


def refusal(request: ModelRequest) -> str | None:
    """Why OpenAI or Anthropic would refuse ``request`` (mapped as the providers map it)."""
    oa = openai_problem(
        {"model": "m", "messages": openai_messages(request.system, request.messages)}
    )
    an = anthropic_problem(
        {"model": "m", "max_tokens": 1, "messages": anthropic_messages(request.messages)}
    )
    found = oa or an
    return None if found is None else found.message


class StrictModel:
    """A model that answers by the last message and refuses what the real APIs refuse.

    ``scenarios`` maps a prompt to the tools the first answer to it calls (each with
    ``{"n": 1}``, or ``args``); any other request is answered with text. A
    compaction request is answered with a summary.
    """

    def __init__(self, scenarios: dict[str, list[str]], args: dict[str, object] | None = None):
        self.scenarios = scenarios
        self.args = args or {"n": 1}
        self.ids = itertools.count(1)
        self.refused: list[str] = []
        self.requests = 0

    @property
    def name(self) -> str:
        return "strict"

    def models(self) -> list[ModelInfo]:
        return [ModelInfo(id="m", provider="strict")]

    async def prepare(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        self.requests += 1
        problem = refusal(request)
        if problem is not None:
            self.refused.append(problem)
            raise ProviderError("strict", f"HTTP 400: {problem}", status=400)
        if is_compaction(request):
            await trio.lowlevel.checkpoint()
            yield ProviderTextDelta(text="the summary")
            yield ProviderStop(reason="end_turn")
            return
        last = request.messages[-1]
        said = "".join(b.text for b in last.content if isinstance(b, TextContent))
        tools = self.scenarios.get(said, []) if last.role == "user" else []
        for piece in ("Let me ", "see. ") if tools else ("A reply ", "in pieces."):
            await trio.lowlevel.checkpoint()  # the network between two chunks
            yield ProviderTextDelta(text=piece)
        for name in tools:
            await trio.lowlevel.checkpoint()
            yield ProviderToolCall(id=f"call_{next(self.ids)}", name=name, args=dict(self.args))
        yield ProviderUsage(input=10, output=5)
        yield ProviderStop(reason="tool_use" if tools else "end_turn")


class CancelAtStep(trio.abc.Instrument):
    """Calls ``cancel`` when the tasks under ``root`` begin their ``at``-th step.

    Trio delivers the cancellation at the next checkpoint of that step. Set
    ``root`` and ``cancel`` to arm it (and ``root`` back to None to disarm).
    """

    def __init__(self, at: int) -> None:
        self.at = at
        self.steps = 0
        self.root: trio.lowlevel.Task | None = None
        self.cancel: Callable[[], object] | None = None
        self.fired = False

    def _ours(self, task: trio.lowlevel.Task) -> bool:
        walk: trio.lowlevel.Task | None = task
        while walk is not None and walk is not self.root:
            nursery = walk.parent_nursery
            walk = nursery.parent_task if nursery is not None else None
        return walk is not None

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.root is None or self.fired or not self._ours(task):
            return
        self.steps += 1
        if self.steps == self.at:
            self.fired = True
            assert self.cancel is not None
            self.cancel()
