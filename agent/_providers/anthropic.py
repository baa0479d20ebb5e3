"""The Anthropic Messages API provider.

``POST {base_url}/v1/messages`` with ``stream: true``. The reply is a stream of
named events::

    message_start                      usage: input and cache tokens
    content_block_start  (per block)   text, or tool_use with id and name
    content_block_delta  (many)        text_delta / input_json_delta (partial JSON)
    content_block_stop                 a tool_use block's input is complete
    message_delta                      stop_reason, cumulative output tokens
    message_stop                       the end
    ping / error                       keep-alive / failure inside the stream

``thinking`` blocks (``thinking_delta``, ``signature_delta``) and
``redacted_thinking`` blocks are thinking, never answer text: streamed as thinking
and kept whole, signature included, on the transcript's message. Blocks we do not
use (server tools) and unknown events are skipped, so the API may grow without
breaking us.

``--reasoning low|medium|high`` turns extended thinking on, ``thinking: {type:
enabled, budget_tokens}``, with ``max_tokens`` grown by the budget (the API wants it
above the budget) up to the model's maximum output; corral never sends
``temperature``, ``top_k`` or a forced ``tool_choice``, which thinking refuses. With
thinking on, an assistant message goes back with its thinking blocks first,
signatures unchanged (the API checks them in a tool-use exchange); with thinking
off they are left out. A call that would continue a tool-use exchange whose
message has no thinking (the level was raised between prompts) is sent without
thinking, as the API refuses it otherwise.
"""

from __future__ import annotations

import os
import typing
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from sandbox.log import get_logger

from .._exceptions import ProviderError
from .._messages import (
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolResultContent,
    model_blocks,
)
from .base import (
    ModelInfo,
    ModelRequest,
    ProviderEvent,
    ProviderSettings,
    ProviderStop,
    ProviderTextDelta,
    ProviderThinkingBlock,
    ProviderThinkingDelta,
    ProviderToolCall,
)
from .http import decode_data, excerpt, known_models, lookup, new_client, open_sse, usage_event
from .reasoning import limits
from .retry import with_retries

__all__ = ["API_VERSION", "DEFAULT_BASE_URL", "DEFAULT_MODEL", "AnthropicProvider"]

log = get_logger(__name__)

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MODEL = "claude-sonnet-4-5"
#: The ``anthropic-version`` header.
API_VERSION = "2023-06-01"

_NAME = "anthropic"
_KEY_HINT = "set ANTHROPIC_API_KEY or pass --api-key"
_CACHE = {"type": "ephemeral"}


# -- stream events (only the fields we read) -----------------------------------------


class _Usage(msgspec.Struct, frozen=True, kw_only=True):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _MessageInfo(msgspec.Struct, frozen=True, kw_only=True):
    usage: _Usage | None = None


class _MessageStart(msgspec.Struct, frozen=True, kw_only=True):
    message: _MessageInfo


