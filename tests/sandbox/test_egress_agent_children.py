"""The agent's own children with a network list: the ``bash`` tool and dynamic tools.

Real bwrap, real programs: ``curl`` (which honours ``http_proxy``) in the shell,
``urllib`` in a dynamic tool. The granted loopback port is reached through corral's
egress proxy, another is refused with a 403 naming the setting or capability to
change, a client that ignores the proxy variables has no network at all, and every
refusal is reported (the audit log's way in). Nothing is left running or open.
As root and, in CI's second pass, as an unprivileged user.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from helpers.egresskit import open_origin, table_resolver
from helpers.procs import descendants, lasting

import sandbox
from agent._messages import TextContent
from agent._tools.base import ToolRunResult
from agent._tools.bash import BashTool
from agent._tools.confine import Workspace
from agent._tools.dynamic import DraftRejected, DynamicTools, ToolDraft, dynamic_tools
from sandbox import AddressPolicy, Allowance
from supervisor import EgressRefused, NetGuard

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend")

CYCLE = 90.0


@pytest.fixture
def base() -> Iterator[Path]:
    # Not /tmp: the children have a private /tmp.
    where = Path(tempfile.mkdtemp(prefix="corral-egress-", dir="/var/tmp"))
    (where / "project").mkdir()
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _bwrap() -> sandbox.Sandbox:
    backend = sandbox.select_sandbox("auto")
    if backend.backend != "bwrap":
        pytest.skip("no bwrap backend here")
    return backend


def _text(result: ToolRunResult) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, TextContent))


async def _nothing(text: str) -> None:
    pass


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_bash_reaches_its_granted_port_through_the_proxy_and_nothing_else(
    base: Path,
) -> None:
    reports: list[EgressRefused] = []

    async def report(event: EgressRefused) -> None:
        reports.append(event)

    sandbox.start_guardian()  # its socket lives as long as this process
    before = {p.pid for p in descendants()}
    fds = set(os.listdir("/proc/self/fd"))
    with trio.fail_after(CYCLE):
        async with open_origin() as granted, open_origin() as other:
            ws = Workspace(str(base / "project"), corral_home=str(base / "corral"))
            bash = BashTool(
                ws,
                sandbox=_bwrap(),
                network=[f"127.0.0.1:{granted.port}"],
                report=report,
                default_timeout=30,
            )
            assert f"only TCP to 127.0.0.1:{granted.port}" in bash.spec.description

            async def run(command: str) -> str:
                return _text(await bash.run("c1", {"command": command}, _nothing))

            ok = await run(f"curl -sS {granted.url}/x")
            refused = await run(f"curl -sS {other.url}/x; echo; echo rc=$?")
            direct = await run(f"curl -sS --noproxy '*' {granted.url}/x; echo rc=$?")
    assert ok == "hello from /x"
    assert f'add "127.0.0.1:{other.port}" to the bash tool\'s network setting' in refused
    assert "(--bash-network)" in refused
    assert "Failed to connect" in direct or "Couldn't connect" in direct, direct
    assert [r.extension for r in reports] == ["bash"]
    assert reports[0].destination == f"127.0.0.1:{other.port}"
    assert other.heads == []
    assert lasting(before) == []
    assert set(os.listdir("/proc/self/fd")) <= fds


FETCH = """\
import urllib.error, urllib.request
try:
    with urllib.request.urlopen(args["url"], timeout=20) as r:
        return f"{r.status} {r.read().decode()}"
except urllib.error.HTTPError as e:
    return f"{e.code} {e.read().decode()}"
except OSError as e:
    return f"error {type(e).__name__}"
"""


def _dynamic(base: Path, guard: NetGuard, reports: list[EgressRefused]) -> DynamicTools:
    tools = dynamic_tools(base / "home", sandbox=_bwrap(), require_sandbox=True, guard=guard)

    async def report(event: EgressRefused) -> None:
        reports.append(event)

    tools.runner._report = report  # as the audit log would be told
    return tools


async def test_a_dynamic_tool_reaches_only_what_it_asked_for(base: Path) -> None:
    reports: list[EgressRefused] = []
    with trio.fail_after(CYCLE):
        async with open_origin() as granted, open_origin() as other:
            # The test seam: api.test and other.test resolve to the loopback, and the
            # guard's policy lets exactly the granted port be reached (a user's
            # allowance, never the model's).
            resolver = table_resolver({"api.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
            net = ipaddress.ip_network("127.0.0.1/32")
            policy = AddressPolicy([Allowance(net, granted.port), Allowance(net, other.port)])
            tools = _dynamic(base, NetGuard(policy, resolver), reports)
            await tools.sync()
            params = {"type": "object", "properties": {"url": {"type": "string"}}}
            draft = ToolDraft(
                name="fetch",
                description="Fetch a URL.",
                parameters=params,
                code=FETCH,
                network=[f"API.test:{granted.port}"],
            )
            tool = await tools.create(draft)
            assert tool.draft.network == [f"api.test:{granted.port}"]
            offline = await tools.create(
                ToolDraft(name="offline", description="No net.", parameters=params, code=FETCH)
            )

            async def call(which: object, url: str) -> str:
                result = await which.run("c1", {"url": url}, _nothing)  # type: ignore[attr-defined]
                return _text(result)

            ok = await call(tool, f"http://api.test:{granted.port}/x")
            refused = await call(tool, f"http://other.test:{other.port}/x")
            none = await call(offline, f"http://api.test:{granted.port}/x")
    assert ok == "200 hello from /x"
    assert refused.startswith("403 ")
    assert "the network of dynamic tool fetch (new_tool's network argument)" in refused
    assert none == "error URLError"  # no proxy, no network: nothing to reach
    assert [r.extension for r in reports] == ["dyn-fetch"]
    assert len(granted.heads) == 1
    assert other.heads == []


@pytest.mark.parametrize(
    "entry", ["127.0.0.1:8080", "10.0.0.1", "[::1]:80", "https://x.example", "localhost"]
)
async def test_the_model_cannot_grant_a_tool_this_machine_or_its_network(
    base: Path, entry: str
) -> None:
    tools = _dynamic(base, NetGuard(), [])
    draft = ToolDraft(
        name="t", description="d.", parameters={"type": "object"}, code="return 1", network=[entry]
    )
    with pytest.raises(DraftRejected) as caught:
        await tools.create(draft)
    assert caught.value.field == "network[0]"
    assert tools.tools() == []
