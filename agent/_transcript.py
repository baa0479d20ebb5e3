"""Transcripts, their JSONL store under ``$CORRAL_HOME/sessions/``, and compaction.

A saved session is one JSON object per line::

    {"type":"session","version":1,"name":"work","provider":"offline","model":"offline","cwd":"/src","created":"2026-01-01T00:00:00Z"}
    {"type":"message","message":{"role":"user","content":[{"type":"text","text":"hi"}],"time":"..."}}
    {"type":"message","message":{"role":"assistant","content":[...],"time":"..."}}
    {"type":"interventions","records":[{"extension":"guard","event":"assistant_message",...}]}

An ``interventions`` line adds provenance records to the message before it (see
:meth:`Transcript.annotate`); a rewrite of the file folds them into their message.
New messages are appended as they enter the transcript (one ``write`` each), so a
crash loses at most the message being written; a torn last line is dropped with a
warning on resume. Compaction and ``clear`` rewrite the file atomically (temporary
file + ``rename``), which is what keeps a long session's file bounded.

Compaction summarises the transcript into one user message. The model writes the
summary (the request is recognisable by :data:`COMPACT_SYSTEM`); the offline and
scripted providers answer it with :func:`local_summary`, a deterministic extractive
summary, so compaction works without a network.
"""

from __future__ import annotations

import os
import re
import typing
from pathlib import Path

import msgspec
import structlog
import trio

from ._exceptions import SessionError
from ._messages import (
    InterventionRecord,
    Message,
    TextContent,
    ToolCallContent,
    ToolResultContent,
    now_iso,
    text_of,
)
from ._providers.base import ModelRequest

__all__ = [
    "COMPACT_INSTRUCTION",
    "COMPACT_SYSTEM",
    "SUMMARY_PREFIX",
    "SessionHeader",
    "SessionStore",
    "Transcript",
    "annotated",
    "is_compaction",
    "local_summary",
    "message_size",
    "summary_message",
]

log = structlog.get_logger(__name__)

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

_SESSION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SUMMARY_LIMIT = 4000


class SessionHeader(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="session"):
    """First line of a session file."""

    version: int = 1
    name: str
    provider: str = ""
    model: str = ""
    cwd: str = ""
    created: str = ""


class _MessageLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="message"):
    message: Message


class _InterventionsLine(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="interventions"
):
    records: list[InterventionRecord]


_Line = SessionHeader | _MessageLine | _InterventionsLine
_line_decoder = msgspec.json.Decoder(_Line)
_encoder = msgspec.json.Encoder()


def message_size(message: Message) -> int:
    """Size of a message in bytes of JSON, the unit of the compaction threshold."""
    return len(_encoder.encode(message))


@typing.final
class SessionStore:
    """One session file: append messages, rewrite it whole, load it back.

    Methods are synchronous (small local writes); the async :class:`Transcript`
    runs them in a worker thread.
    """

    def __init__(self, path: Path, header: SessionHeader) -> None:
        self.path = path
        self.header = header

    @classmethod
    def for_name(cls, home: Path, name: str, header: SessionHeader) -> SessionStore:
        """The store of session ``name`` under ``home/sessions``.

        Raises:
            SessionError: ``name`` is not a plain file name (letters, digits, ``._-``).
        """
        if not _SESSION_NAME.match(name):
            raise SessionError(
                f"invalid session name {name!r}: use letters, digits, '.', '_' or '-' "
                "(at most 128, not starting with '.' or '-')"
            )
        return cls(home / "sessions" / f"{name}.jsonl", header)

    def load(self) -> list[Message]:
        """The saved messages, or ``[]`` when the file does not exist yet.

        Raises:
            SessionError: the file cannot be read, or a line (other than a torn last
                line) is not a valid session record; the message names file and line.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise SessionError(f"{self.path}: cannot read session: {exc.strerror}") from exc
        lines = data.split(b"\n")
        torn = bool(lines) and lines[-1] != b""
        messages: list[Message] = []
        for index, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                record = _line_decoder.decode(raw)
            except msgspec.DecodeError as exc:
                if torn and index == len(lines):
                    log.warning("session_torn_line_dropped", path=str(self.path), line=index)
                    break
                raise SessionError(f"{self.path}:{index}: not a session record: {exc}") from exc
            if isinstance(record, _MessageLine):
                messages.append(record.message)
            elif isinstance(record, _InterventionsLine):
                if not messages:
                    raise SessionError(f"{self.path}:{index}: interventions before any message")
                messages[-1] = annotated(messages[-1], record.records)
            elif index != 1:
                raise SessionError(f"{self.path}:{index}: session header after line 1")
        return messages

    def append(self, message: Message) -> None:
        """Append one message (writing the header first when the file is new).

        Raises:
            SessionError: the write failed.
        """
        self._append(_MessageLine(message=message))

    def annotate(self, records: list[InterventionRecord]) -> None:
        """Append provenance records for the last message.

        Raises:
            SessionError: the write failed.
        """
        self._append(_InterventionsLine(records=records))

    def _append(self, line: _MessageLine | _InterventionsLine) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            new = not self.path.exists() or self.path.stat().st_size == 0
            with self.path.open("ab") as fh:
                chunk = b""
                if new:
                    chunk += _encoder.encode(self.header) + b"\n"
                chunk += _encoder.encode(line) + b"\n"
                fh.write(chunk)
        except OSError as exc:
            raise SessionError(f"{self.path}: cannot write session: {exc.strerror}") from exc

    def rewrite(self, messages: list[Message]) -> None:
        """Replace the file with ``messages`` atomically.

        Raises:
            SessionError: the write failed (the old file is left as it was).
        """
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tmp.open("wb") as fh:
                fh.write(_encoder.encode(self.header) + b"\n")
                for message in messages:
                    fh.write(_encoder.encode(_MessageLine(message=message)) + b"\n")
                fh.flush()
                os.fsync(fh.fileno())
            tmp.replace(self.path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise SessionError(f"{self.path}: cannot write session: {exc.strerror}") from exc


@typing.final
class Transcript:
    """The messages of a session, mirrored to a :class:`SessionStore` when there is one.

    Tracks the JSON size of its messages so the loop can compact before it grows
    past a threshold.
    """

    def __init__(self, messages: list[Message] | None = None, store: SessionStore | None = None):
        self._messages: list[Message] = list(messages or [])
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
        """Add a message (and save it).

        Raises:
            SessionError: saving failed; the message is still in memory.

        Cancellation: the save is shielded and runs to its end, so memory and file
        agree and the file never holds half a line written by us.
        """
        self._messages.append(message)
        self._size += message_size(message)
        if self._store is not None:
            # Shielded: memory and file must agree even when the caller is cancelled;
            # the write is one small append.
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._store.append, message)

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

    async def replace(self, messages: list[Message]) -> None:
        """Replace every message (compaction, clear), rewriting the file atomically.

        Raises:
            SessionError: saving failed; memory is updated anyway.

        Cancellation: as :meth:`append`.
        """
        self._messages = list(messages)
        self._size = sum(message_size(m) for m in self._messages)
        if self._store is not None:
            with trio.CancelScope(shield=True):  # as in append()
                await trio.to_thread.run_sync(self._store.rewrite, self._messages)


def annotated(message: Message, records: list[InterventionRecord]) -> Message:
    """``message`` with ``records`` added to its interventions."""
    return msgspec.structs.replace(message, interventions=[*message.interventions, *records])


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
