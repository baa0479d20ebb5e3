"""The ``scripted`` provider: replays model turns from a JSONL script.

One line is one model call (one step of the loop). Blank lines and lines starting
with ``#`` are skipped. Fields (all optional)::

    {"text": "Let me look.",                       # streamed as text deltas
     "thinking": "The user wants the README.",     # streamed as thinking first
     "signature": "sig1",                          # the thinking block's signature
     "tool_calls": [{"name": "read", "args": {"path": "README.md"}, "id": "c1"}],
     "delay": 0.5,                                 # seconds before the first event
     "chunk": 8,                                   # characters per text delta (default 16)
     "break_after_chars": 5,                       # stream breaks after 5 characters
     "error": "rate limited",                      # the call fails with this message
     "status": 429,                                # ...and this HTTP-like status
     "stop": "end_turn",                           # or "length"; default tool_use/end_turn
     "usage": {"input": 10, "output": 3}}

Order of events in a call: ``delay``; the thinking in chunks and its block (the
script is the model: it thinks whatever ``--reasoning`` says); the text in chunks (only the first
``break_after_chars`` characters when set, then a retryable :class:`ProviderError`
"stream broke"); ``error`` raises :class:`ProviderError` after the text; otherwise
the tool calls, the usage, and the stop. Compaction requests are answered with
:func:`~agent._transcript.local_summary` and do not consume a line. When the script
runs out, the call fails with a clear error (or starts over with ``cycle=True``).
"""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator
from typing import Any, Literal

import msgspec
import trio

from supervisor.lowlevel import read_small_file

from .._exceptions import ProviderError, ScriptError
from .._exchanges import pairing_error
from .._messages import ThinkingContent
from .._transcript import is_compaction, local_summary
from .base import (
    ModelInfo,
    ModelRequest,
    ProviderEvent,
    ProviderStop,
    ProviderTextDelta,
    ProviderThinkingBlock,
    ProviderThinkingDelta,
    ProviderToolCall,
    ProviderUsage,
)

__all__ = ["ScriptToolCall", "ScriptTurn", "ScriptedProvider", "load_script", "parse_script"]

#: The largest script file read (bytes): it must be a regular file, read whole.
SCRIPT_MAX = 64 << 20


