"""Plumbing shared by the HTTP model providers (:mod:`._openai`, :mod:`._anthropic`).

* one :class:`httpx.AsyncClient` per provider (httpx runs on trio through anyio),
  with the timeouts of its :class:`~.base.ProviderSettings`;
* :func:`open_sse`: POST a JSON body and iterate the Server-Sent Events of the reply,
  with HTTP and transport errors translated to :class:`ProviderError` at this boundary
  (a ``Retry-After`` is kept on the error; a reply that is not an event stream, such
  as a 200 HTML page from a proxy, is reported as what it is);
* :func:`get_json`: a small GET (the OpenAI-compatible ``/models``);
* :func:`decode_data`: decode one ``data:`` payload, naming an excerpt when it is bad;
* the table of known models and their prices (:func:`known_models`, :func:`usage_event`).

Request bodies are plain dicts (their many optional shapes are built in one place
per provider and the tests assert them as JSON); replies are decoded into msgspec
Structs that ignore fields they do not name, so servers may extend them.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager, suppress
from typing import Any, TypeVar

import httpx
import msgspec
import trio

from sandbox.log import get_logger

from .._exceptions import ProviderError
from .base import ModelInfo, ProviderSettings, ProviderUsage
from .retry import parse_retry_after

__all__ = [
    "KnownModel",
    "SSEEvent",
    "decode_data",
    "excerpt",
    "finish_chain",
    "get_json",
    "known_models",
    "lookup",
    "new_client",
    "open_sse",
    "usage_event",
]

log = get_logger(__name__)

#: Characters of a server's message or a bad line quoted in an error.
_EXCERPT = 300
#: Bytes of an error reply read to find its message; the rest is dropped.
_MAX_ERROR_BODY = 64 * 1024
#: Seconds to wait for the end of a body after its last event (``[DONE]``,
#: ``message_stop``) so the connection can be reused; normally no wait at all.
_DRAIN_GRACE = 2.0

_encoder = msgspec.json.Encoder()
_T = TypeVar("_T")


def new_client(settings: ProviderSettings) -> httpx.AsyncClient:
    """The provider's connection pool: ``settings``' timeouts, no redirects, proxies from env.

    A read timeout is a gap between two bytes of the stream, not a bound on the whole
    reply; writes and pool waits share it.
    """
    timeout = httpx.Timeout(settings.read_timeout, connect=settings.connect_timeout)
    return httpx.AsyncClient(timeout=timeout, headers={"user-agent": "corral"})


def excerpt(text: str, limit: int = _EXCERPT) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# -- Server-Sent Events ---------------------------------------------------------------


class SSEEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One dispatched Server-Sent Event."""

    #: The ``event:`` field, ``"message"`` when the server sent none (OpenAI).
    event: str
    #: The ``data:`` lines joined with newlines.
    data: str


async def finish_chain(chain: AsyncIterator[Any]) -> None:
    """End httpx's body iterator for good, whatever state it is in.

    httpx 0.28 and httpcore 1.0 read a body through a chain of nested async
    generators (``aiter_lines`` down to ``_receive_response_body``). Closing only
    the outermost leaves the inner ones suspended, and trio warns about each one
    the garbage collector finds. Resuming the chain in a cancelled scope makes its
    innermost read raise ``Cancelled``, which finishes every generator on the way
    up; httpcore then drops the connection (shielded), as it must for an unfinished
    response. A chain that already ended returns at once.
    """
    with trio.CancelScope() as scope:
        scope.cancel()
        async for _ in chain:
            pass


async def _iter_sse(response: httpx.Response) -> AsyncGenerator[SSEEvent, None]:
    # The WHATWG event-stream grammar, reduced to what model APIs send: `id:` and
    # `retry:` only matter to reconnecting EventSource clients, so they are ignored.
    event = ""
    data: list[str] = []
    lines = response.aiter_lines()
    try:
        async for line in lines:
            if not line:
                if data:
                    yield SSEEvent(event=event or "message", data="\n".join(data))
                event, data = "", []
                continue
            if line.startswith(":"):  # comment / keep-alive
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data.append(value)
            elif name == "event":
                event = value
    finally:
        await finish_chain(lines)
    # The spec drops an event without its blank line at EOF; some servers end the
    # body right after the last `data:` line, and that event is the final one.
    if data:
        yield SSEEvent(event=event or "message", data="\n".join(data))


