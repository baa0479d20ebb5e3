"""The web tools through the real entry points: ``corral run``, ``corral rpc``, the API.

They are off unless enabled; enabled, the scripted model calls ``web_fetch`` on a
loopback page (reachable only through the explicit ``--web-allow``) and the result
reaches the transcript.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from helpers.agentkit import options, script
from helpers.paths import REPO
from helpers.rpc_harness import open_rpc, write_script
from web_fakes import TIMEOUT, Page, Site, open_site

from agent import BUILTIN_TOOLS, TextContent, ToolResultEvent, WebConfig, open_runtime

pytestmark = pytest.mark.usefixtures("no_leaks")

ARTICLE = """<html><head><title>Tide tables</title></head><body><nav>Home | About</nav>
<article><h1>Tide tables</h1><p>High water at the harbour mouth is at 06:12 and 18:40 today.
The spring tide peaks on Thursday with a range of 4.1 metres.</p></article>
<footer>Copyright</footer></body></html>"""


@pytest.fixture
def site() -> Iterator[Site]:
    with open_site() as s:
        s.routes["/tides"] = Page(body=ARTICLE)
        yield s


def corral(args: list[str], home: Path, work: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update({"CORRAL_HOME": str(home), "PYTHONPATH": str(REPO)})
    code = "import sys; from agent._cli.main import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        timeout=TIMEOUT,
    )


def fetch_script(tmp_path: Path, url: str) -> str:
    call = {"name": "web_fetch", "args": {"url": url, "render": "never"}, "id": "w1"}
    return script(tmp_path, {"tool_calls": [call]}, {"text": "Read the page."})


def tool_results(stdout: str) -> list[dict[str, object]]:
    events = [json.loads(line) for line in stdout.splitlines()]
    return [e for e in events if e["type"] == "tool_result"]


def test_run_fetches_a_loopback_page_with_the_allowance(
    home: Path, work: Path, tmp_path: Path, site: Site
) -> None:
    path = fetch_script(tmp_path, site.url("/tides"))
    base = ["run", "--no-extensions", "--sandbox", "off", "--script", path, "--json"]
    allowed = corral(
        [*base, "--tools", "+web", "--web-allow", site.allowance, "tides?"], home, work
    )
    assert allowed.returncode == 0, allowed.stderr
    (result,) = tool_results(allowed.stdout)
    assert result["is_error"] is False
    (block,) = result["content"]  # type: ignore[misc]
    assert "High water at the harbour mouth is at 06:12" in block["text"]
    assert "Title: Tide tables" in block["text"]
    assert site.paths() == ["/tides"]

    refused = corral([*base, "--tools", "+web", "tides?"], home, work)
    (result,) = tool_results(refused.stdout)
    assert result["is_error"] is True
    assert "loopback" in json.dumps(result["content"])
    assert site.paths() == ["/tides"]

    off = corral([*base, "tides?"], home, work)
    (result,) = tool_results(off.stdout)
    assert result["is_error"] is True
    assert "web_fetch" in json.dumps(result["content"])  # unknown tool: not enabled
    assert site.paths() == ["/tides"]


def test_bad_web_settings_are_one_clear_line(home: Path, work: Path, tmp_path: Path) -> None:
    path = fetch_script(tmp_path, "http://example.invalid/")
    bad = corral(["run", "--script", path, "--web-allow", "intranet", "x"], home, work)
    assert bad.returncode != 0
    assert "'intranet' is not an address or network" in bad.stderr
    assert "Traceback" not in bad.stderr


async def test_rpc_lists_the_web_tools_only_when_enabled(tmp_path: Path) -> None:
    script_path = write_script(tmp_path, {"text": "unused"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script_path) as rpc:
            tools = (await rpc.call("get_tools"))["data"]["tools"]
            assert [t["name"] for t in tools] == list(BUILTIN_TOOLS)
        async with open_rpc(tmp_path, script_path, "--tools", "+web") as rpc:
            tools = (await rpc.call("get_tools"))["data"]["tools"]
            assert [t["name"] for t in tools] == [*BUILTIN_TOOLS, "web_fetch", "web_search"]
            by_name = {t["name"]: t for t in tools}
            assert by_name["web_fetch"]["source"] == "builtin"
            assert by_name["web_fetch"]["schema"]["required"] == ["url"]
            assert by_name["web_search"]["schema"]["required"] == ["query"]


async def test_the_api_takes_the_tools_and_their_settings(
    home: Path, work: Path, tmp_path: Path, site: Site
) -> None:
    call = {"name": "web_fetch", "args": {"url": site.url("/tides"), "render": "never"}}
    opts = options(
        home,
        work,
        sandbox="off",
        provider="scripted",
        script=script(tmp_path, {"tool_calls": [call]}, {"text": "done"}),
        tools=["web_fetch"],
        web=WebConfig(allow=[site.allowance], chromium="off"),
    )
    with trio.fail_after(TIMEOUT):
        async with open_runtime(opts) as rt:
            assert [t.name for t in rt.tools()] == ["web_fetch"]
            events = await rt.prompt("tides?").collect()
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert not result.is_error
    (block,) = result.content
    assert isinstance(block, TextContent)
    assert "The spring tide peaks on Thursday" in block.text
