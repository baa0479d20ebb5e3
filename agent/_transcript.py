"""Transcripts, mirrored to a session file (:mod:`agent._sessions`), and compaction.

The transcript keeps one invariant (:mod:`agent._exchanges`): every tool call is
answered by exactly one result, in the ``tool`` message right after it. An
assistant message that calls tools enters only together with its answers
(:meth:`Transcript.append_exchange`: both in memory at once, both in the file in
one write), and messages from elsewhere are repaired where they enter (an
unanswered call gets an "aborted" error result, logged), so no model request can
hold a call without its result.

New messages are appended to the session file as they enter the transcript (one
record each); provenance records (which extension blocked or rewrote what, see
:meth:`Transcript.annotate`) are appended as ``interventions`` records for the
message before them, and a rewrite folds them into their message. Compaction and
``clear`` rewrite the file atomically (temporary file + ``rename``), which is what
keeps a long session's file bounded.

Compaction summarises the transcript into one user message. The model writes the
summary (the request is recognisable by :data:`COMPACT_SYSTEM`); the offline and
scripted providers answer it with :func:`local_summary`, a deterministic extractive
summary, so compaction works without a network.
"""

from __future__ import annotations

import typing

import msgspec
import trio

from sandbox.log import get_logger

from ._exchanges import repair_tool_calls, tool_call_problems, tool_calls
from ._messages import (
    InterventionRecord,
    Message,
    TextContent,
    ToolCallContent,
    ToolResultContent,
    annotated,
    now_iso,
    text_of,
)
from ._providers.base import ModelRequest
from ._sessions import SessionStore

__all__ = [
    "COMPACT_INSTRUCTION",
    "COMPACT_SYSTEM",
    "SUMMARY_PREFIX",
    "Transcript",
    "is_compaction",
    "local_summary",
    "message_size",
    "summary_message",
]

#: System prompt of a compaction request; providers may recognise it.
COMPACT_SYSTEM = (
    "You are compacting a conversation between a user and a coding agent. Summarise it "
    "in a few short paragraphs: the user's goals, what was done (tools called, files "
    "touched, results), decisions made, and what is still open. Write plain text only."
)
#: The user message that ends a compaction request.
COMPACT_INSTRUCTION = "Summarise the conversation above for your own later use."
#: First line of the message that replaces a compacted transcript.
SUMMARY_PREFIX = "[Summary of the conversation so far]"

_SUMMARY_LIMIT = 4000
_encoder = msgspec.json.Encoder()

log = get_logger(__name__)


def message_size(message: Message) -> int:
    """Size of a message in bytes of JSON, the unit of the compaction threshold."""
    return len(_encoder.encode(message))


@typing.final
class Transcript:
    """The messages of a session, mirrored to a :class:`SessionStore` when there is one.

    Tracks the JSON size of its messages so the loop can compact before it grows
    past a threshold. ``messages`` that break the tool-call pairing are repaired
    (and the repair logged as ``transcript_repaired``); the store is not rewritten
    here (:meth:`SessionStore.open` repairs its file itself).
    """

    def __init__(self, messages: list[Message] | None = None, store: SessionStore | None = None):
        self._messages: list[Message] = _repaired(list(messages or []), "given")
        self._store = store
        self._size = sum(message_size(m) for m in self._messages)

    def __repr__(self) -> str:
        where = str(self._store.path) if self._store else "memory"
        return f"<Transcript messages={len(self._messages)} size={self._size} store={where}>"

    @property
    def size(self) -> int:
        """Total JSON size of the messages in bytes."""
        return self._size

    @property
    def store(self) -> SessionStore | None:
        """Where the transcript is saved, if anywhere."""
        return self._store

    def messages(self) -> list[Message]:
        """A copy of the messages."""
        return list(self._messages)

    def __len__(self) -> int:
        return len(self._messages)

    async def append(self, message: Message) -> None:
        """Add a message that neither calls tools nor answers calls (and save it).

        Raises:
            SessionError: saving failed; the message is still in memory.
            ValueError: ``message`` calls tools or is a ``tool`` message: those enter
                with :meth:`append_exchange`.

        Cancellation: the save is shielded and runs to its end, so memory and file
        agree and the file never holds half a line written by us.
        """
        if message.role == "tool" or tool_calls(message):
            raise ValueError("tool calls and their results enter together: use append_exchange")
        await self._add([message])

    async def append_exchange(self, call: Message, answer: Message) -> None:
        """Add an assistant message that calls tools and the ``tool`` message answering it.

        Both enter memory at once and the file in one write, so no reader, crash or
        cancellation can see the call without its results.

        Raises:
            SessionError: saving failed; both messages are still in memory.
            ValueError: ``answer`` does not hold exactly one result per call of ``call``.

        Cancellation: as :meth:`append`.
        """
        problems = tool_call_problems([call, answer]) if tool_calls(call) else ["no tool call"]
        if problems:
            raise ValueError(f"not an exchange: {'; '.join(problems)}")
        await self._add([call, answer])

    async def _add(self, messages: list[Message]) -> None:
        self._messages.extend(messages)
        self._size += sum(message_size(m) for m in messages)
        if self._store is not None:
            # Shielded: memory and file must agree even when the caller is cancelled;
            # the write is one small append.
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._store.append_many, messages)

    async def annotate(self, records: list[InterventionRecord]) -> None:
        """Attach provenance ``records`` to the last message (and save them).

        Raises:
            SessionError: saving failed; the records are still in memory.
            ValueError: the transcript is empty.

        Cancellation: as :meth:`append`.
        """
        if not records:
            return
        if not self._messages:
            raise ValueError("no message to annotate")
        last = self._messages[-1]
        self._messages[-1] = updated = annotated(last, records)
        self._size += message_size(updated) - message_size(last)
        if self._store is not None:
            with trio.CancelScope(shield=True):  # as in append()
                await trio.to_thread.run_sync(self._store.annotate, records)

    def clear(self) -> None:
        """Drop every message and empty the saved file (a small synchronous write).

        Raises:
            SessionError: the file could not be rewritten; memory is cleared anyway.
        """
        self._messages = []
        self._size = 0
        if self._store is not None:
            self._store.rewrite([])

    async def aclose(self) -> None:
        """Sync and close the session file and release its lock (no-op without one).

        Cancellation: shielded; the file is always closed.
        """
        if self._store is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._store.close)

    async def replace(self, messages: list[Message]) -> None:
        """Replace every message (compaction, clear), rewriting the file atomically.

        ``messages`` that break the tool-call pairing are repaired first (logged).

        Raises:
            SessionError: saving failed; memory is updated anyway.

        Cancellation: as :meth:`append`.
        """
        self._messages = _repaired(list(messages), "replaced")
        self._size = sum(message_size(m) for m in self._messages)
        if self._store is not None:
            with trio.CancelScope(shield=True):  # as in append()
                await trio.to_thread.run_sync(self._store.rewrite, self._messages)


