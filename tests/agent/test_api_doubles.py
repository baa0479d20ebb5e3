"""The test doubles of the OpenAI and Anthropic APIs refuse what the real services refuse.

A transcript bug must fail a test instead of a user's session, so the fake servers
(``helpers.http_fakes``) check each request as the services do (``helpers.api_rules``)
and answer 400 with the service's own error document. Here: what is refused and
how, over real HTTP through the real providers, and that the providers' mapping of
a valid transcript (tool calls, results, images, a following prompt) is accepted.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import httpx
import pytest
import trio
from helpers.api_rules import anthropic_problem, openai_problem
from helpers.http_fakes import ANTHROPIC_FULL, OPENAI_FULL, FakeServer, Reply, open_fake_server

from agent import Message, ProviderError, TextContent, ToolCallContent, ToolResultContent
from agent._providers.anthropic import AnthropicProvider
from agent._providers.anthropic import _map_messages as anthropic_messages
from agent._providers.base import ModelRequest, ProviderSettings
from agent._providers.openai import OpenAIProvider
from agent._providers.openai_messages import map_messages as openai_messages

pytestmark = pytest.mark.usefixtures("clean_http_env")

T = "2026-01-01T00:00:00Z"
NO_RETRY = ProviderSettings(retries=0)


def user(text: str) -> Message:
    return Message(role="user", content=[TextContent(text=text)], time=T)


def calls(*ids: str, text: str = "") -> Message:
    blocks: list[Any] = [TextContent(text=text)] if text else []
    blocks += [ToolCallContent(id=i, name="read", args={"path": i}) for i in ids]
    return Message(role="assistant", content=blocks, time=T)


def results(*ids: str) -> Message:
    blocks = [
        ToolResultContent(call_id=i, is_error=False, content=[TextContent(text=f"r{i}")])
        for i in ids
    ]
    return Message(role="tool", content=list(blocks), time=T)


VALID = [
    [user("hi")],
    [user("hi"), calls("a", text="look"), results("a"), user("thanks")],
    [user("hi"), calls("a", "b"), results("b", "a")],
    [
        user("hi"),
        calls("a"),
        results("a"),
        calls("b"),
        results("b"),
        Message(role="assistant", content=[TextContent(text="done")], time=T),
        user("more"),
    ],
]
BROKEN = {
    "unanswered call, then a prompt": [user("hi"), calls("a"), user("next")],
    "unanswered call at the end": [user("hi"), calls("a")],
    "one of two calls answered": [user("hi"), calls("a", "b"), results("a"), user("next")],
    "a result without its call": [user("hi"), results("z"), user("next")],
    "a result for another id": [user("hi"), calls("a"), results("z")],
}


def _openai_body(messages: list[Message]) -> dict[str, Any]:
    return {"model": "m", "messages": openai_messages("sys", messages), "stream": True}


def _anthropic_body(messages: list[Message]) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 10, "messages": anthropic_messages(messages)}


@pytest.mark.parametrize("messages", VALID)
def test_the_providers_mapping_of_a_valid_transcript_is_accepted(messages: list[Message]) -> None:
    assert openai_problem(_openai_body(messages)) is None
    assert anthropic_problem(_anthropic_body(messages)) is None


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_pairing_is_refused_by_both(case: str) -> None:
    messages = BROKEN[case]
    oa = openai_problem(_openai_body(messages))
    an = anthropic_problem(_anthropic_body(messages))
    assert oa is not None
    assert an is not None
    assert "tool" in oa.message
    assert "tool_" in an.message


def test_the_services_wording_and_the_parameter_named() -> None:
    oa = openai_problem(_openai_body(BROKEN["unanswered call, then a prompt"]))
    assert oa is not None
    assert oa.message == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: a"
    )
    assert oa.param == "messages.[3].role"  # system, user, assistant, then the user prompt
    orphan = openai_problem(_openai_body(BROKEN["a result without its call"]))
    assert orphan is not None
    assert orphan.message.startswith(
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding"
    )
    an = anthropic_problem(_anthropic_body(BROKEN["unanswered call, then a prompt"]))
    assert an is not None
    assert an.message.startswith(
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: a."
    )


def test_anthropic_roles_must_alternate_and_start_with_the_user() -> None:
    double = {"role": "user", "content": "a"}
    body = {"model": "m", "max_tokens": 1, "messages": [double, double]}
    problem = anthropic_problem(body)
    assert problem is not None
    assert "roles must alternate" in problem.message
    body["messages"] = [{"role": "assistant", "content": "a"}]
    problem = anthropic_problem(body)
    assert problem is not None
    assert "first message must use the" in problem.message
    text_after = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "r", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "text", "text": "x"}, {"type": "tool_result", "tool_use_id": "t"}],
        },
    ]
    problem = anthropic_problem({"model": "m", "max_tokens": 1, "messages": text_after})
    assert problem is not None
    assert "must come first" in problem.message


async def _post(server: FakeServer, path: str, body: Any) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.post(f"{server.url}{path}", json=body)


async def test_a_refusal_has_the_real_error_document_and_takes_no_queued_reply() -> None:
    with trio.fail_after(10):
        async with open_fake_server() as server:
            server.queue(Reply(chunks=[OPENAI_FULL]))
            reply = await _post(
                server, "/v1/chat/completions", _openai_body(BROKEN["unanswered call at the end"])
            )
            assert reply.status_code == 400
            error = reply.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["type"] == "invalid_request_error"
            reply = await _post(
                server, "/v1/messages", _anthropic_body(BROKEN["a result for another id"])
            )
            assert reply.status_code == 400
            doc = reply.json()
            assert doc["type"] == "error"
            assert set(doc["error"]) == {"type", "message"}
            assert doc["error"]["type"] == "invalid_request_error"
            assert len(server.refused) == 2
            assert len(server.replies) == 1


async def _stream(provider: Any, messages: list[Message]) -> AsyncIterator[Any]:
    request = ModelRequest(model="", system="s", messages=messages, tools=[])
    async with aclosing(provider.stream(request)) as events:
        async for event in events:
            yield event


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_through_the_real_provider_a_broken_transcript_is_a_400(api: str) -> None:
    with trio.fail_after(10):
        async with open_fake_server() as server:
            server.queue(Reply(chunks=[OPENAI_FULL if api == "openai" else ANTHROPIC_FULL]))
            provider: Any = (
                OpenAIProvider("m1", f"{server.url}/v1", "k", NO_RETRY)
                if api == "openai"
                else AnthropicProvider("m1", server.url, "k", NO_RETRY)
            )
            try:
                with pytest.raises(ProviderError) as caught:
                    _ = [
                        e async for e in _stream(provider, BROKEN["unanswered call, then a prompt"])
                    ]
                assert caught.value.status == 400
                assert "tool_" in str(caught.value)
                got = [e async for e in _stream(provider, VALID[1])]
                assert got  # the queued reply answers the valid request
            finally:
                await provider.aclose()
            assert len(server.refused) == 1
            assert json.dumps(server.refused[0][0].body).count("tool") > 0
