"""``--reasoning off|low|medium|high`` (seeds/rpc.md) and the thinking it brings.

Request fields per provider and level go to the strict doubles of the OpenAI and
Anthropic APIs over real HTTP (they answer 400 to what the services refuse,
thinking's own constraints included); thinking that comes back is streamed as
``thinking_delta``, never as answer text, and Anthropic's signed thinking blocks go
back unchanged in the tool-use exchange, through the real ``corral rpc``.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import aclosing
from pathlib import Path
from typing import Any

import helpers.http_fakes as fx
import pytest
import trio
from click.testing import CliRunner
from helpers.http_fakes import FakeServer, Recorded, Reply, open_fake_server
from helpers.paths import REPO
from helpers.ptykit import run_on_pty
from helpers.rpc_harness import open_rpc, write_script

from agent import (
    Message,
    ModelRequest,
    ProviderSettings,
    TextContent,
    ToolCallContent,
    ToolResultContent,
)
from agent._cli.main import main
from agent._messages import now_iso
from agent._providers.anthropic import AnthropicProvider
from agent._providers.base import (
    Provider,
    ProviderEvent,
    ProviderTextDelta,
    ProviderThinkingBlock,
    ProviderThinkingDelta,
)
from agent._providers.openai import OpenAIProvider
from agent._providers.reasoning import limits

pytestmark = pytest.mark.usefixtures("no_leaks")

TIMEOUT = 60
ONCE = ProviderSettings(retries=0)


def _request(level: Any) -> ModelRequest:
    hi = Message(role="user", content=[TextContent(text="hi")], time=now_iso())
    return ModelRequest(model="", system="s", messages=[hi], tools=[], reasoning=level)


async def _call(provider: Provider, level: Any) -> list[ProviderEvent]:
    got: list[ProviderEvent] = []
    with trio.fail_after(10):
        async with aclosing(provider.stream(_request(level))) as events:  # type: ignore[type-var]
            async for event in events:
                got.append(event)
    return got


# -- what each provider sends per level ---------------------------------------------------


@pytest.mark.parametrize(
    ("model", "level", "effort", "max_tokens"),
    [
        ("gpt-5", None, None, 4096),
        ("gpt-5", "off", "minimal", 4096),  # GPT-5 always reasons: off is its least
        ("o3", "off", None, 4096),  # o3 has no lesser effort: nothing is sent
        ("gpt-5", "low", "low", 4096 + 2048),
        ("o4-mini", "medium", "medium", 4096 + 8192),
        ("gpt-5-mini", "high", "high", 4096 + 24576),
        ("deepseek-reasoner", "high", "high", 4096 + 24576),  # a server's model: sent
    ],
)
async def test_openai_reasoning_effort(
    model: str, level: Any, effort: str | None, max_tokens: int
) -> None:
    async with open_fake_server() as server:
        server.queue(Reply(chunks=[fx.OPENAI_FULL]))
        provider = OpenAIProvider(model, f"{server.url}/v1", "k", settings=ONCE)
        await _call(provider, level)
        await provider.aclose()
    assert not server.refused
    body = server.last.body
    assert body.get("reasoning_effort") == effort
    assert body["max_tokens"] == max_tokens


@pytest.mark.parametrize(
    ("model", "level", "budget", "max_tokens"),
    [
        ("claude-sonnet-4-5", None, None, 4096),
        ("claude-sonnet-4-5", "off", None, 4096),
        ("claude-sonnet-4-5", "low", 2048, 4096 + 2048),
        ("claude-opus-4-5", "medium", 8192, 4096 + 8192),
        ("claude-haiku-4-5", "high", 24576, 4096 + 24576),
        ("claude-opus-4-1", "high", 24576, 4096 + 24576),
        ("claude-next", "high", 24576, 4096 + 24576),  # not in the table: sent
    ],
)
async def test_anthropic_thinking_budget(
    model: str, level: Any, budget: int | None, max_tokens: int
) -> None:
    async with open_fake_server() as server:
        server.queue(Reply(chunks=[fx.ANTHROPIC_FULL]))
        provider = AnthropicProvider(model, server.url, "k", settings=ONCE)
        await _call(provider, level)
        await provider.aclose()
    assert not server.refused, server.refused
    body = server.last.body
    expected = None if budget is None else {"type": "enabled", "budget_tokens": budget}
    assert body.get("thinking") == expected
    assert body["max_tokens"] == max_tokens
    assert "temperature" not in body
    assert "top_k" not in body


def test_limits_fit_the_models_maximum_output() -> None:
    # claude-3-7-sonnet's 64k would fit; a model with 8k of output keeps room to answer.
    assert limits("high", 4096, 64_000) == (4096 + 24576, 24576)
    total, budget = limits("high", 4096, 8192)
    assert total == 8192
    assert 1024 <= budget < total
    assert limits("low", 30_000, 32_000) == (32_000, 2048)
    assert limits("off", 4096, 8192) == (4096, 0)


# -- thinking in the replies ---------------------------------------------------------------


def _an_thinking(index: int, text: str, signature: str) -> list[dict[str, Any]]:
    start = fx.an_block(index, "thinking", thinking="", signature="")
    start["content_block"].pop("input", None)
    delta = {"type": "thinking_delta", "thinking": text}
    sig = {"type": "signature_delta", "signature": signature}
    return [
        start,
        {"type": "content_block_delta", "index": index, "delta": delta},
        {"type": "content_block_delta", "index": index, "delta": sig},
        fx.an_stop(index),
    ]


async def test_anthropic_thinking_is_streamed_apart_and_kept_with_its_signature() -> None:
    body = fx.anthropic_sse(
        fx.an_start(),
        *_an_thinking(0, "Let me think.", "sig-1"),
        fx.an_block(1),
        fx.an_text(1, "Answer."),
        fx.an_stop(1),
        fx.an_end("end_turn"),
        fx.AN_DONE,
    )
    async with open_fake_server() as server:
        server.queue(Reply(chunks=fx.split(body)))
        provider = AnthropicProvider("claude-sonnet-4-5", server.url, "k", settings=ONCE)
        events = await _call(provider, "low")
        await provider.aclose()
    thinking = [e.text for e in events if isinstance(e, ProviderThinkingDelta)]
    text = [e.text for e in events if isinstance(e, ProviderTextDelta)]
    blocks = [e.block for e in events if isinstance(e, ProviderThinkingBlock)]
    assert "".join(thinking) == "Let me think."
    assert "".join(text) == "Answer."
    assert [(b.text, b.signature) for b in blocks] == [("Let me think.", "sig-1")]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_openai_compatible_reasoning_is_thinking_not_text(field: str) -> None:
    def chunk(**delta: Any) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}

    body = fx.openai_sse(
        chunk(**{field: "Hmm, "}), chunk(**{field: "yes."}), fx.oa("Yes."), fx.oa(finish="stop")
    )
    async with open_fake_server() as server:
        server.queue(Reply(chunks=[body]))
        provider = OpenAIProvider("deepseek-reasoner", f"{server.url}/v1", "k", settings=ONCE)
        events = await _call(provider, "high")
        await provider.aclose()
    assert "".join(e.text for e in events if isinstance(e, ProviderThinkingDelta)) == "Hmm, yes."
    assert "".join(e.text for e in events if isinstance(e, ProviderTextDelta)) == "Yes."
    (block,) = [e.block for e in events if isinstance(e, ProviderThinkingBlock)]
    assert block.text == "Hmm, yes."
    assert block.signature is None


async def test_redacted_thinking_is_kept_and_sent_back_as_it_came() -> None:
    start = fx.an_block(0, "redacted_thinking", data="ENCRYPTED")
    start["content_block"].pop("input", None)
    body = fx.anthropic_sse(
        fx.an_start(), start, fx.an_stop(0), *fx_text(1, "ok"), fx.an_end("end_turn"), fx.AN_DONE
    )
    async with open_fake_server() as server:
        server.queue(Reply(chunks=[body]))
        provider = AnthropicProvider("claude-sonnet-4-5", server.url, "k", settings=ONCE)
        events = await _call(provider, "high")
        await provider.aclose()
    (block,) = [e.block for e in events if isinstance(e, ProviderThinkingBlock)]
    assert (block.text, block.redacted) == ("", "ENCRYPTED")
    assert not [e for e in events if isinstance(e, ProviderThinkingDelta)]


async def test_thinking_is_off_for_a_call_that_continues_an_exchange_begun_without_it() -> None:
    # The level was raised between prompts, mid-exchange: the API would refuse thinking.
    call = ToolCallContent(id="toolu_1", name="read", args={})
    result = ToolResultContent(call_id="toolu_1", is_error=False, content=[TextContent(text="x")])
    chat = [
        Message(role="user", content=[TextContent(text="go")], time=now_iso()),
        Message(role="assistant", content=[call], time=now_iso()),
        Message(role="tool", content=[result], time=now_iso()),
    ]
    request = ModelRequest(model="", system="s", messages=chat, tools=[], reasoning="high")
    async with open_fake_server() as server:
        server.queue(Reply(chunks=[fx.ANTHROPIC_FULL]))
        provider = AnthropicProvider("claude-sonnet-4-5", server.url, "k", settings=ONCE)
        with trio.fail_after(10):
            async with aclosing(provider.stream(request)) as events:  # type: ignore[type-var]
                async for _ in events:
                    pass
        await provider.aclose()
    assert not server.refused, server.refused
    assert "thinking" not in server.last.body


def fx_text(index: int, text: str) -> list[dict[str, Any]]:
    return [fx.an_block(index), fx.an_text(index, text), fx.an_stop(index)]


# -- end to end: corral rpc against the doubles --------------------------------------------


def _anthropic_turns(request: Recorded) -> Reply:
    """``go`` gets thinking and a tool call; anything else thinking and an answer."""
    last = request.body["messages"][-1]["content"][-1]
    if last.get("text") == "go":
        return Reply(
            chunks=[
                fx.anthropic_sse(
                    fx.an_start(),
                    *_an_thinking(0, "I should read the README.", "sig-go"),
                    fx.an_block(1, "tool_use", id="toolu_1", name="read"),
                    fx.an_json(1, json.dumps({"path": "README.md"})),
                    fx.an_stop(1),
                    fx.an_end("tool_use"),
                    fx.AN_DONE,
                )
            ]
        )
    return Reply(
        chunks=[
            fx.anthropic_sse(
                fx.an_start(),
                *_an_thinking(0, "Now I can answer.", "sig-end"),
                fx.an_block(1),
                fx.an_text(1, "Done."),
                fx.an_stop(1),
                fx.an_end("end_turn"),
                fx.AN_DONE,
            )
        ]
    )


def _anthropic_argv(server: FakeServer, *more: str) -> list[str]:
    return [
        "--provider",
        "anthropic",
        "--model",
        "claude-sonnet-4-5",
        "--base-url",
        server.url,
        "--api-key",
        "sk-test",
        *more,
    ]


def _of(frames: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] == kind]


async def test_signed_thinking_goes_back_in_the_tool_use_exchange(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "README.md").write_text("hello\n")
    with trio.fail_after(TIMEOUT):
        async with open_fake_server() as server:
            server.responder = _anthropic_turns
            argv = _anthropic_argv(server, "--reasoning", "medium")
            async with open_rpc(tmp_path, None, *argv) as rpc:
                await rpc.send({"id": 1, "type": "prompt", "message": "go"})
                frames = await rpc.until_done()
                messages = (await rpc.call("get_messages"))["data"]["messages"]
    assert not server.refused, server.refused
    first, second = (r.body for r in server.requests if r.method == "POST")
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    # The assistant message goes back starting with its thinking block, signature intact.
    assistant = second["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "I should read the README.",
        "signature": "sig-go",
    }
    assert assistant["content"][1]["type"] == "tool_use"
    # Over the wire: thinking as its own event, never in the answer or its text blocks.
    thought = "".join(f["delta"] for f in _of(frames, "thinking_delta"))
    assert thought == "I should read the README.Now I can answer."
    assert "".join(f["delta"] for f in _of(frames, "text_delta")) == "Done."
    for event in _of(frames, "assistant_message"):
        assert "README.Now" not in json.dumps(event["content"])
        assert "answer." not in json.dumps(event["content"])
    last = messages[-1]
    assert last["content"] == [{"type": "text", "text": "Done."}]
    assert last["thinking"] == [{"type": "thinking", "text": "Now I can answer."}]  # no signature


async def test_reasoning_changes_per_prompt_and_for_the_session(tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_fake_server() as server:
            server.responder = _anthropic_turns
            async with open_rpc(tmp_path, None, *_anthropic_argv(server)) as rpc:
                assert "reasoning" not in (await rpc.call("get_state"))["data"]
                for frame in (
                    {"type": "prompt", "message": "a"},
                    {"type": "prompt", "message": "b", "reasoning": "high"},
                    {"type": "prompt", "message": "c"},
                ):
                    await rpc.send(frame)
                    await rpc.until_done()
                answer = await rpc.call("set_reasoning", level="low")
                assert answer["data"] == {"reasoning": "low"}
                await rpc.send({"type": "prompt", "message": "d"})
                await rpc.until_done()
                await rpc.send({"type": "prompt", "message": "e", "reasoning": "off"})
                await rpc.until_done()
                assert (await rpc.call("get_state"))["data"]["reasoning"] == "low"
                bad = await rpc.call("set_reasoning", level="extreme")
                assert bad["success"] is False
                assert "extreme" in bad["error"]
    assert not server.refused, server.refused
    budgets = [r.body.get("thinking", {}).get("budget_tokens") for r in server.requests]
    assert budgets == [None, 24576, None, 2048, None]


def test_refused_at_start_for_a_model_that_cannot_reason(home: Path, work: Path) -> None:
    # run and rpc exit 1 with the reason, before any request; the base URL is a
    # closed loopback port, so nothing could leave the machine even if one were made.
    for command in ("run", "rpc"):
        argv = [command, "--no-extensions", "--sandbox", "off", "--provider", "openai"]
        argv += ["--base-url", "http://127.0.0.1:9/v1"]
        argv += ["--model", "gpt-4o", "--api-key", "k", "--reasoning", "high"]
        argv += ["--cwd", str(work)]
        result = CliRunner().invoke(main, [*argv, *(["hi"] if command == "run" else [])])
        assert result.exit_code == 1, result.output
        assert "'gpt-4o' (openai) does not support reasoning" in result.output


async def test_refused_over_rpc_for_a_model_that_cannot_reason(tmp_path: Path) -> None:
    # Over RPC: per prompt, for the session, and by switching model under a level.
    with trio.fail_after(TIMEOUT):
        async with open_fake_server() as server:
            server.responder = _anthropic_turns
            argv = [*_anthropic_argv(server), "--reasoning", "low"]
            async with open_rpc(tmp_path, None, *argv) as rpc:
                moved = await rpc.call("set_model", model="claude-3-5-haiku")
                assert moved["success"] is False
                assert "does not support reasoning" in moved["error"]
                assert (await rpc.call("set_reasoning", level="off"))["success"] is True
                assert (await rpc.call("set_model", model="claude-3-5-haiku"))["success"] is True
                refused = await rpc.call("set_reasoning", level="medium")
                assert refused["success"] is False
                assert (
                    "'claude-3-5-haiku' (anthropic) does not support reasoning"
                    in (refused["error"])
                )
                prompt = await rpc.call("prompt", message="x", reasoning="high")
                assert prompt["success"] is False
                assert "does not support reasoning" in prompt["error"]
                assert (await rpc.call("get_state"))["data"]["busy"] is False
    assert server.requests == []


async def test_scripted_thinking_over_rpc(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"thinking": "The user greets me.", "text": "Hello!"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, "--reasoning", "high") as rpc:
            await rpc.send({"type": "prompt", "message": "hi"})
            frames = await rpc.until_done()
    kinds = [f["type"] for f in frames]
    assert kinds.index("thinking_delta") < kinds.index("text_delta")
    assert "".join(f["delta"] for f in _of(frames, "thinking_delta")) == "The user greets me."
    assert "".join(f["delta"] for f in _of(frames, "text_delta")) == "Hello!"


def test_run_and_chat_show_thinking_apart(home: Path, work: Path) -> None:
    base = ["--cwd", str(work), "--no-extensions", "--sandbox", "off", "--reasoning", "low"]
    run = CliRunner().invoke(main, ["run", *base, "hello"], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    assert "needs a tool" not in run.stdout  # stdout is the answer alone
    assert run.stdout.startswith("Hello!")
    # chat: set by /reasoning; the thought is shown (dimmed) before the answer.
    lines = "hello\n/reasoning\n/reasoning low\nhello\n/reasoning extreme\n"
    chat = CliRunner().invoke(main, ["chat", *base[:-2]], input=lines, catch_exceptions=False)
    assert chat.exit_code == 0, chat.output
    out = chat.stdout
    thought = "┊ Nothing here needs a tool; I will answer directly."
    assert out.count(thought) == 1
    assert "reasoning: the provider default" in out
    assert "reasoning: low" in out
    assert out.index("reasoning: low") < out.index(thought) < out.rindex("Hello!")
    assert "! /reasoning: unknown reasoning level 'extreme'" in out


def test_run_on_a_terminal_shows_thinking_among_the_notes(home: Path, work: Path) -> None:
    code = "import sys; from agent._cli.main import main; sys.exit(main())"
    answer = work / "answer.txt"
    shell = (
        f"{sys.executable} -c {code!r} run --no-extensions --sandbox off --reasoning low "
        f"hello > {answer}"
    )
    env = {**os.environ, "CORRAL_HOME": str(home), "PYTHONPATH": str(REPO), "TERM": "xterm"}
    status, shown = run_on_pty(shell, cwd=str(work), env=env, rows=40, cols=100, wait=30)
    assert status == 0
    assert any(line.startswith("┊ Nothing here needs a tool; I will answer") for line in shown)
    text = answer.read_text()
    assert text.startswith("Hello!")  # the answer alone
    assert "┊" not in text
    assert "needs a tool" not in text
