"""An abort that lands just after the model streamed a tool call (issue 32), end to end.

``corral rpc`` talks to a strict double of the OpenAI or Anthropic API over real
HTTP (it answers 400 to a request the real service would refuse). The model
answers the first prompt with text and a tool call; the probe extension takes its
time over the text (``--slow-text``) and says so first, so the client's ``abort``
lands after the assistant message was complete and before any tool ran: the
window where a transcript used to keep a tool call without a result, and every
later request was refused. Here the call is answered ("aborted"), in memory and in
the session file, the next prompts are accepted, and a new process resuming the
session is accepted too. SIGTERM in the same window ends the process (143) with
the session file answered the same way.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers import http_fakes as fx
from helpers.agentkit import probe
from helpers.cancelkit import written_messages
from helpers.http_fakes import FakeServer, Recorded, Reply, open_fake_server
from helpers.rpc_harness import RpcProcess, open_rpc, rpc_env

from agent._exchanges import tool_call_problems

pytestmark = pytest.mark.usefixtures("no_leaks")

TIMEOUT = 60


def _openai(request: Recorded) -> Reply:
    last = request.body["messages"][-1]
    if last["role"] == "user" and last["content"] == "go":
        call = fx.oa_call(0, json.dumps({"path": "README.md"}), id="call_1", name="read")
        body = fx.openai_sse(fx.oa("Let me look."), fx.oa(calls=[call]), fx.oa(finish="tool_calls"))
    else:
        body = fx.openai_sse(fx.oa("ok"), fx.oa(finish="stop"))
    return Reply(chunks=[body])


def _anthropic(request: Recorded) -> Reply:
    last = request.body["messages"][-1]["content"][-1]
    if last.get("text") == "go":
        body = fx.anthropic_sse(
            fx.an_start(),
            fx.an_block(0),
            fx.an_text(0, "Let me look."),
            fx.an_stop(0),
            fx.an_block(1, "tool_use", id="toolu_1", name="read"),
            fx.an_json(1, json.dumps({"path": "README.md"})),
            fx.an_stop(1),
            fx.an_end("tool_use"),
            fx.AN_DONE,
        )
    else:
        body = fx.ANTHROPIC_FULL
    return Reply(chunks=[body])


API: dict[str, tuple[Callable[[Recorded], Reply], list[str]]] = {
    "openai": (_openai, ["--provider", "openai", "--model", "m1"]),
    "anthropic": (_anthropic, ["--provider", "anthropic", "--model", "claude-sonnet-4-5"]),
}


def _argv(api: str, server: FakeServer) -> list[str]:
    base = f"{server.url}/v1" if api == "openai" else server.url
    return [*API[api][1], "--base-url", base, "--api-key", "sk-test", "--session", "s1"]


async def _prompt(rpc: RpcProcess, text: str) -> list[dict[str, Any]]:
    await rpc.send({"id": text, "type": "prompt", "message": text})
    return await rpc.until_done()


async def _resumed_is_answered(tmp_path: Path, api: str, server: FakeServer) -> None:
    """A new process resuming the session is accepted by the strict API."""
    async with open_rpc(tmp_path, None, *_argv(api, server), env=rpc_env(tmp_path / "home")) as rpc:
        frames = await _prompt(rpc, "resumed")
        assert [f["stop"] for f in frames if f["type"] == "turn_end"] == ["end_turn"]
    assert server.refused == []


@pytest.mark.parametrize("api", sorted(API))
@pytest.mark.slow  # a real corral rpc against a strict HTTP model, per provider
async def test_abort_after_a_streamed_tool_call_leaves_the_session_answerable(
    tmp_path: Path, ext_dir: Path, api: str
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "README.md").write_text("hello\n")
    ext = probe(ext_dir, "--slow-text", "3")
    with trio.fail_after(TIMEOUT):
        async with open_fake_server() as server:
            server.responder = API[api][0]
            async with open_rpc(tmp_path, None, *_argv(api, server), exts=(ext,)) as rpc:
                await rpc.send({"id": "go", "type": "prompt", "message": "go"})
                await rpc.until(lambda f: f.get("type") == "ext_notify")  # in the window
                assert (await rpc.call("abort"))["data"] == {"aborted": True}
                frames = await rpc.until_done()
                ends = [f for f in frames if f["type"] == "turn_end"]
                assert [e["stop"] for e in ends] == ["aborted"]
                messages = (await rpc.call("get_messages"))["data"]["messages"]
                assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
                [result] = messages[2]["content"]
                assert result["is_error"] is True
                assert "aborted" in result["content"][0]["text"]
                for text in ("next", "and again"):
                    frames = await _prompt(rpc, text)
                    assert [f["stop"] for f in frames if f["type"] == "turn_end"] == ["end_turn"]
                assert server.refused == []
            saved = written_messages(tmp_path / "home", "s1")
            assert [m.role for m in saved][:3] == ["user", "assistant", "tool"]
            assert tool_call_problems(saved) == []
            await _resumed_is_answered(tmp_path, api, server)


@pytest.mark.parametrize("api", sorted(API))
async def test_sigterm_after_a_streamed_tool_call_leaves_the_saved_session_answerable(
    tmp_path: Path, ext_dir: Path, api: str
) -> None:
    (tmp_path / "work").mkdir()
    ext = probe(ext_dir, "--slow-text", "3")
    with trio.fail_after(TIMEOUT):
        async with open_fake_server() as server:
            server.responder = API[api][0]
            async with open_rpc(tmp_path, None, *_argv(api, server), exts=(ext,)) as rpc:
                await rpc.send({"id": "go", "type": "prompt", "message": "go"})
                await rpc.until(lambda f: f.get("type") == "ext_notify")
                rpc.proc.send_signal(signal.SIGTERM)
                await rpc.read_all()
                assert await rpc.wait() == 143
            saved = written_messages(tmp_path / "home", "s1")
            assert [m.role for m in saved] == ["user", "assistant", "tool"]
            assert tool_call_problems(saved) == []
            await _resumed_is_answered(tmp_path, api, server)
