"""The example tool packages under ``examples/toolhosts/``, run by their runners.

Each example is started the way its README shows (in its directory, with its
manifest's ``config`` sent as ``init``'s config); every request is written at once and
stdin closed, and the runner answers all of them before it exits. The requests do
not depend on each other's order: each call carries its own state.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.paths import TOOLHOST_EXAMPLES as EXAMPLES

from supervisor._hostwire import (
    HostEvent,
    OkResponse,
    Request,
    decode_execute_value,
    decode_host_message,
    decode_tool_schemas,
    encode_request,
)
from supervisor.lowlevel import SDK_DIR

TIMEOUT = 60


def argv(example: str) -> list[str]:
    if example == "python-tools":
        return [sys.executable, "-m", "corral_toolhost"]
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    return [node, str(Path(SDK_DIR) / "host.cjs")]


def serve(example: str, requests: list[Request]) -> dict[str, list[Any]]:
    """Every message of the run, grouped by request id, in the order they came."""
    folder = EXAMPLES / example
    config = json.loads((folder / "extension.json").read_text())["config"]
    init = Request(id="init", method="init", params={"config": config})
    env = dict(os.environ, PYTHONPATH=SDK_DIR, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        argv(example),
        input=b"".join(encode_request(r) for r in [init, *requests]),
        capture_output=True,
        cwd=folder,
        env=env,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    by_id: dict[str, list[Any]] = {}
    for line in proc.stdout.splitlines():
        msg = decode_host_message(line)
        by_id.setdefault(msg.id, []).append(msg)
    return by_id


def execute(rid: str, tool: str, arguments: dict[str, Any], state: Any = None) -> Request:
    params: dict[str, Any] = {"tool_name": tool, "arguments": arguments}
    if state is not None:
        params["state"] = state
    return Request(id=rid, method="execute_tool", params=params)


NOTES = [{"text": f"n{i}", "tag": "a" if i % 2 else None} for i in range(4)]


@pytest.mark.parametrize("example", ["python-tools", "node-tools"])
def test_example_tool_package(example: str) -> None:
    runs = serve(
        example,
        [
            Request(id="schemas", method="get_tool_schemas"),
            Request(id="config", method="get_config_schema"),
            execute("add", "add_note", {"text": "buy milk"}, {"notes": NOTES, "max_notes": 5}),
            execute(
                "full", "add_note", {"text": "x"}, {"notes": [*NOTES, NOTES[0]], "max_notes": 5}
            ),
            execute("list", "list_notes", {"tag": "a"}, {"notes": NOTES}),
            # A tool that takes no state answers none, even when sent one: an echo of
            # it would undo the changes of the calls beside it.
            execute("count", "countdown", {"start": 3, "interval_ms": 0}, {"notes": NOTES}),
            Request(
                id="preview",
                method="format_tool_call_preview",
                params={"tool_name": "add_note", "arguments": {"text": "buy milk"}},
            ),
            Request(id="ui", method="get_ui_elements"),
        ],
    )
    (init,) = runs["init"]
    assert isinstance(init, OkResponse)
    assert init.result.state == {"notes": [], "max_notes": 5}

    tools, problems = decode_tool_schemas(runs["schemas"][0].result.value)
    assert ([t.name for t in tools], problems) == (["add_note", "list_notes", "countdown"], [])
    assert [t.stateless for t in tools] == [False, False, True]
    assert "max_notes" in runs["config"][0].result.value["properties"]

    (add,) = runs["add"]
    assert decode_execute_value(add.result.value).result == "noted (5 so far)"
    assert add.result.state["notes"][-1] == {"text": "buy milk", "tag": None}
    full = decode_execute_value(runs["full"][0].result.value)
    assert (full.success, full.error) == (False, "there are already 5 notes; that is the limit")
    assert decode_execute_value(runs["list"][0].result.value).result == "- n1 [a]\n- n3 [a]"

    *parts, done = runs["count"]
    assert [p.event.payload for p in parts if isinstance(p, HostEvent)] == [
        {"left": 3},
        {"left": 2},
        {"left": 1},
    ]
    assert decode_execute_value(done.result.value).result == "liftoff"
    assert done.result.state is None
    assert runs["preview"][0].result.value == 'add note: "buy milk"'
    (ui,) = runs["ui"]
    assert isinstance(ui, OkResponse)
    assert ui.result.value == [{"kind": "status", "text": "notes live in this session's state"}]
