"""Cancel a turn at its N-th checkpoint, and a model as strict as the real APIs.

* :class:`CancelAtStep`: a trio instrument that counts the steps of the tasks under
  one root task and cancels a scope (or calls a function) at the N-th, so the
  cancellation lands on the N-th checkpoint of that work; :func:`cancel_at_step`
  arms one around a block;
* :class:`StrictModel`: a provider answering by the last message (tool calls named
  by the prompt) that refuses a request OpenAI or Anthropic would refuse, mapped as
  the real providers map it (:func:`refusal`);
* :func:`written_messages`: a session file's messages as written, without the
  repair a load makes.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import trio

from agent import Message, ProviderError, TextContent
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
from agent._providers.openai_messages import map_messages as openai_messages
from agent._sessions import SessionHeader, SessionStore
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


@contextmanager
def cancel_at_step(
    at: int,
    *,
    root: trio.lowlevel.Task | None = None,
    cancel: Callable[[], object] | None = None,
) -> Iterator[CancelAtStep]:
    """Cancel the block (or call ``cancel``) at step ``at`` of ``root``'s tasks.

    ``root`` defaults to the current task; the block's own cancellation is caught at
    its end, so the caller goes on (``instrument.fired`` says whether it happened).
    """
    instrument = CancelAtStep(at)
    trio.lowlevel.add_instrument(instrument)
    try:
        with trio.CancelScope() as scope:
            instrument.cancel = cancel or scope.cancel
            instrument.root = root or trio.lowlevel.current_task()
            yield instrument
    finally:
        instrument.root = None
        trio.lowlevel.remove_instrument(instrument)


def written_messages(home: Path, name: str) -> list[Message]:
    """The messages of session ``name`` under ``home`` as the file holds them
    (:meth:`SessionStore.load` would repair a broken pairing)."""
    path = SessionStore.for_name(home, name, SessionHeader(name=name)).path
    records = [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    return [msgspec.convert(r["message"], Message) for r in records if r["type"] == "message"]
