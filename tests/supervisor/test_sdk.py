"""The Python SDK (``supervisor/_sdk/corral_ext.py``) as a real subprocess, frame by frame.

See :mod:`helpers.extproc` for how the extensions are driven.
"""

from __future__ import annotations

import ast
import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.extproc import (
    SDK_DIR,
    SDK_FILE,
    TIMEOUT,
    Ext,
    Frame,
    Launcher,
    call,
    intercept,
    invoke,
    shutdown,
    text_of,
)

# --- the SDK ------------------------------------------------------------------

SINK = r"""
import sys
import threading

from corral_ext import (
    AssistantMessageDecision, Extension, ToolCallDecision, ToolResult, TurnStartDecision,
    display, error, error_result, image_block, image_result, insert, noop, prompt,
    text_block, text_result,
)

ext = Extension("sink", "0.1.0")
ext.notify("early bird")  # before run(): held back until after ready
release = threading.Event()

ext.command("p", "prompt")(lambda args: prompt(f"P {args}"))
ext.command("i", "insert")(lambda args: insert("I"))
ext.command("d", "display")(lambda args: display("D"))
ext.command("n", "noop")(lambda args: noop())
ext.command("e", "error")(lambda args: error("E"))
ext.command("ed", "error with an action")(lambda args: error("E", action="display"))
ext.command("s", "plain str")(lambda args: "plain")
ext.command("none", "None")(lambda args: None)
ext.command("bad", "unsupported return")(lambda args: 42)


@ext.command("boom", "raises")
def boom(args):
    raise RuntimeError("kaboom")


@ext.command("print", "prints to stdout")
def stray_print(args):
    print("stray print from a handler")
    return noop()


@ext.tool("text", "text", {"type": "object", "properties": {"x": {"type": "string"}}})
def text_tool(args):
    return text_result("x=" + args.get("x", ""))


ext.tool("err", "error result")(lambda args: error_result("nope"))
ext.tool("img", "image result")(lambda args: image_result(b"\x89PNG", "image/png"))
ext.tool("blocks", "list of blocks")(
    lambda args: [
        text_block("a"),
        "b",
        image_block("QUJD", "image/gif"),
        {"type": "image", "mime_type": "image/png", "data": b"xy"},
    ]
)
ext.tool("str", "plain str")(lambda args: "just text")
ext.tool("weird", "unsupported return")(lambda args: 3.5)
ext.tool("nonjson", "not JSON-able")(lambda args: ToolResult([{"type": "text", "text": {1, 2}}]))


@ext.tool("raise", "raises")
def raising_tool(args):
    raise ValueError("bad input 42")


@ext.tool("slow", "waits for release", concurrent=True)
def slow(args):
    release.wait(10)
    return text_result("slow done")


@ext.tool("release", "releases slow")
def release_tool(args):
    release.set()
    return text_result("released")


@ext.tool("chatty", "notifies from many threads at once")
def chatty(args):
    def burst(n):
        for i in range(20):
            ext.notify(f"thread {n} note {i} " + "x" * 500)

    threads = [threading.Thread(target=burst, args=(n,)) for n in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return text_result("chatty done")


ext.subscribe("turn_start", "turn_end")


@ext.on_event
def on_any_event(frame):
    if frame.get("step") == 99:
        raise RuntimeError("event handler boom")
    ext.notify(f"event {frame['event']}")


@ext.on("turn_end")
def on_turn_end(frame):
    ext.notify("turn_end seen", level="warning")  # docs/rpc.md's old name: sent as "warn"


@ext.intercept_tool_call
def vet_tool(name, args):
    mode = args.get("mode")
    if mode == "decision":
        return ToolCallDecision(modified_args={**args, "x": 1}, reason="patched")
    if mode == "block":
        return ToolCallDecision(block=True, reason="nope", modified_args={"ignored": 1})
    if mode == "true":
        return True
    if mode == "false":
        return False
    if mode == "tuple":
        return (False, "tuple says no")
    if mode == "raise":
        raise RuntimeError("interceptor boom")
    if mode == "weird":
        return 12
    return None


@ext.intercept_turn_start
def vet_turn(step):
    return TurnStartDecision(block=step > 5, reason="too many steps" if step > 5 else "")


@ext.intercept_assistant_message
def vet_message(text):
    if text == "str":
        return "replaced"
    if text == "block":
        return AssistantMessageDecision(block=True, reason="hidden", replace_text="x")
    if text.startswith("up:"):
        return AssistantMessageDecision(replace_text=text.upper())
    return None


@ext.on_start
def started():
    ext.notify(f"started on {ext.hello_ack.get('model')}", level="success")


ext.run()
sys.stderr.write("run returned\n")
"""

