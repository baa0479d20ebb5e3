"""Declared MCP servers: the ``mcpServers`` files, project trust, session start, the CLI.

A cloned repository must not start a server by shipping ``.corral/mcp.json``: a
project server starts only once the user trusted its entry as written, and asks
again when the entry changes. The user's own ``$CORRAL_HOME/mcp.json`` is theirs
(refused if others may write it). Servers declared and trusted start with the
session, and their tools carry the server's name as source; the agent's own
``mcp_connect`` goes through the loop like any other tool.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from click.testing import CliRunner
from helpers.agentkit import options, results_by_id, script
from helpers.mcpkit import stdio_entry

from agent import open_runtime
from agent._cli.main import main
from agent._tools.mcp import (
    McpConfigError,
    McpTrust,
    Origin,
    credential_headers,
    declared_servers,
    load_config,
    project_config_path,
    user_config_path,
)
from agent._tools.mcp.config import expanded
from supervisor import ManifestError
from supervisor.lowlevel import mcp_server_spec

TIMEOUT = 60


def _write(path: Path, servers: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": servers}))
    path.chmod(0o644)
    return path


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"command": "/bin/true", "url": "https://x.test/mcp"}, "not both"),
        ({"args": ["x"]}, "give command"),
        ({"url": "https://x.test/sse", "type": "sse"}, "SSE transport is not supported"),
        ({"command": "/bin/true", "type": "http"}, "does not match the stdio entry"),
        ({"command": "/bin/true", "args": ["a\x00b"]}, "NUL"),
        ({"command": 3}, "Expected `str | null`"),
        ({"command": "/bin/true", "permissions": {"network": "yes"}}, "network"),
    ],
)
def test_a_malformed_entry_names_the_file_and_server_and_spares_the_others(
    tmp_path: Path, entry: dict[str, Any], why: str
) -> None:
    path = _write(tmp_path / "mcp.json", {"files": entry, "good": {"command": "/bin/true"}})
    decls, (problem,) = load_config(path, Origin.USER)
    assert [d.name for d in decls] == ["good"]
    assert why in str(problem)
    assert str(path) in str(problem)
    assert problem.server == "files" or "server name" in str(problem)


def test_the_file_shape_mcp_users_know(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "mcp.json",
        {
            "files": {"command": "/usr/bin/node", "args": ["/opt/files.js"], "env": {"A": "1"}},
            "docs": {"url": "https://mcp.example.com/mcp", "headers": {"X-Key": "${DOCS_KEY}"}},
            "old": {"command": "/bin/true", "disabled": True},
            "extra": {"command": "/bin/true", "someOtherClientsField": {"x": 1}},
        },
    )
    decls, problems = load_config(path, Origin.USER)
    assert problems == []
    assert [d.name for d in decls] == ["files", "docs", "extra"]
    assert [d.config.transport.value for d in decls] == ["stdio", "http", "stdio"]
    docs = expanded(decls[1], {"DOCS_KEY": "k1"})
    assert docs.headers == {"X-Key": "k1"}
    with pytest.raises(McpConfigError, match=r"server docs: \$\{DOCS_KEY\} is not set"):
        expanded(decls[1], {})
    assert credential_headers({"X-Key": "", "Accept": "", "Cookie": "", "X-Session-Id": ""}) == [
        "X-Key",
        "Cookie",
        "X-Session-Id",
    ]


def test_bad_names_and_unsafe_files_are_refused(tmp_path: Path) -> None:
    evil = {"mcp:evil": {"command": "/bin/true"}, "bad\x1b]0;T\x07": {"command": "/bin/true"}}
    decls, problems = load_config(_write(tmp_path / "a.json", evil), Origin.USER)
    assert decls == []
    assert "server name 'mcp:evil'" in str(problems[0])
    assert "server name 'bad\\x1b]0;T\\x07'" in str(problems[1])  # shown escaped
    shared = _write(tmp_path / "b.json", {"ok": {"command": "/bin/true"}})
    shared.chmod(0o666)
    with pytest.raises(McpConfigError, match="others may write it"):
        load_config(shared, Origin.USER)
    (tmp_path / "c.json").write_text("{not json")
    with pytest.raises(McpConfigError, match="not a valid mcpServers file"):
        load_config(tmp_path / "c.json", Origin.USER)
    assert load_config(tmp_path / "missing.json", Origin.USER) == ([], [])


def test_a_project_server_needs_trust_and_asks_again_when_changed(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "repo"
    _write(user_config_path(home), {"shared": {"command": "/bin/true"}})
    entry = {"command": "/bin/true", "args": ["--serve"]}
    _write(project_config_path(project), {"tool": entry, "shared": {"command": "/bin/false"}})
    trust = McpTrust(home)
    chosen, problems = declared_servers(home, project, trust)
    assert [(d.name, d.origin) for d in chosen] == [("shared", Origin.USER)]
    assert any("user's server of that name wins" in p for p in problems)
    (why,) = [p for p in problems if "tool" in p and "trust" in p]
    assert "is not trusted" in why
    assert why.endswith("corral tools mcp trust tool")

    (decl,) = [
        d for d in load_config(project_config_path(project), Origin.PROJECT)[0] if d.name == "tool"
    ]
    trust.trust(decl)
    assert os.stat(trust.path).st_mode & 0o077 == 0
    chosen, _ = declared_servers(home, project, trust)
    assert [d.name for d in chosen] == ["shared", "tool"]

    # The repository changes the entry: it asks again.
    _write(project_config_path(project), {"tool": {**entry, "args": ["--evil"]}})
    chosen, problems = declared_servers(home, project, trust)
    assert [d.name for d in chosen] == ["shared"]
    (why,) = problems
    assert "changed since it was trusted" in why
    # The same file in another checkout is another project: not trusted there.
    other = tmp_path / "clone"
    _write(project_config_path(other), {"tool": entry})
    assert [d.name for d in declared_servers(home, other, trust)[0]] == ["shared"]


@pytest.mark.slow
@pytest.mark.usefixtures("no_leaks")
@pytest.mark.skipif(sys.platform != "linux", reason="pidfd")
async def test_declared_servers_start_with_the_session(
    home: Path, work: Path, tmp_path: Path
) -> None:
    _write(user_config_path(home), {"fx": stdio_entry()})
    _write(project_config_path(work), {"repo": stdio_entry("--name", "repo")})
    call = {"name": "echo", "args": {"text": "hi"}, "id": "e1"}
    opts = options(
        home,
        work,
        provider="scripted",
        script=script(tmp_path, {"tool_calls": [call]}, {"text": "ok"}),
    )
    with trio.fail_after(TIMEOUT):
        async with open_runtime(opts) as rt:
            assert rt.tool_sources()["echo"] == "mcp:fx"
            assert rt.host.mcp is not None
            assert [s.name for s in rt.host.mcp.servers()] == ["fx"]
            (problem,) = rt.host.mcp_problems
            assert "project MCP server repo" in problem
            assert "corral tools mcp trust repo" in problem
            results = results_by_id(await rt.prompt("say hi").collect())
            assert results["e1"] == (False, "echo: hi")
            # The agent's own mcp_* tools stay off unless asked for.
            assert "mcp_connect" not in rt.tool_sources()

    def cli(*args: str) -> str:  # a command of its own: it runs trio itself
        done = CliRunner().invoke(main, ["tools", "mcp", *args, "--cwd", str(work)])
        assert done.exit_code == 0, done.output
        return done.output

    assert "trusted repo" in await trio.to_thread.run_sync(cli, "trust", "-y", "repo")
    listed = (await trio.to_thread.run_sync(cli, "list")).splitlines()
    assert [r.split()[:3] for r in listed if r.startswith("repo ")] == [
        ["repo", "project", "starts"]
    ]
    with trio.fail_after(TIMEOUT):
        async with open_runtime(opts) as rt:
            assert rt.host.mcp is not None
            assert [s.name for s in rt.host.mcp.servers()] == ["fx", "repo"]
            assert rt.host.mcp_problems == []
            # The second server's echo is skipped: the first one's holds the name.
            (repo,) = [s for s in rt.host.mcp.servers() if s.name == "repo"]
            assert "echo: the name is taken (mcp:fx)" in repo.skipped
        async with open_runtime(
            options(home, work, provider="scripted", script=opts.script, mcp_servers=False)
        ) as rt:
            assert rt.host.mcp is None
            assert "echo" not in rt.tool_sources()


@pytest.mark.slow
@pytest.mark.usefixtures("no_leaks")
@pytest.mark.skipif(sys.platform != "linux", reason="pidfd")
async def test_the_agent_connects_uses_lists_and_disconnects_a_server(
    home: Path, work: Path, tmp_path: Path
) -> None:
    entry = stdio_entry()
    connect = {
        "name": "fx",
        "command": entry["command"],
        "args": entry["args"],
        "env": entry["env"],
        "read_only": entry["permissions"]["read_only"],  # type: ignore[index]
    }
    turns = [
        {"tool_calls": [{"name": "mcp_connect", "args": connect, "id": "c1"}]},
        {"tool_calls": [{"name": "add", "args": {"a": 1, "b": 2}, "id": "a1"}]},
        {"tool_calls": [{"name": "mcp_list", "args": {}, "id": "l1"}]},
        {"tool_calls": [{"name": "mcp_disconnect", "args": {"name": "fx"}, "id": "d1"}]},
        {"tool_calls": [{"name": "add", "args": {"a": 1, "b": 2}, "id": "a2"}]},
        {"text": "done"},
    ]
    opts = options(home, work, provider="scripted", script=script(tmp_path, *turns), tools=["+mcp"])
    with trio.fail_after(TIMEOUT):
        async with open_runtime(opts) as rt:
            results = results_by_id(await rt.prompt("use a server").collect())
    assert results["c1"][0] is False, results
    assert "fx (stdio, agent): ready" in results["c1"][1]
    assert results["a1"] == (False, "3")
    assert "tools (6 of 6 offered): echo, add, slow, crash, image, whoami" in results["l1"][1]
    assert results["d1"][0] is False
    assert results["a2"][0] is True
    assert "unknown tool" in results["a2"][1].lower()


def test_an_entry_grants_network_by_name_and_a_bad_destination_is_named(tmp_path: Path) -> None:
    entry = {"command": "/bin/true", "permissions": {"network": ["api.github.com", "10.0.0.1"]}}
    path = _write(tmp_path / "mcp.json", {"gh": entry})
    (decl,), problems = load_config(path, Origin.USER)
    assert problems == []
    assert decl.config.permissions.network == ["api.github.com", "10.0.0.1"]
    with pytest.raises(ManifestError) as caught:
        mcp_server_spec(
            "gh",
            ["/bin/true"],
            env={},
            permissions=decl.config.permissions,
            identity="gh-test",
            home=str(tmp_path / "home"),
        )
    assert caught.value.field == "permissions.network[1]"
    assert "private address" in caught.value.message
    granted = msgspec.structs.replace(decl.config.permissions, unsafe=["10.0.0.1"])
    spec = mcp_server_spec(
        "gh", ["/bin/true"], env={}, permissions=granted, identity="gh-test",
        home=str(tmp_path / "home"),
    )  # fmt: skip
    assert spec.manifest.permissions.destinations == ["api.github.com", "10.0.0.1"]