class ScriptToolCall(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A tool call the scripted model makes."""

    name: str
    args: dict[str, Any] = {}
    #: Call id; defaults to ``s<turn>_<index>``.
    id: str | None = None


class ScriptUsage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Token counts reported for a turn."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost_usd: float = 0.0


class ScriptTurn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One scripted model call."""

    text: str = ""
    thinking: str = ""
    signature: str | None = None
    tool_calls: list[ScriptToolCall] = []
    error: str | None = None
    status: int | None = None
    delay: float = 0.0
    chunk: int = 16
    stop: Literal["end_turn", "length"] | None = None
    break_after_chars: int | None = None
    usage: ScriptUsage | None = None


_turn_decoder = msgspec.json.Decoder(ScriptTurn)


def _check(turn: ScriptTurn) -> str | None:
    if turn.delay < 0:
        return "delay must be >= 0"
    if turn.chunk < 1:
        return "chunk must be >= 1"
    if turn.break_after_chars is not None and turn.break_after_chars < 0:
        return "break_after_chars must be >= 0"
    for call in turn.tool_calls:
        if not call.name:
            return "a tool call needs a non-empty name"
    return None


def parse_script(text: str, path: str = "<script>") -> list[ScriptTurn]:
    """Parse a script.

    Raises:
        ScriptError: a line is not valid JSON, has an unknown field or a bad value;
            the error names ``path`` and the 1-based line number.
    """
    turns: list[ScriptTurn] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            turn = _turn_decoder.decode(stripped)
        except msgspec.DecodeError as exc:
            raise ScriptError(path, number, str(exc)) from exc
        problem = _check(turn)
        if problem:
            raise ScriptError(path, number, problem)
        turns.append(turn)
    if not turns:
        raise ScriptError(path, 1, "the script has no turns")
    return turns


def load_script(path: str) -> list[ScriptTurn]:
    """Read and parse the script at ``path``.

    Raises:
        ScriptError: the file cannot be read or is malformed.
    """
    try:  # a FIFO, a device or a huge file is refused, never waited on or read whole
        text = read_small_file(path, SCRIPT_MAX).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ScriptError(path, 0, f"cannot read script: {why}") from exc
    return parse_script(text, path)


def _approx_tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


@typing.final
class ScriptedProvider:
    """Replays :class:`ScriptTurn` objects, one per model call."""

    def __init__(self, turns: list[ScriptTurn], *, model: str | None = None, cycle: bool = False):
        if not turns:
            raise ValueError("a script needs at least one turn")
        self._turns = turns
        self._next = 0
        self._played = 0
        self._cycle = cycle
        self._model = model or "scripted"

    def __repr__(self) -> str:
        return f"<ScriptedProvider turn={self._next}/{len(self._turns)} cycle={self._cycle}>"

    @property
    def name(self) -> str:
        """``"scripted"``."""
        return "scripted"

    @property
    def position(self) -> int:
        """Index of the next turn in the script (0 again after a cycle)."""
        return self._next

    @property
    def played(self) -> int:
        """How many turns were replayed in total (compaction answers not counted)."""
        return self._played

    def models(self) -> list[ModelInfo]:
        """The one model id this provider answers to (any id is accepted)."""
        return [ModelInfo(id=self._model, provider="scripted", reasoning=True)]

    def reasoning_support(self, model: str) -> bool:
        """True: the script decides what the model thinks."""
        return True

    def _take(self) -> tuple[int, ScriptTurn]:
        if self._next >= len(self._turns):
            if not self._cycle:
                raise ProviderError(
                    "scripted",
                    f"the script ended after {len(self._turns)} turns; "
                    "add lines to the script for more model calls",
                )
            self._next = 0
        index = self._next
        self._next += 1
        self._played += 1
        return index, self._turns[index]

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Replay the next turn.

        Raises:
            ProviderError: the turn scripts an error or a broken stream, or the
                script ran out; or, as the real APIs do (status 400, no turn used),
                the request holds a tool call without exactly one result after it.

        Cancellation: stops at once (also during ``delay``); the turn counts as used.
        """
        refused = pairing_error("scripted", request.messages)
        if refused is not None:
            raise refused
        if is_compaction(request):
            summary = local_summary(request.messages)
            yield ProviderTextDelta(text=summary)
            yield ProviderStop(reason="end_turn")
            return
        index, turn = self._take()
        if turn.delay:
            await trio.sleep(turn.delay)
        thinking = turn.thinking
        for start in range(0, len(thinking), turn.chunk):
            yield ProviderThinkingDelta(text=thinking[start : start + turn.chunk])
            await trio.lowlevel.checkpoint()
        if thinking:
            block = ThinkingContent(text=thinking, signature=turn.signature)
            yield ProviderThinkingBlock(block=block)
        text = turn.text
        broken = turn.break_after_chars is not None and turn.break_after_chars < len(text)
        if broken:
            text = text[: turn.break_after_chars]
        for start in range(0, len(text), turn.chunk):
            yield ProviderTextDelta(text=text[start : start + turn.chunk])
            await trio.lowlevel.checkpoint()
        if broken:
            raise ProviderError(
                "scripted",
                f"stream broke after {len(text)} characters (turn {index + 1})",
                retryable=True,
            )
        if turn.error is not None:
            raise ProviderError("scripted", turn.error, status=turn.status)
        for number, call in enumerate(turn.tool_calls):
            call_id = call.id or f"s{index + 1}_{number}"
            yield ProviderToolCall(id=call_id, name=call.name, args=dict(call.args))
        usage = turn.usage
        if usage is not None:
            yield ProviderUsage(
                input=usage.input,
                output=usage.output,
                cache_read=usage.cache_read,
                cache_write=usage.cache_write,
                cost_usd=usage.cost_usd,
            )
        else:
            prompt_chars = sum(len(str(m.content)) for m in request.messages[-1:])
            yield ProviderUsage(input=prompt_chars // 4, output=_approx_tokens(turn.text))
        if turn.stop is not None:
            yield ProviderStop(reason=turn.stop)
        else:
            yield ProviderStop(reason="tool_use" if turn.tool_calls else "end_turn")

    async def prepare(self) -> None:
        """Nothing to check: no key, no server.

        Cancellation: returns at once.
        """

    async def aclose(self) -> None:
        """Nothing to release.

        Cancellation: returns at once.
        """
