"""Model calls that retry, report what came back, pick real model names, and check keys first.

The HTTP tests talk to the local fake server (tests/helpers/http_fakes.py); the CLI ones
run ``corral`` as a real subprocess against it.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import aclosing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.agentkit import probe
from helpers.http_fakes import OPENAI_FULL, OPENAI_PARTIAL, FakeServer, Reply, open_fake_server
from helpers.paths import REPO

from agent import AgentOptions, Message, TextContent
from agent._exceptions import AgentError, ProviderError
from agent._host import open_agent
from agent._providers.base import (
    ModelRequest,
    ProviderEvent,
    ProviderRetry,
    ProviderSettings,
    ProviderTextDelta,
)
from agent._providers.openai import OpenAIProvider
from agent._providers.retry import parse_retry_after, retry_delay

FAST = ProviderSettings(retries=4, retry_base=0.01, retry_cap=0.05, retry_max_time=10)


@pytest.fixture(autouse=True)
def _clean_env(clean_http_env: None) -> None:
    """Keys, base URLs and proxies of the developer's shell must not leak in."""


# --- the policy ---------------------------------------------------------------------------


def test_parse_retry_after() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("Wed, 01 Jan 2025 12:00:30 GMT", now=now) == 30.0
    assert parse_retry_after("Wed, 01 Jan 2025 11:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("-3") == 0.0
    for bad in (None, "", "soon", "nan", "inf"):
        assert parse_retry_after(bad) is None


def test_retry_delay_backs_off_with_jitter_within_bounds() -> None:
    s = ProviderSettings(retries=5, retry_base=1.0, retry_cap=8.0, retry_max_time=100)
    low = [
        retry_delay(s, n, retry_after=None, elapsed=0, rng=lambda a, b: a) for n in (1, 2, 3, 4, 5)
    ]
    high = [
        retry_delay(s, n, retry_after=None, elapsed=0, rng=lambda a, b: b) for n in (1, 2, 3, 4, 5)
    ]
    assert low == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert high == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert retry_delay(s, 6, retry_after=None, elapsed=0) is None  # count bound
    assert retry_delay(s, 1, retry_after=None, elapsed=99.9, rng=lambda a, b: b) is None  # time
    assert retry_delay(s, 1, retry_after=20.0, elapsed=0) == 20.0  # the server's word wins
    assert retry_delay(s, 1, retry_after=200.0, elapsed=0) is None  # does not fit: give up


# --- the providers -------------------------------------------------------------------------


def request() -> ModelRequest:
    hi = Message(role="user", content=[TextContent(text="hi")], time="2026-01-01T00:00:00Z")
    return ModelRequest(model="", system="", messages=[hi], tools=[])


async def collect(provider: OpenAIProvider) -> tuple[list[ProviderEvent], ProviderError | None]:
    got: list[ProviderEvent] = []
    with trio.fail_after(20):
        try:
            async with aclosing(provider.stream(request())) as events:  # type: ignore[type-var]
                async for event in events:
                    got.append(event)
        except ProviderError as exc:
            return got, exc
    return got, None


def oa(server: FakeServer, settings: ProviderSettings = FAST) -> OpenAIProvider:
    return OpenAIProvider("m1", f"{server.url}/v1", "sk", settings=settings)


def status(code: int, **headers: str) -> Reply:
    return Reply(status=code, content_type="text/plain", chunks=[b"busy"], headers=headers)


async def test_429_and_5xx_are_retried_then_the_answer_streams() -> None:
    async with open_fake_server() as server:
        server.queue(status(429, **{"retry-after": "0"}), status(500), Reply(chunks=[OPENAI_FULL]))
        async with aclosing(oa(server)) as p:
            got, error = await collect(p)
    assert error is None
    retries = [e for e in got if isinstance(e, ProviderRetry)]
    assert [(r.attempt, r.reason) for r in retries] == [(2, "429"), (3, "500")]
    assert retries[0].delay == 0.0  # Retry-After: 0
    assert 0.005 <= retries[1].delay <= 0.02
    assert ProviderTextDelta(text="ok") in got
    assert len(server.requests) == 3


async def test_retry_after_is_honoured() -> None:
    async with open_fake_server() as server:
        server.queue(status(429, **{"retry-after-ms": "300"}), Reply(chunks=[OPENAI_FULL]))
        async with aclosing(oa(server)) as p:
            started = trio.current_time()
            got, error = await collect(p)
            waited = trio.current_time() - started
    assert error is None
    assert [e.delay for e in got if isinstance(e, ProviderRetry)] == [0.3]
    assert waited >= 0.3


async def test_retries_are_bounded_and_say_so() -> None:
    async with open_fake_server() as server:
        server.queue(*(status(503) for _ in range(3)))
        settings = ProviderSettings(retries=2, retry_base=0.01, retry_cap=0.01)
        async with aclosing(oa(server, settings)) as p:
            got, error = await collect(p)
    assert error is not None
    assert error.status == 503
    assert "gave up after 3 attempts" in str(error)
    assert len(got) == 2
    assert len(server.requests) == 3


async def test_no_retry_once_output_streamed() -> None:
    async with open_fake_server() as server:
        server.queue(Reply(chunks=[OPENAI_PARTIAL], end="break"), Reply(chunks=[OPENAI_FULL]))
        async with aclosing(oa(server)) as p:
            got, error = await collect(p)
    assert error is not None
    assert "stream ended early" in str(error)
    assert got == [ProviderTextDelta(text="Hel")]
    assert len(server.requests) == 1


async def test_connection_failures_are_retried() -> None:
    # A port nobody listens on: every attempt is refused.
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    settings = ProviderSettings(retries=2, retry_base=0.01, retry_cap=0.01)
    async with aclosing(OpenAIProvider("m", f"http://127.0.0.1:{port}/v1", settings=settings)) as p:
        got, error = await collect(p)
    assert error is not None
    assert "cannot connect" in str(error)
    assert [e.attempt for e in got if isinstance(e, ProviderRetry)] == [2, 3]


@pytest.mark.parametrize(
    ("kind", "body", "needle"),
    [
        (
            "text/html",
            b"<html><head><title>Sign in</title></head></html>",
            "an HTML page ('Sign in')",
        ),
        (
            "application/json",
            b'{"error": {"message": "stream not supported"}}',
            "stream not supported",
        ),
    ],
)
async def test_a_200_that_is_not_an_event_stream_is_named(
    kind: str, body: bytes, needle: str
) -> None:
    async with open_fake_server() as server:
        server.queue(Reply(content_type=kind, chunks=[body]))
        async with aclosing(oa(server)) as p:
            got, error = await collect(p)
    assert got == []
    assert error is not None
    assert "answered HTTP 200 with" in str(error)
    assert needle in str(error)
    assert "ended early" not in str(error)


# --- model names and keys, through open_agent ---------------------------------------------------


def agent_opts(tmp_path: Path, server: FakeServer, **kw: Any) -> AgentOptions:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    base: dict[str, Any] = {
        "provider": "openai",
        "base_url": f"{server.url}/v1",
        "home": str(tmp_path / "home"),
        "cwd": str(work),
        "discover": False,
        "sandbox": "off",
    }
    return AgentOptions(**(base | kw))


async def test_custom_server_without_model_asks_models(tmp_path: Path) -> None:
    async with open_fake_server() as server:
        server.models = ["qwen2.5", "llama3.2"]
        server.queue(Reply(chunks=[OPENAI_FULL]))
        with trio.fail_after(20):
            async with open_agent(agent_opts(tmp_path, server)) as host:
                assert host.engine.model == "qwen2.5"
                host.engine.set_model("llama3.2")  # anything the server offers
                with pytest.raises(ValueError, match="unknown model 'gpt-4o'"):
                    host.engine.set_model("gpt-4o")
                await host.engine.prompt("hi", [], _ignore)
        assert server.last.body["model"] == "llama3.2"
        assert [r.path for r in server.requests] == ["/v1/models", "/v1/chat/completions"]


async def _ignore(event: object) -> None:
    pass


async def test_custom_server_model_errors(tmp_path: Path) -> None:
    async with open_fake_server() as server:
        with pytest.raises(
            AgentError, match=r"cannot learn the model from GET .*/v1/models.*--model"
        ):
            async with open_agent(agent_opts(tmp_path, server)):
                pass
        server.models = ["qwen2.5"]
        with pytest.raises(
            AgentError, match=r"model 'gpt-x' is not served by .* \(it lists: qwen2.5\)"
        ):
            async with open_agent(agent_opts(tmp_path, server, model="gpt-x")):
                pass
        server.models = None  # no listing: a configured model is trusted
        async with open_agent(agent_opts(tmp_path, server, model="mine")) as host:
            assert host.engine.model == "mine"


# --- the CLI: retries visible, keys checked first, --base-url means openai ---


async def corral(home: Path, work: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    code = "import sys; from agent._cli.main import main; sys.exit(main())"
    environ = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    environ |= {"CORRAL_HOME": str(home), "PYTHONPATH": str(REPO)} | (env or {})
    environ.pop("OPENAI_API_KEY", None)
    with trio.fail_after(60):
        return await trio.run_process(
            [sys.executable, "-c", code, *args],
            cwd=work,
            env=environ,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


async def test_cli_shows_retries_in_json_and_for_people(home: Path, work: Path) -> None:
    async with open_fake_server() as server:
        server.models = ["m1"]
        server.queue(status(429, **{"retry-after": "0"}), Reply(chunks=[OPENAI_FULL]))
        done = await corral(
            home, work, "run", "--no-extensions", "--base-url", f"{server.url}/v1", "--json", "hi"
        )
        assert done.returncode == 0, done.stderr
        events = [json.loads(line) for line in done.stdout.decode().splitlines()]
        retry = next(e for e in events if e["type"] == "retry")
        assert (retry["attempt"], retry["delay"], retry["reason"]) == (2, 0.0, "429")
        assert "HTTP 429" in retry["error"]
        assert events[-1] == {"type": "done"}
        server.queue(status(503, **{"retry-after": "0"}), Reply(chunks=[OPENAI_FULL]))
        done = await corral(
            home, work, "run", "--no-extensions", "--base-url", f"{server.url}/v1", "hi"
        )
        assert done.returncode == 0, done.stderr
        # stdout is the answer only; the human "↻ retrying" line is for a terminal
        # (the renderer's own tests show it there).
        assert done.stdout.decode() == "ok\n"


async def test_cli_missing_key_is_reported_before_any_extension_starts(
    home: Path, work: Path, ext_dir: Path
) -> None:
    done = await corral(home, work, "run", "--provider", "openai", "-e", probe(ext_dir), "hi")
    assert done.returncode == 1
    assert "no API key" in done.stderr.decode()
    assert not (home / "logs").exists(), "an extension was started before the key check"


async def test_cli_env_settings_and_max_tokens(home: Path, work: Path) -> None:
    async with open_fake_server() as server:
        server.models = ["m1"]
        server.queue(status(500), Reply(chunks=[OPENAI_FULL]))
        env = {"CORRAL_MAX_TOKENS": "77", "CORRAL_RETRIES": "0"}
        done = await corral(
            home, work, "run", "--no-extensions", "--base-url", f"{server.url}/v1", "hi", env=env
        )
        assert done.returncode == 1
        assert done.stdout.decode() == ""
        # stderr is not a terminal: the failure is one structured line.
        assert "HTTP 500" in done.stderr.decode()
        assert len(server.requests) == 2  # /models, then one attempt: no retry
        assert server.last.body["max_tokens"] == 77