SINK_COMMANDS = ["p", "i", "d", "n", "e", "ed", "s", "none", "bad", "boom", "print"]
SINK_TOOLS = [
    "text",
    "err",
    "img",
    "blocks",
    "str",
    "weird",
    "nonjson",
    "raise",
    "slow",
    "release",
    "chatty",
]


@pytest.fixture
def sink(launch: Launcher, tmp_path: Path) -> Ext:
    """The kitchen-sink SDK extension, started, with its announcement consumed."""
    script = tmp_path / "sink.py"
    script.write_text(SINK)
    ext = launch(script)
    n = 1 + len(SINK_COMMANDS) + len(SINK_TOOLS) + 1 + 1 + 1  # ... subscribe, ready, notify
    ext.frames(n)
    return ext


def test_import_is_light_and_stdlib_only() -> None:
    """A fresh interpreter without site-packages imports it without trio/msgspec/asyncio."""
    code = (
        f"import sys; sys.path.insert(0, {str(SDK_DIR)!r}); import corral_ext; "
        "print(sorted(m for m in ('trio', 'msgspec', 'asyncio', 'dataclasses') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    assert out.stdout.strip() == "[]"


def test_sdk_imports_only_the_standard_library() -> None:
    tree = ast.parse(SDK_FILE.read_text())
    modules = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
    }
    assert modules - {"__future__"} <= sys.stdlib_module_names


def test_sdk_dir_holds_only_the_sdk_files() -> None:
    names = sorted(p.name for p in SDK_DIR.iterdir() if p.name != "__pycache__")
    assert names == [
        "corral_ext.py",
        "corral_toolhost.py",
        "corral_tools.py",
        "host.cjs",
        "host.mjs",
    ]


def test_announcement_order_without_hello_ack(launch: Launcher, tmp_path: Path) -> None:
    """hello, commands, tools, subscribe, ready, then frames queued before run()."""
    script = tmp_path / "sink.py"
    script.write_text(SINK)
    ext = launch(script)
    hello = ext.frame()
    assert hello == {
        "type": "hello",
        "name": "sink",
        "version": "0.1.0",
        "capabilities": ["commands", "tools", "events"],
    }
    commands = ext.frames(len(SINK_COMMANDS))
    assert [f["type"] for f in commands] == ["register_command"] * len(SINK_COMMANDS)
    assert [f["name"] for f in commands] == SINK_COMMANDS
    assert commands[0]["description"] == "prompt"
    tools = ext.frames(len(SINK_TOOLS))
    assert [f["type"] for f in tools] == ["register_tool"] * len(SINK_TOOLS)
    assert [f["name"] for f in tools] == SINK_TOOLS
    assert tools[0]["schema"] == {"type": "object", "properties": {"x": {"type": "string"}}}
    assert tools[1]["schema"] == {"type": "object", "properties": {}}
    assert ext.frame() == {
        "type": "subscribe",
        "events": ["turn_start", "turn_end"],
        "intercept": ["tool_call", "turn_start", "assistant_message"],
    }
    assert ext.frame() == {"type": "ready"}
    assert ext.frame() == {"type": "notify", "level": "info", "message": "early bird"}
    # No hello_ack was ever sent, yet requests are served.
    assert text_of(call(ext, "text", {"x": "1"})) == "x=1"
    shutdown(ext)


def test_hello_ack_then_on_start(sink: Ext) -> None:
    sink.send({"type": "hello_ack", "protocol_version": 1, "model": "m-1", "cwd": "/"})
    assert sink.frame() == {"type": "notify", "level": "success", "message": "started on m-1"}


def test_command_responses(sink: Ext) -> None:
    assert invoke(sink, "p", "hi there") == {
        "type": "command_response",
        "id": "c1",
        "action": "prompt",
        "prompt": "P hi there",
    }
    assert invoke(sink, "i")["insert"] == "I"
    assert invoke(sink, "d")["display"] == "D"
    assert invoke(sink, "n") == {"type": "command_response", "id": "c1", "action": "noop"}
    assert invoke(sink, "e") == {
        "type": "command_response",
        "id": "c1",
        "action": "noop",
        "error": "E",
    }
    reply = invoke(sink, "ed")
    assert (reply["action"], reply["error"]) == ("display", "E")
    assert invoke(sink, "s")["display"] == "plain"
    assert invoke(sink, "none")["action"] == "noop"
    assert "no handler for /nosuch" in invoke(sink, "nosuch")["error"]
    assert "unsupported" in invoke(sink, "bad")["error"]


def test_command_handler_raising_still_answers(sink: Ext) -> None:
    reply = invoke(sink, "boom", request_id="b1")
    assert reply["action"] == "noop"
    assert "kaboom" in reply["error"]
    sink.wait_stderr("RuntimeError: kaboom")
    assert invoke(sink, "p", "after")["prompt"] == "P after"