def _error_message(body: bytes) -> str:
    """The human part of an error reply: ``error.message`` and friends, else the text."""
    try:
        doc = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return excerpt(body.decode("utf-8", "replace")) or "(empty body)"
    if isinstance(doc, dict):
        # OpenAI / Anthropic / vLLM: {"error": {"message"}}; Ollama: {"error": "..."};
        # FastAPI-style servers: {"detail": ...} or {"message": ...}.
        err = doc.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return excerpt(err["message"])
        for key in ("error", "message", "detail"):
            if isinstance(doc.get(key), str):
                return excerpt(doc[key])
    return excerpt(body.decode("utf-8", "replace"))


async def _head_of_body(response: httpx.Response) -> bytes:
    """The first ``_MAX_ERROR_BODY`` bytes of a reply that is not read as a stream."""
    body = bytearray()
    chunks = response.aiter_bytes()
    try:
        async for chunk in chunks:
            body += chunk
            if len(body) >= _MAX_ERROR_BODY:
                break
    finally:
        await finish_chain(chunks)
    return bytes(body)


async def _status_error(
    provider: str, url: str, response: httpx.Response, key_hint: str
) -> ProviderError:
    body = await _head_of_body(response)
    status = response.status_code
    message = f"HTTP {status}: {_error_message(body)}"
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    if "retry-after-ms" in response.headers:  # OpenAI's finer-grained variant
        with suppress(ValueError):
            retry_after = max(0.0, float(response.headers["retry-after-ms"]) / 1000)
    if status in (401, 403):
        message += f" (check your API key: {key_hint})"
    elif status == 404:
        message += f" (check the model id and the base URL; POST {url})"
    # 408 request timeout, 409 conflict, 429 rate limit, 5xx incl. Anthropic's 529.
    retryable = status in (408, 409, 429) or status >= 500
    log.warning("provider_http_error", provider=provider, status=status, url=url)
    return ProviderError(
        provider, message, status=status, retryable=retryable, retry_after=retry_after
    )


async def _not_a_stream(provider: str, url: str, response: httpx.Response) -> ProviderError:
    """A 2xx reply that is not ``text/event-stream``: say what came back instead."""
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await _head_of_body(response)
    text = body.decode("utf-8", "replace")
    if kind == "text/html":
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
        what = f"an HTML page ({excerpt(title.group(1), 120)!r})" if title else "an HTML page"
        hint = "; is the base URL the API root (for example http://host:port/v1)?"
    elif kind in ("application/json", "text/plain"):
        what, hint = f"{kind} instead of an event stream: {_error_message(body)}", ""
    else:
        what, hint = f"{kind or 'no content type'} instead of an event stream", ""
    log.warning("provider_not_a_stream", provider=provider, url=url, content_type=kind)
    return ProviderError(
        provider, f"POST {url} answered HTTP {response.status_code} with {what}{hint}"
    )


def _transport_error(
    provider: str, url: str, exc: httpx.HTTPError, timeout: httpx.Timeout
) -> ProviderError:
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return ProviderError(provider, f"cannot connect to {url}: {detail}", retryable=True)
    if isinstance(exc, httpx.ReadTimeout):
        return ProviderError(
            provider, f"no data from {url} for {timeout.read:g} s (read timeout)", retryable=True
        )
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return ProviderError(provider, f"stream ended early: {detail}", retryable=True)
    if isinstance(exc, httpx.TransportError):
        return ProviderError(provider, f"{type(exc).__name__}: {detail}", retryable=True)
    return ProviderError(provider, f"{type(exc).__name__}: {detail}")


