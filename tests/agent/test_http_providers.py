"""The OpenAI-compatible and Anthropic providers against a local fake server.

Every test talks to :mod:`http_fakes` on 127.0.0.1 over real HTTP/1.1, with the
real streaming wire formats; nothing reaches the internet. Behaviour both
providers share (HTTP errors, broken and malformed streams, cancellation) runs
once per provider through the ``flavor`` fixture.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import helpers.http_fakes as fx
import httpx
import pytest
import trio
from helpers.http_fakes import FakeServer, Reply, anthropic_sse, json_reply, openai_sse
from helpers.http_fakes import split as pieces

from agent import (
    ImageContent,
    Message,
    ModelInfo,
    ModelRequest,
    Provider,
    ProviderError,
    ProviderEvent,
    ProviderSettings,
    TextContent,
    ToolCallContent,
    ToolResultContent,
    ToolSpec,
)
from agent._messages import now_iso
from agent._providers.anthropic import AnthropicProvider
from agent._providers.base import ProviderStop, ProviderTextDelta, ProviderToolCall, ProviderUsage
from agent._providers.http import lookup
from agent._providers.openai import OpenAIProvider

PNG = "iVBORw0KGgo="
JPEG = "/9j/4AAQ"
READ = ToolSpec(
    name="read",
    description="Read a file.",
    schema={"type": "object", "properties": {"path": {"type": "string"}}},
)


def msg(role: Any, *blocks: Any) -> Message:
    content = [TextContent(text=b) if isinstance(b, str) else b for b in blocks]
    return Message(role=role, content=content, time=now_iso())


def request(*messages: Message, tools: Any = (), model: str = "") -> ModelRequest:
    chat = list(messages) or [msg("user", "hi")]
    return ModelRequest(model=model, system="be brief", messages=chat, tools=list(tools))


async def run(
    provider: Provider, req: ModelRequest | None = None
) -> tuple[list[ProviderEvent], ProviderError | None]:
    """All events of one call, and the ProviderError that ended it, if any."""
    got: list[ProviderEvent] = []
    with trio.fail_after(10):
        try:
            async with aclosing(provider.stream(req or request())) as events:
                async for event in events:
                    got.append(event)
        except ProviderError as exc:
            return got, exc
    return got, None


async def events_of(provider: Provider, req: ModelRequest | None = None) -> list[ProviderEvent]:
    got, error = await run(provider, req)
    assert error is None, error
    return got


async def failure(provider: Provider) -> tuple[list[ProviderEvent], ProviderError]:
    got, error = await run(provider)
    assert error is not None, got
    return got, error


# -- fixtures -------------------------------------------------------------------------


@dataclass(frozen=True)
class Flavor:
    """How one provider is built and what its wire looks like."""

    name: str
    make: Callable[[str], Provider]
    path: str
    #: Start of a stream with one text delta "Hel", no end.
    partial: bytes
    #: A whole stream answering "ok".
    full: bytes
    #: The provider's error document for ``message``.
    error: Callable[[str], Any]
    key_var: str


#: One attempt per call: these tests look at single failures (retries: test_retry.py).
ONCE = ProviderSettings(retries=0)

OPENAI = Flavor(
    name="openai",
    make=lambda url: OpenAIProvider("gpt-4o-mini", f"{url}/v1", "sk-test", settings=ONCE),
    path="/v1/chat/completions",
    partial=fx.OPENAI_PARTIAL,
    full=fx.OPENAI_FULL,
    error=lambda m: {"error": {"message": m, "type": "invalid_request_error", "code": None}},
    key_var="OPENAI_API_KEY",
)
ANTHROPIC = Flavor(
    name="anthropic",
    make=lambda url: AnthropicProvider("claude-sonnet-4-5", url, "sk-ant-test", settings=ONCE),
    path="/v1/messages",
    partial=fx.ANTHROPIC_PARTIAL,
    full=fx.ANTHROPIC_FULL,
    error=lambda m: {"type": "error", "error": {"type": "authentication_error", "message": m}},
    key_var="ANTHROPIC_API_KEY",
)


@pytest.fixture(autouse=True)
def _clean_env(clean_http_env: None) -> None:
    """Keys, base URLs and proxies of the developer's shell must not leak in."""


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    async with fx.open_fake_server() as s:
        yield s