class _Block(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    id: str = ""
    name: str = ""
    text: str = ""
    input: Any = None
    thinking: str = ""
    signature: str = ""
    data: str = ""


class _BlockStart(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    content_block: _Block


class _Delta(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    text: str = ""
    partial_json: str = ""
    thinking: str = ""
    signature: str = ""


class _BlockDelta(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    delta: _Delta


class _BlockStop(msgspec.Struct, frozen=True, kw_only=True):
    index: int


class _StopInfo(msgspec.Struct, frozen=True, kw_only=True):
    stop_reason: str | None = None


class _MessageDelta(msgspec.Struct, frozen=True, kw_only=True):
    delta: _StopInfo
    usage: _Usage | None = None


class _ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    type: str = ""
    message: str = ""


class _ErrorEvent(msgspec.Struct, frozen=True, kw_only=True):
    error: _ErrorBody


class _Typed(msgspec.Struct, frozen=True, kw_only=True):
    type: str = ""


_Event = _MessageStart | _BlockStart | _BlockDelta | _BlockStop | _MessageDelta | _ErrorEvent

_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    "message_start": msgspec.json.Decoder(_MessageStart),
    "content_block_start": msgspec.json.Decoder(_BlockStart),
    "content_block_delta": msgspec.json.Decoder(_BlockDelta),
    "content_block_stop": msgspec.json.Decoder(_BlockStop),
    "message_delta": msgspec.json.Decoder(_MessageDelta),
    "error": msgspec.json.Decoder(_ErrorEvent),
}
_typed_decoder = msgspec.json.Decoder(_Typed)
_args_decoder = msgspec.json.Decoder(dict[str, Any])

_RETRYABLE_ERROR_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error"})
_STOP_REASONS: dict[str, typing.Literal["end_turn", "tool_use", "length"]] = {
    "tool_use": "tool_use",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
}


# -- request mapping ------------------------------------------------------------------


def _image(image: ImageContent) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": image.mime_type, "data": image.data},
    }


def _media(blocks: list[TextContent | ImageContent]) -> list[dict[str, Any]]:
    # The API rejects empty text blocks, and an image without data cannot be sent.
    out: list[dict[str, Any]] = []
    for b in model_blocks(blocks):
        if isinstance(b, TextContent):
            if b.text:
                out.append({"type": "text", "text": b.text})
        else:
            out.append(_image(b))
    return out


def _thinking(block: ThinkingContent) -> dict[str, Any] | None:
    if block.redacted:
        return {"type": "redacted_thinking", "data": block.redacted}
    if block.signature:
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    return None  # not Anthropic's (no signature): the API could not check it


def _blocks(message: Message, thinking: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if thinking and message.role == "assistant":
        # First, in their order, unchanged: the API verifies them.
        out.extend(b for b in map(_thinking, message.thinking) if b is not None)
    for block in message.content:
        if isinstance(block, TextContent | ImageContent):
            if message.role != "assistant" or isinstance(block, TextContent):
                out.extend(_media([block]))
        elif isinstance(block, ToolCallContent):
            if message.role == "assistant":
                out.append(
                    {"type": "tool_use", "id": block.id, "name": block.name, "input": block.args}
                )
        elif isinstance(block, ToolResultContent) and message.role != "assistant":
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.call_id}
            content = _media(block.content)
            if content:
                result["content"] = content
            if block.is_error:
                result["is_error"] = True
            out.append(result)
    return out


def _map_messages(messages: list[Message], thinking: bool = False) -> list[dict[str, Any]]:
    """The transcript as Messages API turns.

    Tool results travel in user turns; consecutive turns of one role are merged, so
    tool results and a following user prompt form one user turn (results first, as
    the API requires). Turns left empty are dropped. The last block is marked as a
    prompt-cache breakpoint, so the next call of the loop reads this prefix from
    the cache.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message, thinking)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    if out:
        last = out[-1]["content"][-1]
        if last.get("type") not in ("thinking", "redacted_thinking"):  # they take no mark
            out[-1]["content"][-1] = {**last, "cache_control": _CACHE}
    return out


def _unthought_exchange(messages: list[dict[str, Any]]) -> bool:
    """Whether the request continues a tool-use exchange whose assistant message has
    no thinking block: the API refuses that with thinking on."""
    if len(messages) < 2 or messages[-1]["role"] != "user":
        return False
    if not any(b.get("type") == "tool_result" for b in messages[-1]["content"]):
        return False
    first = messages[-2]["content"][0]
    return first.get("type") not in ("thinking", "redacted_thinking")


# -- stream parsing -------------------------------------------------------------------


class _ToolBlock:
    __slots__ = ("id", "initial", "json", "name")

    def __init__(self, block: _Block) -> None:
        self.id = block.id
        self.name = block.name
        self.initial: Any = block.input
        self.json: list[str] = []


class _ThinkingBlock:
    __slots__ = ("redacted", "signature", "text")

    def __init__(self, block: _Block) -> None:
        self.text: list[str] = [block.thinking] if block.thinking else []
        self.signature: list[str] = [block.signature] if block.signature else []
        self.redacted = block.data if block.type == "redacted_thinking" else None

    def content(self) -> ThinkingContent:
        return ThinkingContent(
            text="".join(self.text),
            signature="".join(self.signature) or None,
            redacted=self.redacted,
        )


@typing.final
class _StreamState:
    """Accumulates one streamed message; ``feed`` per event, ``finish`` at the end."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._tools: dict[int, _ToolBlock] = {}
        self._thoughts: dict[int, _ThinkingBlock] = {}
        self._input = 0
        self._output = 0
        self._cache_read = 0
        self._cache_write = 0
        self._stop_reason: str | None = None
        #: A tool_use block whose input did not parse; fatal unless max_tokens cut it.
        self._broken: ProviderError | None = None
        self._calls = 0
        self.stopped = False

    def _take_usage(self, usage: _Usage | None) -> None:
        # message_delta's counts are cumulative; any field present replaces ours.
        if usage is None:
            return
        if usage.input_tokens is not None:
            self._input = usage.input_tokens
        if usage.output_tokens is not None:
            self._output = usage.output_tokens
        if usage.cache_read_input_tokens is not None:
            self._cache_read = usage.cache_read_input_tokens
        if usage.cache_creation_input_tokens is not None:
            self._cache_write = usage.cache_creation_input_tokens

    def feed(self, event: _Event) -> list[ProviderEvent]:
        if isinstance(event, _MessageStart):
            self._take_usage(event.message.usage)
        elif isinstance(event, _BlockStart):
            block = event.content_block
            if block.type == "tool_use":
                self._tools[event.index] = _ToolBlock(block)
            elif block.type in ("thinking", "redacted_thinking"):
                self._thoughts[event.index] = _ThinkingBlock(block)
                if block.thinking:
                    return [ProviderThinkingDelta(text=block.thinking)]
            elif block.type == "text" and block.text:
                return [ProviderTextDelta(text=block.text)]
        elif isinstance(event, _BlockDelta):
            delta = event.delta
            if delta.type == "text_delta" and delta.text:
                return [ProviderTextDelta(text=delta.text)]
            thought = self._thoughts.get(event.index)
            if thought is not None:
                if delta.type == "thinking_delta" and delta.thinking:
                    thought.text.append(delta.thinking)
                    return [ProviderThinkingDelta(text=delta.thinking)]
                if delta.type == "signature_delta":
                    thought.signature.append(delta.signature)
                return []
            tool = self._tools.get(event.index)
            if delta.type == "input_json_delta" and tool is not None:
                tool.json.append(delta.partial_json)
        elif isinstance(event, _BlockStop):
            done = self._thoughts.pop(event.index, None)
            if done is not None:
                return [ProviderThinkingBlock(block=done.content())]
            tool = self._tools.pop(event.index, None)
            if tool is not None:
                return self._complete(tool)
        elif isinstance(event, _MessageDelta):
            self._stop_reason = event.delta.stop_reason or self._stop_reason
            self._take_usage(event.usage)
        else:
            kind = event.error.type
            raise ProviderError(
                _NAME,
                f"error in stream: {kind or 'error'}: {excerpt(event.error.message)}",
                retryable=kind in _RETRYABLE_ERROR_TYPES,
            )
        return []

    def _complete(self, tool: _ToolBlock) -> list[ProviderEvent]:
        raw = "".join(tool.json).strip()
        if not raw:
            args = tool.initial if isinstance(tool.initial, dict) else {}
        else:
            try:
                args = _args_decoder.decode(raw)
            except msgspec.DecodeError:
                # Fatal, unless the stop reason says max_tokens cut the input short.
                self._broken = ProviderError(
                    _NAME, f"malformed input for tool call {tool.name!r}: {excerpt(raw)!r}"
                )
                return []
        self._calls += 1
        return [ProviderToolCall(id=tool.id, name=tool.name, args=args)]

    def finish(self) -> list[ProviderEvent]:
        """The closing events, after ``message_stop``.

        Raises:
            ProviderError: the stream ended before ``message_stop``, or a tool call's
                input was malformed (other than cut short by ``max_tokens``).
        """
        if not self.stopped:
            raise ProviderError(_NAME, "stream ended early (no message_stop)", retryable=True)
        reason = _STOP_REASONS.get(self._stop_reason or "", "end_turn")
        if self._broken is not None:
            if reason != "length":
                raise self._broken
            log.warning("provider_truncated_tool_call", provider=_NAME)
        if reason == "end_turn" and self._calls:
            reason = "tool_use"
        usage = usage_event(
            self._model,
            input=self._input,
            output=self._output,
            cache_read=self._cache_read,
            cache_write=self._cache_write,
        )
        return [usage, ProviderStop(reason=reason)]


# -- the provider ---------------------------------------------------------------------


@typing.final
class AnthropicProvider:
    """A provider for the Anthropic Messages API (and servers that mimic it).

    Args:
        model: default model id (used when a request names none, and listed first
            by :meth:`models`). Defaults to :data:`DEFAULT_MODEL`.
        base_url: API root without the version, e.g. ``https://api.anthropic.com``
            (a trailing ``/v1`` is tolerated). Defaults to ``$ANTHROPIC_BASE_URL``,
            then :data:`DEFAULT_BASE_URL`.
        api_key: the ``x-api-key``. Defaults to ``$ANTHROPIC_API_KEY``. Required for
            Anthropic's own API (:meth:`prepare` reports its absence); optional for
            another base URL, such as a local proxy that adds it.
        settings: timeouts and retries.
    """

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        settings: ProviderSettings | None = None,
    ) -> None:
        root = base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
        self._base_url = root.rstrip("/").removesuffix("/v1")
        self._official = self._base_url == DEFAULT_BASE_URL
        self._api_key = api_key or os.environ.get("ANTHROPIC_API_KEY") or None
        self._model = model or DEFAULT_MODEL
        self._settings = settings or ProviderSettings()
        self._client = new_client(self._settings)

    def __repr__(self) -> str:
        return f"AnthropicProvider(base_url={self._base_url!r}, model={self._model!r})"

    @property
    def name(self) -> str:
        """``"anthropic"``."""
        return _NAME

    @property
    def base_url(self) -> str:
        """The API root requests go to (without ``/v1``)."""
        return self._base_url

    @property
    def default_model(self) -> str:
        """The model used when a request names none."""
        return self._model

    def models(self) -> list[ModelInfo]:
        """Known Claude models, the configured one first."""
        known = [m.info() for m in known_models(_NAME)]
        mine = next((m for m in known if m.id == self._model), None)
        return [mine or ModelInfo(id=self._model, provider=_NAME)] + [
            m for m in known if m.id != self._model
        ]

    async def prepare(self) -> None:
        """Check that there is an API key when talking to Anthropic's own API.

        Raises:
            ProviderError: no key for Anthropic's API.

        Cancellation: returns at once (no I/O).
        """
        if self._api_key is None and self._official:
            raise ProviderError(_NAME, f"no API key: {_KEY_HINT}")

    def reasoning_support(self, model: str) -> bool | None:
        """What the model table says of ``model`` (None: a model it does not list)."""
        known = lookup(model)
        return None if known is None else known.reasoning

    def _body(self, request: ModelRequest, model: str) -> dict[str, Any]:
        level = request.reasoning
        thinking = level is not None and level != "off"
        messages = _map_messages(request.messages, thinking)
        if thinking and _unthought_exchange(messages):
            log.info("thinking_off_for_unthought_exchange", provider=_NAME, model=model)
            thinking = False
            messages = _map_messages(request.messages, False)
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": request.max_tokens,
            "stream": True,
            "messages": messages,
        }
        if thinking and level is not None:
            known = lookup(model)
            max_tokens, budget = limits(level, request.max_tokens, known.max_output if known else 0)
            body["max_tokens"] = max_tokens
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        if request.system:
            # A block list rather than a string, to mark it as a cache breakpoint.
            body["system"] = [{"type": "text", "text": request.system, "cache_control": _CACHE}]
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.schema}
                for t in request.tools
            ]
        return body

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Stream one message: text deltas, tool calls, usage, then one stop.

        A tool call is emitted when its block closes (its input arrives as partial
        JSON); usage and the stop follow ``message_stop``. A retryable failure before
        any output is retried (:mod:`.retry`), announced by a ``ProviderRetry``.

        Args:
            request: the call; an empty ``model`` means :attr:`default_model`.

        Raises:
            ProviderError: no API key for Anthropic's API, an HTTP error (``status``
                set; 401 says to check the key; 429, 5xx and 529 are retryable), an
                ``error`` event (overloaded is retryable), a broken or truncated
                stream (``"stream ended early"``, retryable), or a malformed event
                (its excerpt quoted).

        Cancellation: the HTTP response is closed at once and its connection dropped;
            the server sees the connection close. Consume the stream under
            ``contextlib.aclosing`` so that leaving the loop early closes it too.
        """
        return with_retries(self._settings, lambda: self._attempt(request))

    async def _attempt(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        model = request.model or self._model
        headers = {"anthropic-version": API_VERSION}
        if self._api_key is not None:
            headers["x-api-key"] = self._api_key
        elif self._official:
            raise ProviderError(_NAME, f"no API key: {_KEY_HINT}")
        url = f"{self._base_url}/v1/messages"
        state = _StreamState(model)
        log.debug("provider_request", provider=_NAME, model=model, url=url)
        async with open_sse(
            self._client,
            _NAME,
            url,
            self._body(request, model),
            headers=headers,
            key_hint=_KEY_HINT,
        ) as events:
            async for sse in events:
                kind = sse.event
                if kind == "message":  # no `event:` line: read the type from the data
                    kind = decode_data(_NAME, _typed_decoder, sse.data).type
                if kind == "message_stop":
                    state.stopped = True
                    break
                decoder = _DECODERS.get(kind)
                if decoder is None:  # ping, and events newer than this code
                    continue
                for event in state.feed(decode_data(_NAME, decoder, sse.data)):
                    yield event
        # The response is closed here, before the consumer sees the stop.
        for event in state.finish():
            yield event

    async def aclose(self) -> None:
        """Close the connection pool.

        Cancellation: connections are closed regardless (httpcore shields the close).
        """
        await self._client.aclose()
