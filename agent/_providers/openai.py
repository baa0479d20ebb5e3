"""The OpenAI-compatible Chat Completions provider.

One implementation for every server that speaks ``POST /chat/completions`` with
``stream: true``: the OpenAI API, vLLM, llama.cpp's ``llama-server``, Ollama,
LiteLLM, OpenRouter. It keeps to the common subset of the wire format and
tolerates the usual deviations of local servers: tool calls without ids or
indexes, ``finish_reason: "stop"`` after tool calls, no usage chunk, a body that
ends after the finish reason without ``data: [DONE]``.

``--reasoning`` is sent as ``reasoning_effort`` (``off`` as the model's lowest effort
when the table knows one, e.g. GPT-5's ``minimal``, else not at all), with the
token limit grown by the level's budget. Thinking text that servers stream as
``delta.reasoning_content`` (DeepSeek, vLLM) or ``delta.reasoning`` (OpenRouter,
Ollama) is thinking, never answer text; it is kept in the transcript but never
sent back (DeepSeek refuses a request that carries it).

The transcript becomes the request's messages in :mod:`.openai_messages` (a tool
host's OpenAI-shaped results included).
"""

from __future__ import annotations

import os
import typing
import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from sandbox.log import get_logger

from .._exceptions import ProviderError
from .._messages import ThinkingContent
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
    ProviderUsage,
)
from .http import (
    decode_data,
    excerpt,
    get_json,
    known_models,
    lookup,
    new_client,
    open_sse,
    usage_event,
)
from .openai_messages import map_messages
from .reasoning import limits
from .retry import with_retries

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MODEL", "OpenAIProvider"]

log = get_logger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Used when no model is configured and the base URL is OpenAI's own.
DEFAULT_MODEL = "gpt-4.1"

_NAME = "openai"
_KEY_HINT = "set OPENAI_API_KEY or pass --api-key"


# -- the stream's chunks (only the fields we read; servers add more) -----------------


class _FunctionDelta(msgspec.Struct, frozen=True, kw_only=True):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct, frozen=True, kw_only=True):
    index: int | None = None
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(msgspec.Struct, frozen=True, kw_only=True):
    content: str | None = None
    reasoning_content: str | None = None
    # OpenRouter's and Ollama's name; only a string is thinking text.
    reasoning: Any = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct, frozen=True, kw_only=True):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct, frozen=True, kw_only=True):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None


class _Error(msgspec.Struct, frozen=True, kw_only=True):
    message: str = ""
    type: str | None = None


class _Chunk(msgspec.Struct, frozen=True, kw_only=True):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    # Some servers (vLLM, OpenRouter) report a failure inside an open stream.
    error: _Error | str | None = None


_chunk_decoder = msgspec.json.Decoder(_Chunk)
_args_decoder = msgspec.json.Decoder(dict[str, Any])

_RETRYABLE_ERROR_TYPES = frozenset({"server_error", "rate_limit_error", "overloaded_error"})
# -- stream parsing -------------------------------------------------------------------


