"""Supervised children with a network list: extensions, tool hosts and stdio MCP servers.

Each kind runs for real under bwrap (``--sandbox required``) and asks, with the
standard library's ``urllib`` (which honours the proxy variables) or a raw
socket, for loopback origins on the host: the granted port is reached through
corral's egress proxy, another port is refused with a 403 naming the permission,
a direct connection around the proxy finds nothing, and a granted name resolving
to a local address (through the resolver seam) is refused. Refusals reach the
child's log, its stats and the event stream; a stop ends its connections too.
As root and, in CI's second pass, as an unprivileged user.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.egresskit import Origin, open_origin, table_resolver
from helpers.supkit import Kit, require_bwrap, wait_for

from sandbox import Permissions, start_guardian
from supervisor import (
    EgressRefused,
    ExtensionState,
    NetGuard,
    SupervisorClient,
    TextBlock,
    open_supervisor,
)
from supervisor.lowlevel import mcp_server_spec

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend")

#: Bound on one test (bwrap starts, a few requests, a stop) on a loaded box.
CYCLE = 60.0

#: What every kind of child runs: ``answer(words)`` for ``get URL``, ``raw HOST PORT``,
#: ``env``, ``hold HOST PORT`` (a CONNECT tunnel left open).
PROBE = """\
import json, os, socket, urllib.error, urllib.request

HELD = []

def get(url):
    try:
        with urllib.request.urlopen(url, timeout=15) as r:
            return f"{r.status} {r.read().decode()}"
    except urllib.error.HTTPError as e:
        return f"{e.code} {e.read().decode()}"
    except Exception as e:
        return f"error {type(e).__name__}: {e}"

def raw(host, port):
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        return "connected"
    except OSError as e:
        return f"error {type(e).__name__}"

def hold(host, port):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\\r\\n\\r\\nheld".encode())
    HELD.append(s)
    return s.recv(100).decode().split("\\r\\n")[0]

def answer(words):
    if words[0] == "get":
        return get(words[1])
    if words[0] == "raw":
        return raw(words[1], words[2])
    if words[0] == "hold":
        return hold(words[1], words[2])
    return json.dumps({k: v for k, v in os.environ.items() if "proxy" in k.lower()})
"""

EXTENSION = (
    PROBE
    + """
emit({"type": "hello", "name": NAME})
emit({"type": "register_command", "name": "probe"})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "command_invoked":
        text = answer(msg["args"].split())
        emit({"type": "command_response", "id": msg["id"], "action": "display", "display": text})
    elif msg["type"] == "shutdown":
        break
"""
)

TOOL_HOST = (
    PROBE
    + """
from corral_tools import raw_tool

@raw_tool(schema={"type": "object"})
def probe(args):
    return answer(args["words"])
"""
)

#: A stdio "server" whose lines are relayed: one JSON list of words in, one answer out.
RELAYED = (
    PROBE
    + """
import sys
for line in sys.stdin:
    print(json.dumps(answer(json.loads(line))), flush=True)