@pytest.fixture(params=[OPENAI, ANTHROPIC], ids=lambda f: f.name)
def flavor(request: pytest.FixtureRequest) -> Flavor:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
async def provider(server: FakeServer, flavor: Flavor) -> AsyncIterator[Provider]:
    async with aclosing(flavor.make(server.url)) as p:
        yield p


@pytest.fixture
async def openai(server: FakeServer) -> AsyncIterator[OpenAIProvider]:
    async with aclosing(
        OpenAIProvider("gpt-4o-mini", f"{server.url}/v1", "sk-test", settings=ONCE)
    ) as p:
        yield p


@pytest.fixture
async def anthropic(server: FakeServer) -> AsyncIterator[AnthropicProvider]:
    # A dated snapshot id: its price comes from the alias's entry.
    async with aclosing(
        AnthropicProvider("claude-sonnet-4-5-20250929", server.url, "sk", settings=ONCE)
    ) as p:
        yield p


# -- shared behaviour -----------------------------------------------------------------


async def test_http_401_says_check_the_key(server: FakeServer, flavor: Flavor, provider: Provider):
    server.queue(json_reply(401, flavor.error("invalid x-api-key")))
    got, error = await failure(provider)
    assert (got, error.provider, error.status, error.retryable) == ([], flavor.name, 401, False)
    for part in ("invalid x-api-key", "check your API key", flavor.key_var):
        assert part in str(error)
    assert server.last.path == flavor.path


@pytest.mark.parametrize("status", [429, 500, 529])
async def test_http_429_and_5xx_are_retryable(
    server: FakeServer, provider: Provider, status: int
) -> None:
    server.queue(Reply(status=status, content_type="text/plain", chunks=[b"upstream  exploded\n"]))
    _, error = await failure(provider)
    assert (error.status, error.retryable) == (status, True)
    assert f"HTTP {status}: upstream exploded" in str(error)


@pytest.mark.parametrize("end", ["break", "complete"])
async def test_stream_without_final_stop_ended_early(
    server: FakeServer, flavor: Flavor, provider: Provider, end: Any
) -> None:
    # "break": the connection dies mid-body; "complete": the body ends too soon.
    server.queue(Reply(chunks=pieces(flavor.partial), end=end))
    got, error = await failure(provider)
    assert got == [ProviderTextDelta(text="Hel")]
    assert "stream ended early" in str(error)
    assert error.retryable


async def test_malformed_data_line(server: FakeServer, flavor: Flavor, provider: Provider) -> None:
    bad = '{"choices": [ {"delta": oops'
    tail = openai_sse(bad) if flavor is OPENAI else anthropic_sse(("content_block_delta", bad))
    server.queue(Reply(chunks=[flavor.partial + tail]))
    got, error = await failure(provider)
    assert got == [ProviderTextDelta(text="Hel")]
    assert f"malformed JSON in stream: {bad!r}" in str(error)
    assert not error.retryable


@pytest.mark.parametrize("how", ["cancel", "close"])
async def test_leaving_mid_stream_closes_the_connection(
    server: FakeServer, flavor: Flavor, provider: Provider, how: str
) -> None:
    # "cancel": the consumer's scope is cancelled; "close": it stops iterating early.
    server.queue(Reply(chunks=[flavor.partial], end="hang"), Reply(chunks=[flavor.full]))
    got: list[ProviderEvent] = []
    with trio.fail_after(10):
        with trio.CancelScope() as scope:
            async with aclosing(provider.stream(request())) as events:
                async for event in events:
                    got.append(event)
                    if how == "close":
                        break
                    scope.cancel()
        assert scope.cancelled_caught == (how == "cancel")
        await server.disconnected.wait()
    assert got == [ProviderTextDelta(text="Hel")]
    # The pool is still good for the next call.
    after = await events_of(provider)
    assert (after[0], after[-1]) == (ProviderTextDelta(text="ok"), ProviderStop(reason="end_turn"))


async def test_connection_is_reused(server: FakeServer, flavor: Flavor, provider: Provider):
    server.queue(Reply(chunks=[flavor.full]), Reply(chunks=pieces(flavor.full)))
    for _ in range(2):
        assert (await events_of(provider))[-1] == ProviderStop(reason="end_turn")
    assert server.connections == 1


async def test_missing_key_is_reported_on_first_call(
    monkeypatch: pytest.MonkeyPatch, flavor: Flavor, provider: Provider
) -> None:
    p = type(provider)()  # the vendor's own base URL, and no key anywhere
    # Belt and braces: if the key check were skipped, fail here instead of going online.
    guard = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: pytest.fail(str(r.url))))
    monkeypatch.setattr(p, "_client", guard)
    _, error = await failure(p)
    assert flavor.key_var in str(error)
    assert "--api-key" in str(error)
    await p.aclose()