def test_print_in_handler_goes_to_stderr(sink: Ext) -> None:
    assert invoke(sink, "print")["action"] == "noop"
    sink.wait_stderr("stray print from a handler")


def test_tool_results(sink: Ext) -> None:
    assert call(sink, "text", {"x": "y"}) == {
        "type": "tool_result",
        "id": "t1",
        "content": [{"type": "text", "text": "x=y"}],
    }
    err = call(sink, "err", {})
    assert err["is_error"] is True
    assert text_of(err) == "nope"
    (img,) = call(sink, "img", {})["content"]
    assert img["type"] == "image"
    assert img["mime_type"] == "image/png"
    assert base64.b64decode(img["data"]) == b"\x89PNG"
    assert call(sink, "blocks", {})["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
        {"type": "image", "mime_type": "image/gif", "data": "QUJD"},
        {"type": "image", "mime_type": "image/png", "data": base64.b64encode(b"xy").decode()},
    ]
    assert call(sink, "str", {})["content"] == [{"type": "text", "text": "just text"}]
    # Args may arrive as a JSON string or be missing.
    assert text_of(call(sink, "text", '{"x": "from string"}')) == "x=from string"
    assert text_of(call(sink, "text", None)) == "x="


def test_tool_failures_still_answer(sink: Ext) -> None:
    raised = call(sink, "raise", {}, request_id="r1")
    assert raised["is_error"] is True
    assert "bad input 42" in text_of(raised)
    sink.wait_stderr("ValueError: bad input 42")
    weird = call(sink, "weird", {})
    assert weird["is_error"] is True
    assert "unsupported" in text_of(weird)
    nonjson = call(sink, "nonjson", {})
    assert nonjson["is_error"] is True
    not_object = call(sink, "text", [1, 2])
    assert not_object["is_error"] is True
    assert "JSON object" in text_of(not_object)
    unknown = call(sink, "nosuch", {})
    assert unknown["is_error"] is True
    assert "unknown tool" in text_of(unknown)
    assert text_of(call(sink, "text", {"x": "still alive"})) == "x=still alive"


def test_concurrent_tool_does_not_block_others(sink: Ext) -> None:
    """``slow`` waits until ``release`` runs; that only works if it runs in a thread."""
    sink.send({"type": "tool_call", "id": "slow-1", "name": "slow", "args": {}})
    sink.send({"type": "tool_call", "id": "rel-1", "name": "release", "args": {}})
    first, second = sink.frames(2)
    assert (first["id"], text_of(first)) == ("rel-1", "released")
    assert (second["id"], text_of(second)) == ("slow-1", "slow done")


def test_notify_from_threads_is_line_atomic(sink: Ext) -> None:
    sink.send({"type": "tool_call", "id": "ch", "name": "chatty", "args": {}})
    frames = sink.frames(101)  # frame() fails on any torn or interleaved line
    notes = [f for f in frames if f["type"] == "notify"]
    assert len(notes) == 100
    assert frames[-1]["type"] == "tool_result"
    assert text_of(frames[-1]) == "chatty done"


def test_events(sink: Ext) -> None:
    sink.send({"type": "event", "event": "turn_start", "step": 1})
    assert sink.frame()["message"] == "event turn_start"
    sink.send({"type": "event", "event": "turn_end", "stop": "end_turn"})
    notes = sink.frames(2)
    assert [f["message"] for f in notes] == ["event turn_end", "turn_end seen"]
    assert [f["level"] for f in notes] == ["info", "warn"]
    # A raising event handler is logged; nothing is sent and the loop goes on.
    sink.send({"type": "event", "event": "turn_start", "step": 99})
    assert invoke(sink, "d")["display"] == "D"
    sink.wait_stderr("event handler boom")


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (None, {}),
        ("decision", {"reason": "patched", "modified_args": {"mode": "decision", "x": 1}}),
        ("block", {"block": True, "reason": "nope"}),
        ("true", {}),
        ("false", {"block": True}),
        ("tuple", {"block": True, "reason": "tuple says no"}),
        ("raise", {}),
        ("weird", {}),
    ],
)
def test_intercept_tool_call(sink: Ext, mode: str | None, expected: Frame) -> None:
    reply = intercept(
        sink, event="tool_call", tool_id="x", tool_name="bash", tool_args={"mode": mode}
    )
    assert reply == {"type": "event_intercept_response", "id": "i1", **expected}