@asynccontextmanager
async def open_sse(
    client: httpx.AsyncClient,
    provider: str,
    url: str,
    body: dict[str, Any],
    *,
    headers: dict[str, str],
    key_hint: str,
) -> AsyncIterator[AsyncIterator[SSEEvent]]:
    """POST ``body`` as JSON to ``url`` and yield the reply's events.

    Args:
        client: the provider's pool.
        provider: provider id for errors and logs.
        url: full endpoint URL.
        body: the JSON request body.
        headers: extra headers (authentication, API version).
        key_hint: how to set the key, quoted by 401/403 errors.

    Raises:
        ProviderError: a non-2xx status (with ``status`` and the server's message),
            a connection failure, a timeout, or a connection that broke mid-stream;
            raised both when opening and while the caller iterates.

    Cancellation: leaving the block, for whatever reason, closes the response at once;
    an unfinished HTTP/1.1 response cannot be reused, so httpcore drops the
    connection (shielded) and the server sees it close.
    """
    request_headers = {
        "content-type": "application/json",
        "accept": "text/event-stream",
        **headers,
    }
    try:
        async with client.stream(
            "POST", url, content=_encoder.encode(body), headers=request_headers
        ) as response:
            if not response.is_success:
                raise await _status_error(provider, url, response, key_hint)
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind and kind != "text/event-stream":
                raise await _not_a_stream(provider, url, response)
            async with aclosing(_iter_sse(response)) as events:
                yield events
                # The caller stopped after the last event; the end of the body is
                # normally already here. Reading it returns the connection to the pool.
                with trio.move_on_after(_DRAIN_GRACE), suppress(httpx.HTTPError):
                    async for _ in events:
                        pass
    except httpx.HTTPError as exc:
        # Reached for errors while opening and, through the `yield`, for reads the
        # caller's iteration makes; ProviderError and Cancelled pass untouched.
        raise _transport_error(provider, url, exc, client.timeout) from exc


async def get_json(
    client: httpx.AsyncClient, provider: str, url: str, *, headers: dict[str, str], key_hint: str
) -> Any:
    """GET ``url`` and decode its JSON body (at most 4 MiB).

    Raises:
        ProviderError: a non-2xx status, a transport failure, or a body that is not JSON.

    Cancellation: the request is abandoned and its connection dropped.
    """
    try:
        async with client.stream("GET", url, headers=headers) as response:
            if not response.is_success:
                raise await _status_error(provider, url, response, key_hint)
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > 4 * 1024 * 1024:
                    raise ProviderError(provider, f"GET {url}: reply larger than 4 MiB")
    except httpx.HTTPError as exc:
        raise _transport_error(provider, url, exc, client.timeout) from exc
    try:
        return msgspec.json.decode(bytes(body))
    except msgspec.DecodeError:
        raise ProviderError(
            provider, f"GET {url}: not JSON: {excerpt(bytes(body).decode('utf-8', 'replace'))!r}"
        ) from None


def decode_data(provider: str, decoder: msgspec.json.Decoder[_T], data: str) -> _T:
    """Decode one ``data:`` payload.

    Raises:
        ProviderError: the payload is not JSON or not of the expected shape; the
            message quotes an excerpt of it.
    """
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise ProviderError(
            provider, f"unexpected event in stream ({exc}): {excerpt(data)!r}"
        ) from exc
    except msgspec.DecodeError as exc:
        raise ProviderError(provider, f"malformed JSON in stream: {excerpt(data)!r}") from exc


# -- known models and prices ----------------------------------------------------------


class KnownModel(msgspec.Struct, frozen=True, kw_only=True):
    """A model we know the limits and price of. Prices are USD per million tokens."""

    id: str
    provider: str
    context_window: int
    max_output: int
    #: Takes a reasoning level (``--reasoning``): ``reasoning_effort`` (OpenAI) or
    #: extended thinking (Anthropic).
    reasoning: bool = False
    #: The ``reasoning_effort`` closest to ``--reasoning off`` for a model that always
    #: reasons (``minimal`` for GPT-5); None: nothing is sent for ``off``.
    reasoning_off: str | None = None
    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0
    #: Other ids (after date stripping) that bill the same, e.g. ``claude-sonnet-4``.
    aliases: tuple[str, ...] = ()

    def info(self) -> ModelInfo:
        """The RPC ``get_models`` entry."""
        return ModelInfo(
            id=self.id,
            provider=self.provider,
            context_window=self.context_window,
            max_output=self.max_output,
            reasoning=self.reasoning,
        )


def _m(
    id: str, provider: str, ctx: int, out: int, prices: tuple[float, float, float, float], **kw: Any
) -> KnownModel:
    i, o, cr, cw = prices
    return KnownModel(
        id=id,
        provider=provider,
        context_window=ctx,
        max_output=out,
        input=i,
        output=o,
        cache_read=cr,
        cache_write=cw,
        **kw,
    )


