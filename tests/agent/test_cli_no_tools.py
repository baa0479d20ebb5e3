"""``--no-tools`` (seeds/rpc.md) on ``run``, ``chat`` and ``rpc``: no built-in tool is
offered, as with ``--tools ""``, which keeps working; extension tools stay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from click.testing import CliRunner, Result
from helpers.paths import EXAMPLES
from helpers.rpc_harness import open_rpc, write_script

from agent._cli.main import main

pytestmark = pytest.mark.usefixtures("no_leaks")

WEATHER = str(EXAMPLES / "weather")


def corral(*args: str, work: Path, stdin: str | None = None) -> Result:
    argv = [args[0], "--cwd", str(work), "--no-extensions", "--sandbox", "off", *args[1:]]
    return CliRunner().invoke(main, argv, input=stdin, catch_exceptions=False)


def _offered(result: Result) -> list[dict[str, object]]:
    events = [json.loads(line) for line in result.stdout.splitlines()]
    return [e for e in events if e["type"] == "tool_call"]


@pytest.mark.parametrize("flags", [["--no-tools"], ["--tools", ""]])
def test_run_without_builtin_tools_calls_none(home: Path, work: Path, flags: list[str]) -> None:
    result = corral("run", *flags, "--json", "run `echo hi`", work=work)
    assert result.exit_code == 0, result.output
    assert _offered(result) == []
    # The offline model says which tools it sees: none.
    text = "".join(
        json.loads(line).get("delta", "")
        for line in result.stdout.splitlines()
        if '"text_delta"' in line
    )
    assert "none" in text
    # The same prompt with the defaults does call bash (the test can fail).
    with_tools = corral("run", "--json", "run `echo hi`", work=work)
    assert [c["name"] for c in _offered(with_tools)] == ["bash"]


def test_no_tools_keeps_extension_tools(home: Path, work: Path) -> None:
    result = corral("run", "--no-tools", "-e", WEATHER, "--json", "weather in Berlin", work=work)
    assert result.exit_code == 0, result.output
    assert [c["name"] for c in _offered(result)] == ["weather"]


def test_no_tools_with_a_tool_list_is_a_usage_error(home: Path, work: Path) -> None:
    result = corral("run", "--no-tools", "--tools", "read", "hi", work=work)
    assert result.exit_code == 2
    assert "--no-tools and --tools read contradict each other" in result.output


def test_chat_accepts_no_tools(home: Path, work: Path) -> None:
    result = corral("chat", "--no-tools", work=work, stdin="run `echo hi`\n")
    assert result.exit_code == 0, result.output
    assert "→ bash" not in result.output
    assert "none" in result.stdout


async def test_rpc_no_tools_offers_no_builtin(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "unused"})
    with trio.fail_after(30):
        async with open_rpc(tmp_path, script, "--no-tools") as rpc:
            assert (await rpc.call("get_tools"))["data"]["tools"] == []
        async with open_rpc(tmp_path, script, "--tools", "") as rpc:
            assert (await rpc.call("get_tools"))["data"]["tools"] == []
        async with open_rpc(tmp_path, script) as rpc:
            tools = (await rpc.call("get_tools"))["data"]["tools"]
            assert [t["name"] for t in tools] == ["read", "write", "edit", "bash"]
