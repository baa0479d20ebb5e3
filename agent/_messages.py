"""Transcript messages and content blocks, in the shapes of the RPC wire (seeds/rpc.md).

Images keep their base64 ``data`` in memory (the model needs it); the wire form for
``get_messages`` and events reports ``bytes`` (a count) instead, via
:func:`wire_message`.

A message may carry ``interventions`` (corral addition): which extension blocked or
rewrote something in the turn the message belongs to. Providers never send them to
the model; they are provenance for people and programs reading the transcript.

Images are checked where they enter a transcript (:func:`image_problem`: an
``image/*`` mime type, base64 that decodes, at most :data:`MAX_IMAGE_BYTES`), but a
bad one can still come from an older session file. So everything that reads a
block is total: :func:`wire_message` never decodes, and :func:`model_blocks`
turns an image a model cannot take into a text note.
"""

from __future__ import annotations

import binascii
import re
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from supervisor import InterceptKind, InterventionKind

__all__ = [
    "MAX_IMAGE_BYTES",
    "Block",
    "ImageContent",
    "InterventionRecord",
    "Message",
    "NativeContent",
    "Role",
    "TextContent",
    "ThinkingContent",
    "ToolCallContent",
    "ToolResultContent",
    "annotated",
    "image_problem",
    "image_size",
    "model_blocks",
    "now_iso",
    "text_of",
    "wire_message",
]

Role = Literal["user", "assistant", "tool"]


class TextContent(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="text"):
    """Plain text."""

    text: str


class ImageContent(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="image", omit_defaults=True
):
    """An image; ``data`` is base64 (omitted on the wire, where ``bytes`` is the size)."""

    mime_type: str = "image/png"
    data: str | None = None
    bytes: int = 0


class ToolCallContent(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="tool_call"):
    """The model asked for a tool call."""

    id: str
    name: str
    args: dict[str, Any]


class NativeContent(msgspec.Struct, frozen=True, kw_only=True):
    """A tool result in a provider's own shape (a tool host's ``format_tool_result``
    envelope): a provider that speaks ``format`` sends ``content`` as it is."""

    #: ``openai.chat_completions`` or ``openai.responses``.
    format: str
    content: Any


class ToolResultContent(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag_field="type",
    tag="tool_result",
    omit_defaults=True,
):
    """What a tool returned for ``call_id``; ``native`` (when present) is the same
    result in a provider's own shape, and ``content`` its text for the others."""

    call_id: str
    is_error: bool
    content: list[TextContent | ImageContent]
    native: NativeContent | None = None


Block = TextContent | ImageContent | ToolCallContent | ToolResultContent


class ThinkingContent(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag_field="type",
    tag="thinking",
    omit_defaults=True,
):
    """What a model thought before it answered (corral addition, ``--reasoning``).

    Kept on its message apart from the content (``Message.thinking``): it is never
    answer text. ``signature`` (Anthropic's) must go back unchanged with the message
    in a tool-use exchange; ``redacted`` is an encrypted ``redacted_thinking`` block's
    data (then ``text`` is empty). The RPC wire shows the text only.
    """

    text: str = ""
    signature: str | None = None
    redacted: str | None = None


class InterventionRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An extension blocked or rewrote an event: who changed what.

    Attributes:
        extension: the extension that did it.
        event: ``tool_call``, ``turn_start`` or ``assistant_message``.
        kind: ``block`` or ``rewrite``.
        applied: False when corral ignored it (the extension may not block or
            rewrite that built-in tool: ``permissions.intercept_builtin``). Always
            present on the wire.
        reason: a block's reason, as the extension gave it.
        tool_id: the tool call's id (``tool_call``).
        tool: the tool's name (``tool_call``).
        args: the tool arguments after this extension's rewrite (``tool_call``).
        text: the user-visible text after this extension's rewrite.
        step: the step of the loop (``turn_start``).
    """

    extension: str
    event: InterceptKind
    kind: InterventionKind
    applied: bool
    reason: str = ""
    tool_id: str | None = None
    tool: str | None = None
    args: dict[str, Any] | None = None
    text: str | None = None
    step: int | None = None


class Message(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One transcript message (``interventions`` and ``thinking`` omitted when empty)."""

    role: Role
    content: list[Block]
    time: str
    interventions: list[InterventionRecord] = []
    #: An assistant message's thinking blocks, in order (corral addition).
    thinking: list[ThinkingContent] = []


#: Largest image, decoded, that enters a transcript (the providers' own limits are lower).
MAX_IMAGE_BYTES = 20 * 1024 * 1024
_IMAGE_MIME = re.compile(r"^image/[A-Za-z0-9][A-Za-z0-9.+-]{0,126}$")


def image_size(image: ImageContent) -> int:
    """Decoded size of ``image``, computed from the base64 length (never raises)."""
    if image.data is None:
        return image.bytes
    data = image.data.strip()
    return max(0, len(data) * 3 // 4 - data[-2:].count("="))


def image_problem(image: ImageContent, *, limit: int = MAX_IMAGE_BYTES) -> str | None:
    """What is wrong with ``image`` as a block a model can be sent, or None."""
    if not _IMAGE_MIME.match(image.mime_type):
        return f"mime type {image.mime_type[:60]!r} is not image/*"
    if not image.data:
        return "no image data"
    if image_size(image) > limit:
        return f"{image_size(image)} bytes is more than the {limit}-byte limit"
    try:
        binascii.a2b_base64(image.data, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        return f"data is not valid base64 ({exc})"
    return None


def model_blocks(blocks: list[TextContent | ImageContent]) -> list[TextContent | ImageContent]:
    """``blocks`` with every image a model cannot take replaced by a text note."""
    out: list[TextContent | ImageContent] = []
    for block in blocks:
        problem = image_problem(block) if isinstance(block, ImageContent) else None
        out.append(TextContent(text=f"[image omitted: {problem}]") if problem else block)
    return out


def now_iso() -> str:
    """The current UTC time as an RFC 3339 string with a ``Z`` suffix."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def text_of(message: Message) -> str:
    """Concatenated text blocks of a message."""
    return "".join(b.text for b in message.content if isinstance(b, TextContent))


def _wire_block(block: Block) -> Block:
    if isinstance(block, ImageContent) and block.data is not None:
        return ImageContent(mime_type=block.mime_type, bytes=image_size(block))
    if isinstance(block, ToolResultContent):
        inner = [_wire_block(b) for b in block.content]
        return ToolResultContent(
            call_id=block.call_id,
            is_error=block.is_error,
            content=[b for b in inner if isinstance(b, TextContent | ImageContent)],
            native=block.native,
        )
    return block


def wire_message(message: Message) -> Message:
    """The message as the RPC wire shows it: images as byte counts, not base64."""
    return Message(
        role=message.role,
        content=[_wire_block(b) for b in message.content],
        time=message.time,
        interventions=message.interventions,
        # The text only: signatures and redacted data are the provider's, and large.
        thinking=[ThinkingContent(text=t.text) for t in message.thinking],
    )


def annotated(message: Message, records: list[InterventionRecord]) -> Message:
    """``message`` with ``records`` added to its interventions."""
    return msgspec.structs.replace(message, interventions=[*message.interventions, *records])