_GPT5: dict[str, Any] = {"reasoning": True, "reasoning_off": "minimal"}

# List prices (standard tier) as published by the vendors; (input, output, cache read,
# cache write). OpenAI bills no cache writes; Anthropic's are 5-minute writes.
_MODELS: tuple[KnownModel, ...] = (
    _m("gpt-4.1", "openai", 1_047_576, 32_768, (2.00, 8.00, 0.50, 0)),
    _m("gpt-4.1-mini", "openai", 1_047_576, 32_768, (0.40, 1.60, 0.10, 0)),
    _m("gpt-4.1-nano", "openai", 1_047_576, 32_768, (0.10, 0.40, 0.025, 0)),
    _m("gpt-4o", "openai", 128_000, 16_384, (2.50, 10.00, 1.25, 0)),
    _m("gpt-4o-mini", "openai", 128_000, 16_384, (0.15, 0.60, 0.075, 0)),
    _m("gpt-5", "openai", 400_000, 128_000, (1.25, 10.00, 0.125, 0), **_GPT5),
    _m("gpt-5-mini", "openai", 400_000, 128_000, (0.25, 2.00, 0.025, 0), **_GPT5),
    _m("gpt-5-nano", "openai", 400_000, 128_000, (0.05, 0.40, 0.005, 0), **_GPT5),
    _m("o3", "openai", 200_000, 100_000, (2.00, 8.00, 0.50, 0), reasoning=True),
    _m("o4-mini", "openai", 200_000, 100_000, (1.10, 4.40, 0.275, 0), reasoning=True),
    _m("claude-sonnet-4-5", "anthropic", 200_000, 64_000, (3, 15, 0.30, 3.75), reasoning=True),
    _m("claude-opus-4-5", "anthropic", 200_000, 64_000, (5, 25, 0.50, 6.25), reasoning=True),
    _m("claude-haiku-4-5", "anthropic", 200_000, 64_000, (1, 5, 0.10, 1.25), reasoning=True),
    _m("claude-opus-4-1", "anthropic", 200_000, 32_000, (15, 75, 1.50, 18.75), reasoning=True),
    _m("claude-3-7-sonnet", "anthropic", 200_000, 64_000, (3, 15, 0.30, 3.75), reasoning=True),
    # No extended thinking: --reasoning low|medium|high is refused for it.
    _m("claude-3-5-haiku", "anthropic", 200_000, 8_192, (0.80, 4, 0.08, 1)),
    _m(
        "claude-sonnet-4-0",
        "anthropic",
        200_000,
        64_000,
        (3, 15, 0.30, 3.75),
        reasoning=True,
        aliases=("claude-sonnet-4",),
    ),
    _m(
        "claude-opus-4-0",
        "anthropic",
        200_000,
        32_000,
        (15, 75, 1.50, 18.75),
        reasoning=True,
        aliases=("claude-opus-4",),
    ),
)

# Dated snapshots bill like their alias: gpt-4o-2024-08-06, claude-opus-4-1-20250805.
_SNAPSHOT = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2}|latest)$")


def _key(model_id: str) -> str:
    return _SNAPSHOT.sub("", model_id.strip().lower())


_BY_KEY: dict[str, KnownModel] = {
    key: m for m in _MODELS for key in (_key(m.id), *(_key(a) for a in m.aliases))
}


def known_models(provider: str) -> list[KnownModel]:
    """The models in the table for ``provider``, in table order."""
    return [m for m in _MODELS if m.provider == provider]


def lookup(model_id: str) -> KnownModel | None:
    """The table entry for ``model_id`` (dated snapshots included), or None."""
    return _BY_KEY.get(_key(model_id))


def usage_event(
    model_id: str, *, input: int, output: int, cache_read: int = 0, cache_write: int = 0
) -> ProviderUsage:
    """A usage event with its cost; 0 USD for a model the table does not know.

    ``input`` counts only uncached input tokens; cache reads and writes are billed
    at their own rates.
    """
    known = lookup(model_id)
    cost = 0.0
    if known is not None:
        cost = (
            input * known.input
            + output * known.output
            + cache_read * known.cache_read
            + cache_write * known.cache_write
        ) / 1_000_000
    return ProviderUsage(
        input=input, output=output, cache_read=cache_read, cache_write=cache_write, cost_usd=cost
    )