# -- OpenAI ---------------------------------------------------------------------------


async def test_openai_streams_text_usage_and_cost(
    server: FakeServer, openai: OpenAIProvider
) -> None:
    deltas = [fx.oa(text) for text in ["", "Hel", "lo ✓"]]
    body = openai_sse(*deltas, fx.oa(finish="stop"), fx.oa_usage(1000, 50, cached=200))
    server.queue(Reply(chunks=pieces(body, 5)))
    got = await events_of(openai)
    cost = (800 * 0.15 + 200 * 0.075 + 50 * 0.60) / 1e6
    assert got == [
        ProviderTextDelta(text="Hel"),
        ProviderTextDelta(text="lo ✓"),
        ProviderUsage(input=800, output=50, cache_read=200, cost_usd=pytest.approx(cost)),
        ProviderStop(reason="end_turn"),
    ]
    sent = server.last
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.headers["content-type"] == "application/json"
    assert sent.body == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 4096,
    }


async def test_openai_tool_calls_from_fragments(server: FakeServer, openai: OpenAIProvider):
    body = openai_sse(
        fx.oa("Let me look."),
        fx.oa(calls=[fx.oa_call(0, "", id="call_a", name="read")]),
        fx.oa(calls=[fx.oa_call(0, '{"pa')]),
        fx.oa(calls=[fx.oa_call(1, '{"path":', id="call_b", name="read")]),
        fx.oa(calls=[fx.oa_call(0, 'th": "a.txt"}')]),
        fx.oa(calls=[fx.oa_call(1, ' "b.txt"}')]),
        fx.oa(finish="tool_calls"),
    )
    server.queue(Reply(chunks=pieces(body, 11)))
    got = await events_of(openai, request(tools=[READ]))
    assert got == [
        ProviderTextDelta(text="Let me look."),
        ProviderToolCall(id="call_a", name="read", args={"path": "a.txt"}),
        ProviderToolCall(id="call_b", name="read", args={"path": "b.txt"}),
        ProviderStop(reason="tool_use"),
    ]
    assert server.last.body["tools"] == [
        {
            "type": "function",
            "function": {"name": "read", "description": "Read a file.", "parameters": READ.schema},
        }
    ]


async def test_openai_maps_the_transcript(server: FakeServer, openai: OpenAIProvider) -> None:
    server.queue(Reply(chunks=[OPENAI.full]))
    call_1 = ToolCallContent(id="call_1", name="read", args={"path": "a.txt"})
    call_2 = ToolCallContent(id="call_2", name="screenshot", args={})
    shot = ImageContent(mime_type="image/jpeg", data=JPEG)
    hello = TextContent(text="hello")
    await events_of(
        openai,
        request(
            msg("user", "what is this?", ImageContent(data=PNG)),
            msg("assistant", "Checking.", call_1, call_2),
            msg("tool", ToolResultContent(call_id="call_1", is_error=False, content=[hello])),
            msg("tool", ToolResultContent(call_id="call_2", is_error=False, content=[shot])),
            msg("user", "thanks"),
        ),
    )
    read = {"name": "read", "arguments": '{"path":"a.txt"}'}
    screenshot = {"name": "screenshot", "arguments": "{}"}
    image_url = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    jpeg_url = {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}}
    assert server.last.body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "what is this?"}, image_url]},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": read},
                {"id": "call_2", "type": "function", "function": screenshot},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "hello"},
        {"role": "tool", "tool_call_id": "call_2", "content": "(1 image(s) attached below)"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Images returned by the tool calls above:"},
                jpeg_url,
            ],
        },
        {"role": "user", "content": "thanks"},
    ]


async def test_openai_keyless_local_server_and_unknown_model(server: FakeServer) -> None:
    body = openai_sse(fx.oa("ok"), fx.oa(finish="stop"), fx.oa_usage(10, 2))
    server.queue(Reply(chunks=[body]))
    async with aclosing(OpenAIProvider("llama3.2", f"{server.url}/v1")) as p:
        got = await events_of(p)
    assert "authorization" not in server.last.headers
    assert server.last.body["model"] == "llama3.2"
    assert ProviderUsage(input=10, output=2, cost_usd=0.0) in got
    assert p.models() == [ModelInfo(id="llama3.2", provider="openai")]


