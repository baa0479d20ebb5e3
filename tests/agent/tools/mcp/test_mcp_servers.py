"""MCP connections against real servers written with the SDK: stdio (confined) and HTTP.

Servers: the fixture of ``fixtures/mcp_server.py``; one that crashes mid-call, one
that lists a thousand tools, one whose tool names are corral's built-ins; HTTP on
loopback with an explicit allowance, and host names resolved through a seam to
private addresses (refused before and at dial time). Nothing may outlive a test.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.mcpkit import http_server, stdio_config
from helpers.supkit import wait_for

import sandbox
from agent._messages import ImageContent, TextContent
from agent._providers.base import ToolSpec
from agent._registry import ToolRegistry
from agent._tools.base import ToolKind, ToolRunResult
from agent._tools.mcp import (
    McpError,
    McpLimits,
    McpServers,
    Origin,
    PolicyRefused,
    ServerConfig,
    ServerDecl,
    ServerState,
    SupervisedLauncher,
    open_mcp,
)
from agent._tools.mcp.launcher import server_identity
from agent._tools.web import AddressPolicy, NetGuard, parse_allowance
from supervisor import (
    Quarantined,
    SupervisorClient,
    SupervisorConfig,
    SupervisorError,
    log_file,
    open_supervisor,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bwrap / pidfd")

#: The SDK's streamable-HTTP transport cancels its event-stream reader without
#: closing httpx2's SSE async generators; trio finalises them (and says so with a
#: ResourceWarning). Nothing is left open; the warning is the SDK's, not ours.
sdk_http_generators = pytest.mark.filterwarnings(
    "ignore:Async generator 'httpx2:ResourceWarning",
    "ignore:Exception ignored in. <async_generator object:pytest.PytestUnraisableExceptionWarning",
)


async def _nothing(text: str) -> None:
    pass


def _text(result: ToolRunResult) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, TextContent))


@asynccontextmanager
async def servers(
    tmp_path: Path,
    allow: Sequence[str] = (),
    resolver: Any = None,
    limits: McpLimits | None = None,
) -> AsyncIterator[McpServers]:
    home = tmp_path / "home"
    # Stdio servers are supervised children: a supervisor like a session's.
    config = SupervisorConfig(home=str(home), restart_backoff=0.1, restart_backoff_max=0.5)
    policy = AddressPolicy(parse_allowance(a) for a in allow)
    guard = NetGuard(policy, resolver) if resolver is not None else NetGuard(policy)
    async with (
        open_supervisor(config, discover=False) as client,
        open_mcp(SupervisedLauncher(client, home), guard, limits=limits) as found,
    ):
        yield found


@asynccontextmanager
async def crash_prone(home: Path) -> AsyncIterator[tuple[SupervisorClient, McpServers]]:
    """A supervisor that restarts at once and quarantines at the second crash, and its
    MCP servers."""
    config = SupervisorConfig(
        home=str(home), restart_backoff=0.05, restart_backoff_max=0.1, quarantine_crashes=2
    )
    async with (
        open_supervisor(config, discover=False) as client,
        open_mcp(SupervisedLauncher(client, home), NetGuard(AddressPolicy())) as found,
    ):
        yield client, found


def decl(name: str, config: ServerConfig, origin: Origin = Origin.AGENT) -> ServerDecl:
    return ServerDecl(name=name, config=config, origin=origin)


async def call(found: McpServers, tool: str, args: dict[str, Any]) -> ToolRunResult:
    by_name = {t.spec.name: t for t in found.tools()}
    return await by_name[tool].run("c1", args, _nothing)


@pytest.mark.slow
@pytest.mark.usefixtures("no_leaks")
async def test_a_stdio_server_is_confined_called_and_stopped(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with servers(tmp_path) as found:
            status = await found.connect(decl("fx", stdio_config()))
            assert status.state == "ready"
            assert status.tools == ["echo", "add", "slow", "crash", "image", "whoami"]
            assert status.sandboxed is (sandbox.select_sandbox("auto").backend != "none")
            assert _text(await call(found, "echo", {"text": "hi"})) == "echo: hi"
            assert _text(await call(found, "add", {"a": 2, "b": 40})) == "42"
            image = await call(found, "image", {})
            assert isinstance(image.content[0], ImageContent)
            who = _text(await call(found, "whoami", {}))
            # Its own data directory as cwd and $HOME, and only allowlisted variables.
            assert str(tmp_path / "home" / "mcp") in who
            assert "ANTHROPIC_API_KEY" not in who
            assert "CORRAL_HOME" not in who
            bad = await call(found, "add", {"a": "x"})
            assert bad.is_error
            assert await found.disconnect("fx")
            assert found.tools() == []


@pytest.mark.slow
@pytest.mark.usefixtures("no_leaks")
async def test_a_server_that_dies_fails_pending_calls_at_once_then_restarts(
    tmp_path: Path,
) -> None:
    with trio.fail_after(60):
        async with servers(tmp_path) as found:
            await found.connect(decl("fx", stdio_config()))
            results: dict[str, ToolRunResult] = {}

            async def run(tool: str, args: dict[str, Any]) -> None:
                results[tool] = await call(found, tool, args)

            started = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, "slow", {"seconds": 50})
                await trio.sleep(0.3)
                nursery.start_soon(run, "crash", {})
            # Far sooner than the slow call's 50 s or the 60 s call timeout.
            assert trio.current_time() - started < 10
            for tool in ("slow", "crash"):
                assert results[tool].is_error
                assert "exited (exit status 3); last stderr: crashing on purpose" in _text(
                    results[tool]
                ), _text(results[tool])
            connection = found.connection("fx")
            assert connection is not None
            while connection.state is not ServerState.READY:
                await trio.sleep(0.05)
            assert connection.restarts == 1
            assert _text(await call(found, "echo", {"text": "back"})) == "echo: back"


@pytest.mark.slow
@pytest.mark.usefixtures("no_leaks")
async def test_a_thousand_tools_are_bounded(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with servers(tmp_path) as found:
            status = await found.connect(decl("many", stdio_config("--many", "1000")))
            assert status.offered == 1006
            assert len(status.tools) == found.limits.max_tools == 128
            assert len(found.tools()) == 128
            assert status.skipped[0] == "t122: over the limit of 128 tools"
            assert status.skipped[-1] == "… and 858 more"


@pytest.mark.slow
@pytest.mark.usefixtures("no_leaks")
async def test_a_server_cannot_shadow_built_in_tools(tmp_path: Path) -> None:
    class Builtin:
        def __init__(self, name: str) -> None:
            self.spec = ToolSpec(name=name, description="", schema={"type": "object"})
            self.kind = ToolKind.BUILTIN
            self.owner = ""

        async def run(self, call_id: str, args: dict[str, Any], progress: Any) -> ToolRunResult:
            return ToolRunResult(content=[TextContent(text="the real one")])

    with trio.fail_after(60):
        async with servers(tmp_path) as found:
            registry = ToolRegistry([Builtin("read"), Builtin("bash")], None, [found])
            found.lookup = registry.kinds
            registry.sync()
            status = await found.connect(decl("clash", stdio_config("--clash")))
            assert "read: the name is taken (builtin)" in status.skipped
            assert "bash: the name is taken (builtin)" in status.skipped
            assert "read" not in status.tools
            registry.sync()
            read = registry.get("read")
            assert read is not None
            assert read.kind is ToolKind.BUILTIN
            assert registry.sources()["read"] == "builtin"
            assert registry.kinds()["echo"] is ToolKind.MCP
            assert registry.sources()["echo"] == "mcp:clash"


@sdk_http_generators
@pytest.mark.usefixtures("no_leaks")
async def test_http_on_loopback_needs_an_explicit_allowance(tmp_path: Path) -> None:
    with http_server() as port, trio.fail_after(60):
        url = f"http://127.0.0.1:{port}/mcp"
        async with servers(tmp_path) as found:
            with pytest.raises(PolicyRefused, match=r"blocked 127\.0\.0\.1: loopback"):
                await found.connect(decl("web", ServerConfig(url=url)))
        async with servers(tmp_path, allow=[f"127.0.0.1:{port}"]) as found:
            with pytest.raises(PolicyRefused, match="Authorization would be sent over cleartext"):
                await found.connect(
                    decl("web", ServerConfig(url=url, headers={"Authorization": "Bearer s3cret"}))
                )
            status = await found.connect(decl("web", ServerConfig(url=url)))
            assert status.transport == "http"
            assert _text(await call(found, "add", {"a": 20, "b": 22})) == "42"


async def test_a_name_that_resolves_to_a_private_address_is_refused(tmp_path: Path) -> None:
    async def resolver(host: str, port: int) -> list[Any]:
        return [ipaddress.ip_address("10.20.30.40")]

    with trio.fail_after(30):
        async with servers(tmp_path, resolver=resolver) as found:
            with pytest.raises(
                PolicyRefused, match=r"mcp\.example\.test \(10\.20\.30\.40\): private"
            ):
                await found.connect(decl("web", ServerConfig(url="https://mcp.example.test/mcp")))
            assert found.tools() == []


async def test_a_name_that_rebinds_after_the_preflight_is_refused_at_dial_time(
    tmp_path: Path,
) -> None:
    answers = iter(["93.184.216.34", "127.0.0.1"])  # public for the check, then loopback
    seen: list[str] = []

    async def resolver(host: str, port: int) -> list[Any]:
        address = next(answers, "127.0.0.1")
        seen.append(address)
        return [ipaddress.ip_address(address)]

    with trio.fail_after(30):
        async with servers(tmp_path, resolver=resolver) as found:
            with pytest.raises(
                McpError, match=r"blocked rebind\.example\.test \(127\.0\.0\.1\): loopback"
            ):
                await found.connect(decl("web", ServerConfig(url="http://rebind.example.test/mcp")))
    assert seen[:2] == ["93.184.216.34", "127.0.0.1"]


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("python3", "must be an absolute path"),
        ("/nonexistent/server", "No such file or directory"),
        ("/etc", "not a regular file"),
        ("{plain}", "not executable"),
    ],
)
async def test_a_stdio_command_is_checked_before_anything_starts(
    tmp_path: Path, command: str, why: str
) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("#!/bin/sh\necho hi\n")
    plain.chmod(0o644)
    command = command.format(plain=plain)
    with trio.fail_after(30):
        async with servers(tmp_path) as found:
            with pytest.raises(PolicyRefused, match=why):
                await found.connect(decl("bad", ServerConfig(command=command)))
            status = found.servers()[0]
            assert status.state == "failed"
            assert status.pid is None


@pytest.mark.usefixtures("no_leaks")
async def test_a_server_that_dies_before_it_answers_says_why(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with servers(tmp_path) as found:
            config = ServerConfig(command="/bin/sh", args=["-c", "echo broken >&2; exit 7"])
            with pytest.raises(McpError, match=r"exited \(exit status 7\); last stderr: broken"):
                await found.connect(decl("dead", config))


@pytest.mark.slow
@pytest.mark.usefixtures("no_leaks")
async def test_disconnecting_fails_a_pending_call_at_once(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with servers(tmp_path) as found:
            await found.connect(decl("fx", stdio_config()))
            results: list[ToolRunResult] = []

            async def slow() -> None:
                results.append(await call(found, "slow", {"seconds": 50}))

            started = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(slow)
                await trio.sleep(0.3)
                assert await found.disconnect("fx")
            assert trio.current_time() - started < 10
            (result,) = results
            assert result.is_error
            assert "MCP server fx went away during the call" in _text(result)
            assert found.servers() == []


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize(
    ("line", "why"),
    [
        # Over the connection's own limit: the session ends, the process is ended.
        ("head -c 2097152 /dev/zero | tr '\\0' x; echo", "a line longer than 1048576 bytes"),
        # Over the supervisor's limit (16 MiB): skipped unbuffered, the process killed.
        ("head -c 20971520 /dev/zero | tr '\\0' x; echo", "exceeds the 16777216-byte limit"),
        # Without an end: skipped unbuffered; no answer comes, so the connection gives up.
        ("head -c 67108864 /dev/zero | tr '\\0' x", "no answer to initialize"),
    ],
)
async def test_an_endless_line_ends_the_session_not_the_host(
    tmp_path: Path, line: str, why: str
) -> None:
    config = ServerConfig(command="/bin/sh", args=["-c", f"{line}; exec sleep 300"])
    limits = McpLimits(max_line=1024 * 1024, connect_timeout=3.0)
    with trio.fail_after(60):
        async with servers(tmp_path, limits=limits) as found:
            with pytest.raises(McpError, match=why):
                await found.connect(decl("flood", config))


@pytest.mark.slow
@pytest.mark.usefixtures("no_leaks")
async def test_a_stdio_server_is_a_supervised_child(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with trio.fail_after(60):
        async with crash_prone(home) as (client, found):
            await found.connect(decl("fx", stdio_config()))
            connection = found.connection("fx")
            assert connection is not None
            # Listed like an extension: its kind, its sandbox, its process.
            (info,) = await client.list_extensions()
            assert (info.name, info.kind, info.state) == ("mcp-fx", "mcp-server", "running")
            assert info.pid == connection.pid
            assert info.sandboxed is (sandbox.select_sandbox("auto").backend != "none")
            # `ext enable` is for extensions: a server's retry is connecting it again.
            with pytest.raises(SupervisorError, match="connect it again"):
                await client.enable("mcp-fx")
            # A reload is about extensions: it leaves the server running as it is.
            stats = await client.reload()
            assert (stats.stopped, stats.errors) == (0, [])
            (info,) = await client.list_extensions()
            assert (info.state, info.pid) == ("running", connection.pid)
            # It dies: the supervisor restarts it and the connection lists its tools again.
            assert (await call(found, "crash", {})).is_error
            while connection.state is not ServerState.READY:
                await trio.sleep(0.05)
            assert connection.restarts == 1
            assert _text(await call(found, "echo", {"text": "again"})) == "echo: again"
            # It dies again within the window: quarantined, and the connection says why.
            with client.subscribe() as events:
                assert (await call(found, "crash", {})).is_error
                quarantined = await wait_for(events, Quarantined)
            assert quarantined.extension == "mcp-fx"
            while connection.state is not ServerState.FAILED:
                await trio.sleep(0.05)
            assert "crashed 2 times" in connection.problem
            identity = server_identity("fx", Origin.AGENT.value, "")
            assert "crashing on purpose" in log_file(home, identity).read_text()
            # Given up on, it is no longer supervised (the connection says FAILED first,
            # then leaves the launcher, which stops the child).
            while await client.list_extensions():
                await trio.sleep(0.05)


async def _quarantine(found: McpServers, name: str) -> str:
    """Crash ``name`` until the supervisor gives up on it; its connection's problem."""
    connection = found.connection(name)
    assert connection is not None
    while connection.state is not ServerState.FAILED:
        if connection.state is ServerState.READY:
            assert (await call(found, "crash", {})).is_error
        await trio.sleep(0.05)
    return connection.problem


@pytest.mark.slow
@pytest.mark.usefixtures("no_leaks")
async def test_a_quarantined_server_connects_again_in_this_session_and_the_next(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    with trio.fail_after(60):
        async with crash_prone(home) as (_, found):
            await found.connect(decl("fx", stdio_config()))
            problem = await _quarantine(found, "fx")
            # The advice is what works for a server, not `corral ext enable`.
            assert "connect the server again to try again" in problem, problem
            assert "ext enable" not in problem
            # Connecting again is the retry: a fresh process, its tools again.
            status = await found.connect(decl("fx", stdio_config()))
            assert status.state == ServerState.READY.value
            assert _text(await call(found, "echo", {"text": "back"})) == "echo: back"
            await _quarantine(found, "fx")
        # The next session is not held back by this one's quarantine either.
        async with crash_prone(home) as (_, found):
            await found.connect(decl("fx", stdio_config()))
            assert _text(await call(found, "echo", {"text": "next"})) == "echo: next"