class _PartialCall:
    __slots__ = ("args", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.args: list[str] = []


@typing.final
class _StreamState:
    """Accumulates one streamed completion; ``feed`` per chunk, ``finish`` at the end."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._calls: dict[int, _PartialCall] = {}
        self._last_index = -1
        self._flushed = False
        self._emitted_calls = 0
        self.finish_reason: str | None = None
        self._usage: ProviderUsage | None = None
        self._thinking: list[str] = []

    def feed(self, chunk: _Chunk) -> list[ProviderEvent]:
        if chunk.error is not None:
            err = chunk.error if isinstance(chunk.error, _Error) else _Error(message=chunk.error)
            raise ProviderError(
                _NAME,
                f"error in stream: {excerpt(err.message) or '(no message)'}",
                retryable=err.type in _RETRYABLE_ERROR_TYPES,
            )
        if chunk.usage is not None:
            self._usage = self._usage_event(chunk.usage)
        events: list[ProviderEvent] = []
        for choice in chunk.choices or ():
            if choice.index != 0:  # we never ask for n > 1
                continue
            delta = choice.delta or _Delta()
            thought = delta.reasoning_content or delta.reasoning
            if thought and isinstance(thought, str):
                self._thinking.append(thought)
                events.append(ProviderThinkingDelta(text=thought))
            if delta.content:
                events.append(ProviderTextDelta(text=delta.content))
            for part in delta.tool_calls or ():
                self._accumulate(part)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
                events.extend(self._flush_calls())
        return events

    def _accumulate(self, part: _ToolCallDelta) -> None:
        index = part.index
        if index is None:
            # No index (some local servers): a new id starts a new call.
            new = part.id is not None and all(c.id != part.id for c in self._calls.values())
            index = self._last_index + 1 if new or self._last_index < 0 else self._last_index
        self._last_index = index
        call = self._calls.setdefault(index, _PartialCall())
        if part.id:
            call.id = part.id
        if part.function is not None:
            name = part.function.name
            # Most servers send the name once; some repeat it in every fragment.
            if name and name != call.name:
                call.name += name
            if part.function.arguments:
                call.args.append(part.function.arguments)

    def _flush_calls(self) -> list[ProviderEvent]:
        if self._flushed:
            return []
        self._flushed = True
        events: list[ProviderEvent] = []
        for index in sorted(self._calls):
            call = self._calls[index]
            raw = "".join(call.args).strip() or "{}"
            try:
                args: dict[str, Any] | None = _args_decoder.decode(raw)
            except msgspec.DecodeError:
                args = None
            if args is None or not call.name:
                if self.finish_reason == "length":
                    # The token limit cut the call short; report `length`, not garbage.
                    log.warning("provider_truncated_tool_call", provider=_NAME, name=call.name)
                    continue
                what = f"malformed arguments for tool call {call.name!r}"
                raise ProviderError(
                    _NAME, f"{what if call.name else 'tool call without a name'}: {excerpt(raw)!r}"
                )
            call_id = call.id or f"call_{uuid.uuid4().hex[:24]}"
            events.append(ProviderToolCall(id=call_id, name=call.name, args=args))
        self._emitted_calls = len(events)
        return events

    def _usage_event(self, usage: _Usage) -> ProviderUsage:
        prompt = usage.prompt_tokens or 0
        details = usage.prompt_tokens_details
        cached = (details.cached_tokens or 0) if details is not None else 0
        # prompt_tokens includes cached ones; report them apart, as Anthropic does.
        return usage_event(
            self._model,
            input=max(prompt - cached, 0),
            output=usage.completion_tokens or 0,
            cache_read=cached,
        )

    def finish(self) -> list[ProviderEvent]:
        """The closing events, once the body has ended.

        Raises:
            ProviderError: no ``finish_reason`` arrived: the stream ended early.
        """
        if self.finish_reason is None:
            raise ProviderError(_NAME, "stream ended early (no finish_reason)", retryable=True)
        events = self._flush_calls()
        if self._thinking:
            events.insert(
                0, ProviderThinkingBlock(block=ThinkingContent(text="".join(self._thinking)))
            )
        if self._usage is not None:
            events.append(self._usage)
        # Ollama and some chat templates answer "stop" after tool calls; the calls win.
        if self._emitted_calls:
            reason: typing.Literal["end_turn", "tool_use", "length"] = "tool_use"
        elif self.finish_reason == "length":
            reason = "length"
        else:
            reason = "end_turn"
        events.append(ProviderStop(reason=reason))
        return events


# -- the provider ---------------------------------------------------------------------


class _Model(msgspec.Struct, frozen=True, kw_only=True):
    id: str


class _ModelList(msgspec.Struct, frozen=True, kw_only=True):
    data: list[_Model]


def _served_info(model_id: str) -> ModelInfo:
    known = lookup(model_id)
    return ModelInfo(id=model_id, provider=_NAME) if known is None else known.info()


@typing.final
class OpenAIProvider:
    """A provider for any OpenAI-compatible Chat Completions endpoint.

    Args:
        model: default model id (used when a request names none, and listed first by
            :meth:`models`). Defaults to :data:`DEFAULT_MODEL` on OpenAI's own API;
            on a custom server, :meth:`prepare` picks the first model its ``/models``
            lists.
        base_url: API root including the version, e.g. ``http://localhost:11434/v1``.
            Defaults to ``$OPENAI_BASE_URL``, then :data:`DEFAULT_BASE_URL`.
        api_key: bearer token. Defaults to ``$OPENAI_API_KEY``. Required for OpenAI's
            own API (:meth:`prepare` reports its absence); optional for any other
            base URL, since local servers need none.
        settings: timeouts and retries.
    """

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        settings: ProviderSettings | None = None,
    ) -> None:
        root = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self._base_url = root.rstrip("/")
        self._official = self._base_url == DEFAULT_BASE_URL
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
        self._model = model or (DEFAULT_MODEL if self._official else None)
        self._settings = settings or ProviderSettings()
        #: What the server's ``/models`` listed (None: not asked, or it could not say).
        self._served: list[str] | None = None
        self._client = new_client(self._settings)

    def __repr__(self) -> str:
        return f"OpenAIProvider(base_url={self._base_url!r}, model={self._model!r})"

    @property
    def name(self) -> str:
        """``"openai"``, whatever server the base URL points at."""
        return _NAME

    @property
    def base_url(self) -> str:
        """The API root requests go to."""
        return self._base_url

    @property
    def default_model(self) -> str | None:
        """The model used when a request names none (None until a custom server is asked)."""
        return self._model

    def models(self) -> list[ModelInfo]:
        """The models to choose from, the configured one first.

        OpenAI's API: the known models. A custom server: what its ``/models`` listed
        (see :meth:`prepare`), else the configured model alone.
        """
        if self._served is not None:
            known = [_served_info(m) for m in self._served]
        else:
            known = [m.info() for m in known_models(_NAME)] if self._official else []
        if self._model is not None:
            mine = next((m for m in known if m.id == self._model), None)
            known = [mine or ModelInfo(id=self._model, provider=_NAME)] + [
                m for m in known if m.id != self._model
            ]
        return known

    def reasoning_support(self, model: str) -> bool | None:
        """What the model table says of ``model`` (None: a model it does not list)."""
        known = lookup(model)
        return None if known is None else known.reasoning

    def _headers(self) -> dict[str, str]:
        if self._api_key is None:
            return {}
        return {"authorization": f"Bearer {self._api_key}"}

    async def prepare(self) -> None:
        """Check the key; on a custom server, ask ``/models`` for what it serves.

        Without a configured model the first one listed is used; a configured model
        the server does not list is refused. A server without a usable ``/models``
        is fine when the model is configured.

        Raises:
            ProviderError: no API key for OpenAI's API; no model configured and none
                listed (the message names the URL and says to pass ``--model``); a
                configured model the server does not list (the message names the
                ones it does).

        Cancellation: the ``/models`` request is abandoned.
        """
        if self._api_key is None and self._official:
            raise ProviderError(
                _NAME,
                f"no API key: {_KEY_HINT} "
                "(or --base-url for a local OpenAI-compatible server that needs none)",
            )
        if self._official:
            return
        url = f"{self._base_url}/models"
        try:
            listing = msgspec.convert(
                await get_json(
                    self._client, _NAME, url, headers=self._headers(), key_hint=_KEY_HINT
                ),
                _ModelList,
            )
        except (ProviderError, msgspec.ValidationError) as exc:
            if self._model is not None:
                log.info("provider_models_unlisted", provider=_NAME, url=url, error=str(exc))
                return
            raise ProviderError(
                _NAME, f"cannot learn the model from GET {url} ({exc}); pass --model NAME"
            ) from exc
        self._served = [m.id for m in listing.data]
        if self._model is None:
            if not self._served:
                raise ProviderError(_NAME, f"GET {url} lists no models; pass --model NAME")
            self._model = self._served[0]
            log.info("provider_model_chosen", provider=_NAME, model=self._model, url=url)
        elif self._served and self._model not in self._served:
            listed = ", ".join(self._served[:20]) + (" …" if len(self._served) > 20 else "")
            raise ProviderError(
                _NAME,
                f"model {self._model!r} is not served by {self._base_url} (it lists: {listed})",
            )

    def _body(self, request: ModelRequest, model: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "messages": map_messages(request.system, request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        known = lookup(model)
        max_tokens = request.max_tokens
        if request.reasoning is not None:
            max_tokens, _ = limits(request.reasoning, max_tokens, known.max_output if known else 0)
            if request.reasoning != "off":
                body["reasoning_effort"] = request.reasoning
            elif known is not None and known.reasoning_off is not None:
                body["reasoning_effort"] = known.reasoning_off
        # OpenAI's reasoning models refuse `max_tokens`; other servers may not know
        # its replacement, `max_completion_tokens`.
        body["max_completion_tokens" if self._official else "max_tokens"] = max_tokens
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.schema,
                    },
                }
                for t in request.tools
            ]
        return body

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Stream one completion: text deltas, tool calls, usage, then one stop.

        Tool calls are emitted when the model finishes (their arguments arrive in
        fragments); usage is emitted when the server reports it. A retryable failure
        before any output is retried (:mod:`.retry`), announced by a ``ProviderRetry``.

        Args:
            request: the call; an empty ``model`` means :attr:`default_model`.

        Raises:
            ProviderError: no API key for OpenAI's API, no model, an HTTP error
                (``status`` set; 401 says to check the key; 429 and 5xx are
                retryable), a broken or truncated stream (``"stream ended early"``,
                retryable), or a malformed chunk (its excerpt quoted).

        Cancellation: the HTTP response is closed at once and its connection dropped;
            the server sees the connection close. Consume the stream under
            ``contextlib.aclosing`` so that leaving the loop early closes it too.
        """
        return with_retries(self._settings, lambda: self._attempt(request))

    async def _attempt(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        model = request.model or self._model
        if not model:
            raise ProviderError(_NAME, f"no model given for {self._base_url}: pass --model")
        headers = self._headers()
        if self._api_key is None and self._official:
            raise ProviderError(
                _NAME,
                f"no API key: {_KEY_HINT} "
                "(or --base-url for a local OpenAI-compatible server that needs none)",
            )
        url = f"{self._base_url}/chat/completions"
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
                if sse.data.strip() == "[DONE]":
                    break
                for event in state.feed(decode_data(_NAME, _chunk_decoder, sse.data)):
                    yield event
        # The response is closed here, before the consumer sees the stop.
        for event in state.finish():
            yield event

    async def aclose(self) -> None:
        """Close the connection pool.

        Cancellation: connections are closed regardless (httpcore shields the close).
        """
        await self._client.aclose()