async def test_openai_env_vars(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    server.queue(Reply(chunks=[OPENAI.full]))
    async with aclosing(OpenAIProvider(settings=ONCE)) as p:
        _, error = await failure(p)
        assert "pass --model" in str(error)  # a custom server has no default model
        await events_of(p, request(model="qwen2.5"))
    assert server.last.path == "/v1/chat/completions"
    assert server.last.headers["authorization"] == "Bearer sk-env"


async def test_openai_local_server_quirks(server: FakeServer, openai: OpenAIProvider) -> None:
    # Ollama-style: a whole call in one chunk without index or id, finish "stop",
    # no usage, and the body ends without [DONE].
    body = openai_sse(
        fx.oa(calls=[fx.oa_call(None, '{"path": "x"}', name="read")]),
        fx.oa(finish="stop"),
        done=False,
    )
    server.queue(Reply(chunks=[body]))
    [call, stop] = await events_of(openai)
    assert isinstance(call, ProviderToolCall)
    assert (call.name, call.args, call.id.startswith("call_")) == ("read", {"path": "x"}, True)
    assert stop == ProviderStop(reason="tool_use")


async def test_openai_length_drops_a_truncated_call(server: FakeServer, openai: OpenAIProvider):
    body = openai_sse(
        fx.oa(calls=[fx.oa_call(0, '{"path": "a', id="c", name="read")]), fx.oa(finish="length")
    )
    server.queue(Reply(chunks=[body]))
    assert await events_of(openai) == [ProviderStop(reason="length")]


async def test_openai_error_inside_the_stream(server: FakeServer, openai: OpenAIProvider) -> None:
    error_chunk = {"error": {"message": "The server had an error", "type": "server_error"}}
    server.queue(Reply(chunks=[openai_sse(fx.oa("Hel"), error_chunk)]))
    got, error = await failure(openai)
    assert got == [ProviderTextDelta(text="Hel")]
    assert "The server had an error" in str(error)
    assert error.retryable


def test_models_lists_the_configured_one_first() -> None:
    ids = [m.id for m in OpenAIProvider(api_key="sk").models()]
    assert ids[0] == "gpt-4.1"
    assert {"gpt-4o", "gpt-4o-mini", "o4-mini"} <= set(ids)
    assert OpenAIProvider("gpt-4o", api_key="sk").models()[0].id == "gpt-4o"
    assert OpenAIProvider(base_url="http://127.0.0.1:1/v1").models() == []
    ids = [m.id for m in AnthropicProvider().models()]
    assert ids[0] == "claude-sonnet-4-5"
    assert {"claude-opus-4-5", "claude-haiku-4-5"} <= set(ids)
    mine = AnthropicProvider("claude-next").models()[0]
    assert mine == ModelInfo(id="claude-next", provider="anthropic")


# -- Anthropic ------------------------------------------------------------------------


async def test_anthropic_streams_text_usage_and_cost(
    server: FakeServer, anthropic: AnthropicProvider
) -> None:
    body = anthropic_sse(
        fx.an_start(input=100, cache_read=1000, cache_write=50),
        fx.an_block(0),
        {"type": "ping"},
        *(fx.an_text(0, text) for text in ["Hi", " thére"]),
        fx.an_stop(0),
        fx.an_end("end_turn", output=12),
        fx.AN_DONE,
    )
    server.queue(Reply(chunks=pieces(body, 5)))
    got = await events_of(anthropic)
    cost = (100 * 3 + 12 * 15 + 1000 * 0.30 + 50 * 3.75) / 1e6
    usage = ProviderUsage(
        input=100, output=12, cache_read=1000, cache_write=50, cost_usd=pytest.approx(cost)
    )
    assert got == [
        ProviderTextDelta(text="Hi"),
        ProviderTextDelta(text=" thére"),
        usage,
        ProviderStop(reason="end_turn"),
    ]
    sent = server.last
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["x-api-key"] == "sk"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    ephemeral = {"type": "ephemeral"}
    assert sent.body == {
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 4096,
        "stream": True,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": ephemeral}],
            }
        ],
        "system": [{"type": "text", "text": "be brief", "cache_control": ephemeral}],
    }


