"""The transcript as OpenAI Chat Completions messages (the request side of
:mod:`agent._providers.openai`).

A tool result a tool host formatted in OpenAI's own shape (the explicit
``provider_native_tool_result`` envelope, see ``docs/toolkit.md``) is sent as the
``tool`` message's content as it is: ``openai.chat_completions`` content unchanged,
``openai.responses`` content (``input_text`` / ``output_text`` parts) as the Chat
Completions text parts it corresponds to. Anything this wire cannot carry is sent
as the result's text, like every other result.
"""

from __future__ import annotations

from typing import Any

import msgspec

from sandbox.log import get_logger
from supervisor import NativeFormat

from .._messages import (
    ImageContent,
    Message,
    TextContent,
    ToolCallContent,
    ToolResultContent,
    model_blocks,
)

__all__ = ["map_messages"]

log = get_logger(__name__)

_NAME = "openai"
_encoder = msgspec.json.Encoder()

_IMAGES_INTRO = TextContent(text="Images returned by the tool calls above:")


def _data_url(image: ImageContent) -> dict[str, Any]:
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{image.mime_type};base64,{image.data or ''}"},
    }


def _user_content(blocks: list[TextContent | ImageContent]) -> str | list[dict[str, Any]]:
    # A plain string when there are no images: some local servers' chat templates
    # only accept string content.
    blocks = model_blocks(blocks)
    if all(isinstance(b, TextContent) for b in blocks):
        return "".join(b.text for b in blocks if isinstance(b, TextContent))
    return [
        {"type": "text", "text": b.text} if isinstance(b, TextContent) else _data_url(b)
        for b in blocks
        if isinstance(b, TextContent) or b.data is not None
    ]


def _native(result: ToolResultContent) -> str | list[dict[str, Any]] | None:
    """The envelope's content as a ``tool`` message's content, or None: send the text."""
    native = result.native
    if native is None:
        return None
    content = native.content
    if native.format == NativeFormat.OPENAI_CHAT_COMPLETIONS:
        if isinstance(content, str) or (
            isinstance(content, list) and all(isinstance(p, dict) for p in content)
        ):
            return content
    elif native.format == NativeFormat.OPENAI_RESPONSES:
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [p.get("text") for p in content if isinstance(p, dict)]
            kinds = {p.get("type") for p in content if isinstance(p, dict)}
            whole = texts and len(texts) == len(content) and all(isinstance(t, str) for t in texts)
            if whole and kinds <= {"input_text", "output_text", "text"}:
                return [{"type": "text", "text": t} for t in texts]
    log.info("native_result_sent_as_text", format=native.format, provider=_NAME)
    return None


def _tool_message(result: ToolResultContent) -> tuple[dict[str, Any], list[ImageContent]]:
    content = model_blocks(result.content)
    text = "\n".join(b.text for b in content if isinstance(b, TextContent))
    images = [b for b in content if isinstance(b, ImageContent)]
    if images:
        text += ("\n" if text else "") + f"({len(images)} image(s) attached below)"
    native = _native(result)
    shown = text if native is None else native
    return {"role": "tool", "tool_call_id": result.call_id, "content": shown}, images


def map_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """The transcript as Chat Completions messages.

    Tool messages may carry only text, so images a tool returned follow the run of
    tool messages as one user message; nothing may come between an assistant's
    ``tool_calls`` and their ``tool`` replies.
    """
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    pending_images: list[ImageContent] = []

    def flush_images() -> None:
        if pending_images:
            content = _user_content([_IMAGES_INTRO, *pending_images])
            out.append({"role": "user", "content": content})
            pending_images.clear()

    for message in messages:
        if message.role == "assistant":
            flush_images()
            text = "".join(b.text for b in message.content if isinstance(b, TextContent))
            calls = [
                {
                    "id": b.id,
                    "type": "function",
                    "function": {"name": b.name, "arguments": _encoder.encode(b.args).decode()},
                }
                for b in message.content
                if isinstance(b, ToolCallContent)
            ]
            if not text and not calls:
                continue  # e.g. an aborted turn; the API refuses an empty assistant message
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
            continue
        # user and tool messages: tool results become `tool` messages, the rest a user one.
        user_blocks: list[TextContent | ImageContent] = []
        for block in message.content:
            if isinstance(block, ToolResultContent):
                tool_msg, images = _tool_message(block)
                out.append(tool_msg)
                pending_images.extend(images)
            elif isinstance(block, TextContent | ImageContent):
                user_blocks.append(block)
        if user_blocks:
            flush_images()
            out.append({"role": "user", "content": _user_content(user_blocks)})
    flush_images()
    return out