"""
)


def _grant(*ports: int) -> dict[str, Any]:
    entries = [f"127.0.0.1:{p}" for p in ports]
    return {"network": entries, "unsafe": entries}


@asynccontextmanager
async def _supervised(
    kit: Kit, ext: Path, guard: NetGuard | None = None
) -> AsyncIterator[SupervisorClient]:
    require_bwrap()
    config = kit.config(
        sandbox="required", handshake_timeout=20, tool_timeout=30, command_timeout=30
    )
    async with open_supervisor(config, ext_paths=[str(ext)], discover=False, guard=guard) as c:
        (info,) = await c.list_extensions()
        assert info.state is ExtensionState.RUNNING, info.problem
        assert (info.sandboxed, info.backend) == (True, "bwrap")
        yield c


async def _probe_ext(client: SupervisorClient, *words: object) -> str:
    return (await client.invoke_command("probe", " ".join(map(str, words)))).display


def _asks(granted: Origin, other: Origin) -> list[list[str]]:
    """What each kind is asked, in the order :func:`_check_answers` takes the answers."""
    return [
        ["get", f"{granted.url}/x"],
        ["get", f"{other.url}/x"],
        ["raw", "127.0.0.1", str(granted.port)],
        ["env"],
    ]


def _check_answers(
    granted: Origin, other: Origin, get: str, refused: str, direct: str, env: str
) -> None:
    assert get == "200 hello from /x"
    assert refused.startswith("403 corral refused"), refused
    assert f'add "127.0.0.1:{other.port}" to permissions.network' in refused
    assert direct == "error ConnectionRefusedError"  # around the proxy: nothing there
    proxies = json.loads(env)
    assert proxies["http_proxy"] == proxies["HTTPS_PROXY"] == "http://127.0.0.1:3128"
    assert "127.0.0.1" not in proxies["NO_PROXY"].split(",")  # granted: the host's
    assert len(granted.heads) == 1
    assert other.heads == []


async def test_an_extension_reaches_its_granted_port_and_nothing_else(kit: Kit) -> None:
    with trio.fail_after(CYCLE):
        async with open_origin() as granted, open_origin() as other:
            ext = kit.inline("probe", EXTENSION, permissions=_grant(granted.port))
            async with _supervised(kit, ext) as client:
                with client.subscribe() as events:
                    get = await _probe_ext(client, "get", f"{granted.url}/x")
                    refused = await _probe_ext(client, "get", f"{other.url}/x")
                    event = await wait_for(events, EgressRefused)
                direct = await _probe_ext(client, "raw", "127.0.0.1", granted.port)
                env = await _probe_ext(client, "env")
                (info,) = await client.list_extensions()
    _check_answers(granted, other, get, refused, direct, env)
    assert "in probe's extension.json" in refused
    assert (info.stats.egress_allowed, info.stats.egress_refused) == (1, 1)
    assert event.extension == "probe"
    assert event.destination == f"127.0.0.1:{other.port}"
    assert event.via == "http"
    assert f"network: refused 127.0.0.1:{other.port}" in kit.log_text("probe")


async def test_a_granted_name_that_resolves_to_loopback_is_refused(kit: Kit) -> None:
    guard = NetGuard(resolver=table_resolver({"svc.example": ["127.0.0.1"]}))
    with trio.fail_after(CYCLE):
        async with open_origin() as origin:
            grant = {"network": [f"svc.example:{origin.port}"]}
            ext = kit.inline("probe", EXTENSION, permissions=grant)
            async with _supervised(kit, ext, guard) as client:
                answer = await _probe_ext(client, "get", f"http://svc.example:{origin.port}/x")
                (info,) = await client.list_extensions()
    assert answer.startswith("403 ")
    assert "svc.example resolves to 127.0.0.1 (loopback)" in answer
    assert origin.heads == []
    assert info.stats.egress_refused == 1


async def test_a_tool_host_gets_the_same_proxy(kit: Kit) -> None:
    with trio.fail_after(CYCLE):
        async with open_origin() as granted, open_origin() as other:
            host = kit.exts / "probe"
            host.mkdir()
            (host / "probe.py").write_text(TOOL_HOST)
            manifest = {"name": "probe", "kind": "tool-host", "runtime": "python"}
            manifest |= {"config": {"modules": ["./probe.py"]}, "permissions": _grant(granted.port)}
            (host / "extension.json").write_text(json.dumps(manifest))
            async with _supervised(kit, host) as client:
                answers = []
                for words in _asks(granted, other):
                    outcome = await client.call_tool("probe", {"words": words})
                    (block,) = outcome.content
                    assert isinstance(block, TextBlock)
                    answers.append(block.text)
    _check_answers(granted, other, *answers)


async def test_a_stdio_mcp_server_gets_the_proxy_of_its_entry(kit: Kit) -> None:
    require_bwrap()
    server = kit.exts / "relayed.py"
    server.write_text(RELAYED)
    with trio.fail_after(CYCLE):
        async with open_origin() as granted, open_origin() as other:
            config = kit.config(sandbox="required", handshake_timeout=20)
            spec = mcp_server_spec(
                "relayed",
                [sys.executable, "-I", str(server)],
                env={},
                permissions=Permissions(read_only=[str(kit.exts)], **_grant(granted.port)),
                identity="relayed-test",
                home=str(kit.home),
            )
            async with open_supervisor(config, discover=False) as client:
                relay = await client.start_child(spec)
                proc = await relay.next()
                assert proc is not None, relay.problem
                assert proc.sandboxed
                answers = []
                for words in _asks(granted, other):
                    await proc.stdin.send_all(json.dumps(words).encode() + b"\n")
                    answers.append(json.loads(await proc.stdout.receive_some()))
                await client.stop_child("relayed")
    _check_answers(granted, other, *answers)
    assert "MCP server relayed (its mcp.json entry)" in answers[1]


async def test_a_stop_ends_the_childs_connections_and_leaves_no_descriptor(kit: Kit) -> None:
    start_guardian()  # its socket lives as long as this process
    before = set(os.listdir("/proc/self/fd"))
    with trio.fail_after(CYCLE):
        async with open_origin() as origin:
            ext = kit.inline("probe", EXTENSION, permissions=_grant(origin.port))
            async with _supervised(kit, ext) as client:
                held = await _probe_ext(client, "hold", "127.0.0.1", origin.port)
                assert held == "HTTP/1.1 200 Connection established"
            # The supervisor stopped the extension: its tunnel is closed on our side too.
            await origin.ended.wait()
    assert set(os.listdir("/proc/self/fd")) <= before