async def test_anthropic_tool_use_from_input_json_deltas(
    server: FakeServer, anthropic: AnthropicProvider
) -> None:
    body = anthropic_sse(
        fx.an_start(),
        fx.an_block(0),
        fx.an_text(0, "Reading."),
        fx.an_stop(0),
        fx.an_block(1, "tool_use", id="toolu_1", name="read"),
        *(fx.an_json(1, part) for part in ["", '{"pa', 'th": "a.t', 'xt"}']),
        fx.an_stop(1),
        fx.an_block(2, "tool_use", id="toolu_2", name="list"),
        fx.an_stop(2),
        fx.an_end("tool_use", output=40),
        fx.AN_DONE,
    )
    server.queue(Reply(chunks=pieces(body, 9)))
    got = await events_of(anthropic, request(tools=[READ]))
    assert got == [
        ProviderTextDelta(text="Reading."),
        ProviderToolCall(id="toolu_1", name="read", args={"path": "a.txt"}),
        ProviderToolCall(id="toolu_2", name="list", args={}),
        ProviderUsage(input=10, output=40, cost_usd=pytest.approx((10 * 3 + 40 * 15) / 1e6)),
        ProviderStop(reason="tool_use"),
    ]
    assert server.last.body["tools"] == [
        {"name": "read", "description": "Read a file.", "input_schema": READ.schema}
    ]


async def test_anthropic_maps_the_transcript(
    server: FakeServer, anthropic: AnthropicProvider
) -> None:
    server.queue(Reply(chunks=[ANTHROPIC.full]))
    call = ToolCallContent(id="toolu_1", name="read", args={"path": "a.txt"})
    look = ToolCallContent(id="toolu_2", name="screenshot", args={})
    failed = ToolResultContent(
        call_id="toolu_1", is_error=True, content=[TextContent(text="no such file")]
    )
    shot = ToolResultContent(
        call_id="toolu_2", is_error=False, content=[ImageContent(mime_type="image/jpeg", data=JPEG)]
    )
    await events_of(
        anthropic,
        request(
            msg("user", "what is this?", ImageContent(data=PNG)),
            msg("assistant", "", call, look),
            msg("tool", failed, shot),
            msg("user", "thanks"),
        ),
    )
    png = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    jpeg = {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": JPEG}}
    assert server.last.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "what is this?"}, png]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.txt"}},
                {"type": "tool_use", "id": "toolu_2", "name": "screenshot", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "no such file"}],
                    "is_error": True,
                },
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": [jpeg]},
                {"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]


async def test_anthropic_max_tokens_is_length(
    server: FakeServer, anthropic: AnthropicProvider
) -> None:
    body = anthropic_sse(
        fx.an_start(),
        fx.an_block(0, "tool_use", id="toolu_1", name="read"),
        fx.an_json(0, '{"path": "a'),
        fx.an_stop(0),
        fx.an_end("max_tokens"),
        fx.AN_DONE,
    )
    server.queue(Reply(chunks=[body]))
    [usage, stop] = await events_of(anthropic)  # the cut-off call is dropped
    assert (type(usage), stop) == (ProviderUsage, ProviderStop(reason="length"))


async def test_anthropic_error_event(server: FakeServer, anthropic: AnthropicProvider) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    server.queue(Reply(chunks=[ANTHROPIC.partial + anthropic_sse(error)]))
    got, exc = await failure(anthropic)
    assert got == [ProviderTextDelta(text="Hel")]
    assert "overloaded_error: Overloaded" in str(exc)
    assert exc.retryable


async def test_anthropic_env_vars(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"{server.url}/v1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    server.queue(Reply(chunks=[ANTHROPIC.full]))
    async with aclosing(AnthropicProvider()) as p:
        await events_of(p)
    assert server.last.path == "/v1/messages"
    assert server.last.headers["x-api-key"] == "sk-ant-env"
    assert server.last.body["model"] == "claude-sonnet-4-5"


# -- pricing --------------------------------------------------------------------------

SNAPSHOTS = {
    "gpt-4o-2024-08-06": "gpt-4o",
    "gpt-4o-mini": "gpt-4o-mini",
    "claude-opus-4-1-20250805": "claude-opus-4-1",
    "claude-sonnet-4-20250514": "claude-sonnet-4-0",
    "llama3.2": None,
}


@pytest.mark.parametrize(("model", "entry"), SNAPSHOTS.items())
def test_price_lookup_strips_snapshot_dates(model: str, entry: str | None) -> None:
    found = lookup(model)
    assert (found.id if found else None) == entry