def _repaired(messages: list[Message], where: str) -> list[Message]:
    fixed, notes = repair_tool_calls(messages)
    if notes:
        log.warning("transcript_repaired", messages=where, repairs=notes)
    return fixed


def is_compaction(request: ModelRequest) -> bool:
    """True when ``request`` asks for a compaction summary."""
    return request.system == COMPACT_SYSTEM


def summary_message(summary: str) -> Message:
    """The single message that replaces a compacted transcript."""
    return Message(
        role="user", content=[TextContent(text=f"{SUMMARY_PREFIX}\n{summary}")], time=now_iso()
    )


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def local_summary(messages: list[Message], *, limit: int = _SUMMARY_LIMIT) -> str:
    """A deterministic extractive summary of ``messages``, at most ``limit`` characters.

    Keeps an earlier summary (clipped), every user request, each tool called with
    whether it failed, and the last assistant answer. Used by the offline and
    scripted providers, and as the fallback when a model returns an empty summary.
    """
    earlier = ""
    requests: list[str] = []
    tools: list[str] = []
    failures = 0
    last_answer = ""
    for message in messages:
        text = text_of(message)
        if message.role == "user":
            if text == COMPACT_INSTRUCTION:
                continue
            if text.startswith(SUMMARY_PREFIX):
                earlier = text[len(SUMMARY_PREFIX) :].strip()
            elif text:
                requests.append(_clip(text, 160))
        elif message.role == "assistant":
            if text:
                last_answer = _clip(text, 300)
            tools.extend(b.name for b in message.content if isinstance(b, ToolCallContent))
        else:
            failures += sum(
                1 for b in message.content if isinstance(b, ToolResultContent) and b.is_error
            )
    tail: list[str] = []
    if tools:
        counts: dict[str, int] = {}
        for name in tools:
            counts[name] = counts.get(name, 0) + 1
        listed = ", ".join(f"{name}×{n}" for name, n in counts.items())
        tail.append(_clip(f"Tools called: {listed}; {failures} failed.", limit // 4))
    if last_answer:
        tail.append(_clip("Last answer: " + last_answer, limit // 4))
    head: list[str] = []
    if earlier:
        head.append(_clip("Earlier: " + earlier, limit // 4))
    if requests:
        shown = requests[-8:]
        more = f" (and {len(requests) - len(shown)} earlier)" if len(requests) > len(shown) else ""
        room = limit - sum(len(p) + 1 for p in head + tail)
        if room > 40:
            head.append(_clip("The user asked" + more + ": " + " | ".join(shown), room - 1))
    summary = "\n".join(head + tail) or "Nothing happened yet."
    return summary if len(summary) <= limit else summary[: limit - 1] + "…"