def test_intercept_turn_start_and_assistant_message(sink: Ext) -> None:
    assert intercept(sink, event="turn_start", step=1) == {
        "type": "event_intercept_response",
        "id": "i1",
    }
    assert intercept(sink, event="turn_start", step=6) == {
        "type": "event_intercept_response",
        "id": "i1",
        "block": True,
        "reason": "too many steps",
    }
    assert intercept(sink, event="assistant_message", text="str")["replace_text"] == "replaced"
    assert intercept(sink, event="assistant_message", text="up:abc")["replace_text"] == "UP:ABC"
    assert intercept(sink, event="assistant_message", text="block") == {
        "type": "event_intercept_response",
        "id": "i1",
        "block": True,
        "reason": "hidden",
    }
    assert intercept(sink, event="assistant_message", text="fine") == {
        "type": "event_intercept_response",
        "id": "i1",
    }
    # Events nobody intercepts are allowed.
    assert intercept(sink, event="session_start") == {
        "type": "event_intercept_response",
        "id": "i1",
    }


def test_malformed_input_is_skipped(sink: Ext) -> None:
    sink.send(
        b"this is not json\n",
        b"\n",
        b"   \n",
        b"[1, 2, 3]\n",
        b'{"no": "type"}\n',
        b'{"type": 7}\n',
        b'{"type": "from_the_future", "id": "z"}\n',
        b"\xff\xfe garbage bytes\n",
        b"[" * 100_000 + b"\n",
    )
    assert text_of(call(sink, "text", {"x": "ok"})) == "x=ok"
    sink.wait_stderr("from_the_future")
    sink.wait_stderr("malformed")


def test_shutdown_acks_and_returns(sink: Ext) -> None:
    shutdown(sink)
    assert "run returned" in sink.stderr


def test_eof_ends_run_cleanly(sink: Ext) -> None:
    sink.close_stdin()
    sink.expect_eof()
    assert sink.wait() == 0
    assert "run returned" in sink.stderr


PANEL = r"""
from corral_ext import Extension, open_panel

ext = Extension("pan", "0.1.0")
ext.command("open", "open")(lambda args: open_panel("p1", "Title", ["a", 2], "foot"))


def on_key(key, text):
    if key == "enter":
        raise RuntimeError("a broken key handler")
    ext.render_panel("p1", "", [f"{key}:{text}"], "foot")


def on_close(reason):
    ext.close_panel("p1")  # nothing happens host-side; it shows the handler ran
    ext.notify(f"closed: {reason}")


ext.on_panel("p1", on_key, on_close)
ext.run()
"""


def test_panels_in_the_sdk(launch: Launcher, tmp_path: Path) -> None:
    """open_panel's frame, keys to on_key (a raising one does not stop the
    extension), panel_close to on_close, frames for other panels ignored."""
    script = tmp_path / "pan.py"
    script.write_text(PANEL)
    ext = launch(script)
    hello = ext.frame()
    assert hello["capabilities"] == ["commands", "panels"]
    ext.frames(2)  # register_command, ready
    assert invoke(ext, "open") == {
        "type": "command_response",
        "id": "c1",
        "action": "open_panel",
        "open_panel": {"id": "p1", "title": "Title", "lines": ["a", "2"], "footer": "foot"},
    }
    ext.send({"type": "panel_key", "panel_id": "other", "key": "up"})
    ext.send({"type": "panel_key", "panel_id": "p1", "key": "enter"})
    ext.send({"type": "panel_key", "panel_id": "p1", "key": "rune", "text": "é"})
    assert ext.frame() == {
        "type": "panel_render",
        "panel_id": "p1",
        "title": "",
        "lines": ["rune:é"],
        "footer": "foot",
    }
    ext.send({"type": "panel_close", "panel_id": "p1", "reason": "closed by the user"})
    assert ext.frame() == {"type": "panel_close", "panel_id": "p1"}
    assert ext.frame() == {
        "type": "notify",
        "level": "info",
        "message": "closed: closed by the user",
    }
    shutdown(ext)


ONE_WRITE = r"""
import io, json
from corral_ext import Extension

ext = Extension("one", "1.0.0")
ext.notify("early bird")  # queued before run(): it goes out with the announcement
ext.tool("t", "a tool", {"type": "object"})(lambda args: "x")


class Out:
    writes: list[bytes] = []

    def write(self, data):
        self.writes.append(bytes(data))
        return len(data)

    def flush(self):
        pass


ext.run(stdin=io.BytesIO(b""), stdout=Out())
print(json.dumps([w.decode() for w in Out.writes]))
"""


def test_the_announcement_is_one_write(tmp_path: Path) -> None:
    """hello, the registrations, ready and what was queued before run() reach the
    host in one write: it wakes once for all of them, not once per frame."""
    script = tmp_path / "one.py"
    script.write_text(ONE_WRITE)
    out = subprocess.run(
        [sys.executable, str(script)],
        env={"PYTHONPATH": str(SDK_DIR)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    (announcement,) = json.loads(out.stdout.splitlines()[-1])
    frames = [json.loads(line) for line in announcement.splitlines()]
    assert [f["type"] for f in frames] == ["hello", "register_tool", "ready", "notify"]
