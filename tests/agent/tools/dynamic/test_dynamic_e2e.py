"""Dynamic tools through the real agent loop (scripted model, real sandbox, real catalog).

The model creates a tool with ``new_tool`` and calls it in the next step; the tool
survives a restart of corral (a new session over the same home and catalog); an
entry edited outside corral is refused at start-up and never runs; and the caps
hold inside the loop: a tool that loops forever is killed at the timeout with its
process group, one that prints 5 MB is cut off, one that reaches for the network
or a host path is stopped by the sandbox. The audit log and the transcript keep
the code.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from helpers.agentkit import options, results_by_id, script
from helpers.procs import sleep_marker, with_marker

import sandbox
from agent import AgentOptions, open_runtime
from agent._audit import ToolAuditRecord, audit_path, read_audit
from agent._tools.dynamic import RunCaps

pytestmark = [
    pytest.mark.usefixtures("no_leaks"),
    pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend"),
]

TIMEOUT = 90
WORDS = {
    "name": "word_count",
    "description": "Count the words of a text.",
    "parameters": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
    "code": "return {'words': len(args['text'].split())}",
}


@pytest.fixture
def bwrap() -> None:
    if sandbox.select_sandbox("auto").backend != "bwrap":
        pytest.skip("no bwrap backend here")


def _call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id}


def _new(name: str, code: str) -> dict[str, Any]:
    return {**WORDS, "name": name, "description": f"Probe {name}.", "code": code}


@pytest.mark.usefixtures("bwrap")
async def test_create_call_restart_and_refuse_an_edited_entry(
    home: Path, work: Path, tmp_path: Path
) -> None:
    catalog = tmp_path / "catalog.json"
    first = script(
        tmp_path,
        {"tool_calls": [_call("new_tool", WORDS, "n1")]},
        {"tool_calls": [_call("word_count", {"text": "one two three"}, "w1")]},
        {"text": "three words"},
        name="first.jsonl",
    )
    opts = options(
        home,
        work,
        provider="scripted",
        script=first,
        tools=["+dynamic"],
        dynamic_catalog=str(catalog),
    )
    with trio.fail_after(TIMEOUT):
        async with open_runtime(opts) as rt:
            assert "word_count" not in [t.name for t in rt.tools()]
            events = await rt.prompt("count").collect()
            results = results_by_id(events)
            assert results["n1"][0] is False, results
            assert "created tool word_count" in results["n1"][1]
            assert "runs sandboxed" in results["n1"][1]
            assert results["w1"] == (False, '{"words": 3}')
            assert rt.tool_sources()["word_count"] == "dynamic"
            # The transcript keeps the code the model sent.
            dumped = json.dumps(msgspec.to_builtins(rt.messages()))
            assert WORDS["code"] in dumped

    (record,) = [r for r in read_audit(audit_path(home))[0] if isinstance(r, ToolAuditRecord)]
    assert (record.action.value, record.tool, record.source) == (
        "new_tool",
        "word_count",
        "dynamic",
    )
    assert record.code == WORDS["code"]

    # A restart of corral: the catalog brings the tool back, callable at once.
    again = script(
        tmp_path,
        {"tool_calls": [_call("word_count", {"text": "a b"}, "w2")]},
        {"text": "two"},
        name="again.jsonl",
    )
    with trio.fail_after(TIMEOUT):
        async with open_runtime(msgspec.structs.replace(opts, script=again)) as rt:
            assert "word_count" in [t.name for t in rt.tools()]
            results = results_by_id(await rt.prompt("count").collect())
            assert results["w2"] == (False, '{"words": 2}')

    # Edited outside corral (the code the user saw is not the code stored): refused.
    data = json.loads(catalog.read_text())
    data["tools"][0]["code"] = "import os; return os.listdir('/')"
    catalog.write_text(json.dumps(data))
    with trio.fail_after(TIMEOUT):
        async with open_runtime(msgspec.structs.replace(opts, script=again)) as rt:
            assert rt.host.dynamic is not None
            (refused,) = rt.host.dynamic.refused
            assert refused.name == "word_count"
            assert "seal does not match" in refused.reason
            assert "word_count" not in [t.name for t in rt.tools()]
            results = results_by_id(await rt.prompt("count").collect())
            assert results["w2"][0] is True
            assert "unknown tool" in results["w2"][1].lower(), results


def _probes(
    home: Path, work: Path, tmp_path: Path, tools: dict[str, str], **kw: Any
) -> AgentOptions:
    """A session whose model creates ``tools`` (name: code), then calls each (``c_<name>``)."""
    turns: list[dict[str, Any]] = [
        {"tool_calls": [_call("new_tool", _new(n, c), f"n_{n}") for n, c in tools.items()]},
        {"tool_calls": [_call(n, {"text": "x"}, f"c_{n}") for n in tools]},
        {"text": "done"},
    ]
    return options(
        home,
        work,
        provider="scripted",
        script=script(tmp_path, *turns),
        tools=["+dynamic"],
        dynamic_catalog=str(tmp_path / "catalog.json"),
        **kw,
    )


@pytest.mark.slow
@pytest.mark.usefixtures("bwrap")
async def test_the_caps_and_the_sandbox_hold_inside_the_loop(
    home: Path, work: Path, tmp_path: Path
) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    secret = home.parent / "secret.txt"
    secret.write_text("TOP SECRET\n")
    marker = sleep_marker()
    tools = {
        "spin": f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'])\nwhile 1:\n    pass",
        "flood": "return 'x' * (5 * 1024 * 1024)",
        "dial": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)",
        "peek": f"return open({str(secret)!r}).read()",
    }
    opts = _probes(home, work, tmp_path, tools)
    try:
        with trio.fail_after(TIMEOUT):
            async with open_runtime(opts) as rt:
                assert rt.host.dynamic is not None
                # The seed's 60 s, shortened for the test (the tools made from now on).
                rt.host.dynamic.caps = RunCaps(timeout=3.0)
                results = results_by_id(await rt.prompt("probe").collect())
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing reached the host's loopback
    finally:
        listener.close()
    assert all(results[f"n_{n}"][0] is False for n in tools), results
    assert results["c_spin"] == (
        True,
        "spin timed out after 3 s; its process group was killed",
    )
    assert results["c_flood"][0] is True
    assert "wrote more than 1024 KiB to stdout; it was killed" in results["c_flood"][1]
    assert len(results["c_flood"][1]) < 1000
    assert results["c_dial"][0] is True
    assert "Network is unreachable" in results["c_dial"][1] or "Refused" in results["c_dial"][1]
    assert results["c_peek"][0] is True
    assert "FileNotFoundError" in results["c_peek"][1]
    assert "TOP SECRET" not in json.dumps(results)
    assert with_marker(marker) == []


async def test_dynamic_tools_are_off_unless_asked_for(
    home: Path, work: Path, tmp_path: Path
) -> None:
    opts = options(
        home,
        work,
        sandbox="off",
        provider="scripted",
        script=script(tmp_path, {"tool_calls": [_call("new_tool", WORDS, "n1")]}, {"text": "x"}),
    )
    with trio.fail_after(TIMEOUT):
        async with open_runtime(opts) as rt:
            assert "new_tool" not in [t.name for t in rt.tools()]
            assert rt.host.dynamic is None
            results = results_by_id(await rt.prompt("make one").collect())
    assert results["n1"][0] is True
    assert not (home / "state" / "dynamic-tools.db").exists()


@pytest.mark.slow
async def test_without_a_sandbox_the_caps_and_limits_still_hold(
    home: Path, work: Path, tmp_path: Path
) -> None:
    tools = {"hog": "return len(b'x' * (2 * 1024 * 1024 * 1024))", "fine": "return 'ok'"}
    opts = _probes(home, work, tmp_path, tools, sandbox="off")
    with trio.fail_after(TIMEOUT):
        async with open_runtime(opts) as rt:
            results = results_by_id(await rt.prompt("probe").collect())
    assert "runs UNSANDBOXED" in results["n_hog"][1]
    assert results["c_fine"] == (False, "ok")
    # 512 MB for the tree: the 2 GiB string fails (MemoryError, or the cgroup's kill).
    assert results["c_hog"][0] is True
    assert "MemoryError" in results["c_hog"][1] or "SIGKILL" in results["c_hog"][1], results
