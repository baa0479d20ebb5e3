"""The Python SDK (``supervisor/_sdk/corral_ext.py``) and the example extensions.

Every test runs the SDK or an example as a real subprocess speaking NDJSON over
pipes, exactly as the host would, and asserts on the frames. Reads are bounded by
timeouts (a helper thread pumps stdout lines into a queue), and "nothing was sent"
is proven by ordering, never by waiting: the extensions handle frames in order, so
a reply that is not there before a later frame's reply was never sent.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import datetime
import fcntl
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SDK_DIR = REPO / "supervisor" / "_sdk"
SDK_FILE = SDK_DIR / "corral_ext.py"
EXAMPLES = REPO / "examples" / "extensions"
SEEDS = REPO.parent / "shared" / "seeds"
TIMEOUT = 10.0  # generous bound for one read; normal runs take milliseconds

Frame = dict[str, Any]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SDK_DIR)
    # Keep supervisor/_sdk free of __pycache__: it must hold only corral_ext.py.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


class Ext:
    """One extension subprocess; stdout lines and stderr bytes are pumped by threads."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._stderr = bytearray()
        self._stderr_cond = threading.Condition()
        self._pumps = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for pump in self._pumps:
            pump.start()

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := self.proc.stderr.read1(65536):
            with self._stderr_cond:
                self._stderr += chunk
                self._stderr_cond.notify_all()

    # --- talking ----------------------------------------------------------

    def send(self, *frames: Frame | bytes) -> None:
        assert self.proc.stdin is not None
        for frame in frames:
            data = frame if isinstance(frame, bytes) else json.dumps(frame).encode() + b"\n"
            self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def next_line(self, timeout: float = TIMEOUT) -> bytes | None:
        """The next raw stdout line (with its newline), or None at end of stdout."""
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no stdout line within {timeout}s; stderr:\n{self.stderr}")

    def line(self) -> bytes:
        line = self.next_line()
        if line is None:
            pytest.fail(f"stdout closed (rc={self.proc.poll()}); stderr:\n{self.stderr}")
        return line

    def frame(self) -> Frame:
        line = self.line()
        frame = json.loads(line)
        assert isinstance(frame, dict), line
        return frame

    def frames(self, n: int) -> list[Frame]:
        return [self.frame() for _ in range(n)]

    def request(self, frame: Frame) -> Frame:
        self.send(frame)
        return self.frame()

    def expect_eof(self) -> None:
        line = self.next_line()
        assert line is None, f"expected end of stdout, got {line!r}"

    def wait(self, timeout: float = TIMEOUT) -> int:
        return self.proc.wait(timeout)

    @property
    def stderr(self) -> str:
        with self._stderr_cond:
            return self._stderr.decode("utf-8", "replace")

    def wait_stderr(self, pattern: str, timeout: float = TIMEOUT) -> re.Match[str]:
        """Block until stderr matches the regex ``pattern``."""
        with self._stderr_cond:
            found: list[re.Match[str]] = []

            def matched() -> bool:
                m = re.search(pattern, self._stderr.decode("utf-8", "replace"))
                if m:
                    found.append(m)
                return m is not None

            if not self._stderr_cond.wait_for(matched, timeout):
                pytest.fail(f"stderr never matched {pattern!r}:\n{self.stderr}")
            return found[-1]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(TIMEOUT)
        for pump in self._pumps:
            pump.join(TIMEOUT)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if pipe is not None:
                    pipe.close()
            except BrokenPipeError:
                pass


Launcher = Callable[..., Ext]


@pytest.fixture
def launch() -> Iterator[Launcher]:
    """Start an extension: ``launch(dir_or_script, *args)``; everything is killed after."""
    started: list[Ext] = []

    def start(target: Path, *args: str) -> Ext:
        if target.is_dir():
            manifest = json.loads((target / "extension.json").read_text())
            argv = [str(target / manifest["exec"]), *manifest.get("args", []), *args]
            cwd = target
        else:
            argv = [sys.executable, str(target), *args]
            cwd = target.parent
        ext = Ext(argv, cwd)
        started.append(ext)
        return ext

    yield start
    for ext in started:
        ext.close()


def call(ext: Ext, name: str, args: Any, request_id: str = "t1") -> Frame:
    """One tool call; returns the tool_result after checking its id."""
    reply = ext.request({"type": "tool_call", "id": request_id, "name": name, "args": args})
    assert reply["type"] == "tool_result", reply
    assert reply["id"] == request_id
    return reply


def invoke(ext: Ext, name: str, args: str = "", request_id: str = "c1") -> Frame:
    """One command invocation; returns the command_response after checking its id."""
    reply = ext.request({"type": "command_invoked", "id": request_id, "name": name, "args": args})
    assert reply["type"] == "command_response", reply
    assert reply["id"] == request_id
    return reply


def intercept(ext: Ext, request_id: str = "i1", **fields: Any) -> Frame:
    """One event_intercept; returns the response after checking its id."""
    reply = ext.request({"type": "event_intercept", "id": request_id, **fields})
    assert reply["type"] == "event_intercept_response", reply
    assert reply["id"] == request_id
    return reply


def text_of(result: Frame) -> str:
    return "".join(b["text"] for b in result["content"] if b["type"] == "text")


def shutdown(ext: Ext) -> None:
    """Graceful stop: shutdown -> shutdown_ack, end of stdout, exit 0."""
    assert ext.request({"type": "shutdown"}) == {"type": "shutdown_ack"}
    ext.expect_eof()
    assert ext.wait() == 0


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
    ext.notify("turn_end seen", level="success")


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
    assert names == ["corral_ext.py", "corral_toolhost.py", "corral_tools.py", "host.mjs"]


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
    assert [f["message"] for f in sink.frames(2)] == ["event turn_end", "turn_end seen"]
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


# --- hello-py: the seed's quick start, byte for byte -------------------------


def test_hello_py_is_the_seed_quick_start() -> None:
    seed = SEEDS / "extensions-phase2.md"
    if not seed.exists():
        pytest.skip("seeds not available beside the repo")
    text = seed.read_text()
    start = text.index("#!/usr/bin/env python3\n# $ZOT_HOME/extensions/hello-py/hello.py")
    end = text.index("\n\nDrop it in a directory", start)
    assert (EXAMPLES / "hello-py" / "hello.py").read_text() == text[start:end] + "\n"
    assert os.access(EXAMPLES / "hello-py" / "hello.py", os.X_OK)
    manifest = json.loads((EXAMPLES / "hello-py" / "extension.json").read_text())
    assert manifest == {
        "name": "hello-py",
        "version": "1.0.0",
        "exec": "./hello.py",
        "language": "python",
        "enabled": True,
    }


def test_hello_py_runs(launch: Launcher) -> None:
    ext = launch(EXAMPLES / "hello-py")
    assert ext.frames(2) == [
        {"type": "hello", "name": "hello-py", "version": "1.0.0", "capabilities": ["commands"]},
        {"type": "register_command", "name": "hellopy", "description": "say hi (python)"},
    ]
    ext.send({"type": "hello_ack", "protocol_version": 1})
    assert invoke(ext, "hellopy") == {
        "type": "command_response",
        "id": "c1",
        "action": "prompt",
        "prompt": "Greet me very briefly. Add one emoji.",
    }
    shutdown(ext)


# --- manifests ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["hello-py", "weather", "guard", "clock", "chaos"])
def test_example_layout(name: str) -> None:
    directory = EXAMPLES / name
    manifest = json.loads((directory / "extension.json").read_text())
    assert manifest["name"] == name
    assert os.access(directory / manifest["exec"], os.X_OK)
    assert (directory / "README.md").is_file()


# --- weather ----------------------------------------------------------------------


def test_weather(launch: Launcher) -> None:
    ext = launch(EXAMPLES / "weather")
    hello, command, tool, ready = ext.frames(4)
    assert (hello["name"], hello["capabilities"]) == ("weather", ["commands", "tools"])
    assert (command["type"], command["name"]) == ("register_command", "weather")
    assert (tool["type"], tool["name"]) == ("register_tool", "weather")
    assert tool["schema"]["required"] == ["city"]
    assert ready == {"type": "ready"}
    assert call(ext, "weather", {"city": "Berlin"})["content"] == [
        {"type": "text", "text": "Berlin: 16°C, fog"}
    ]
    assert text_of(call(ext, "weather", {"city": "berlin"})) == "berlin: 16°C, fog"
    missing = call(ext, "weather", {})
    assert missing["is_error"] is True
    assert invoke(ext, "weather", "Paris") == {
        "type": "command_response",
        "id": "c1",
        "action": "prompt",
        "prompt": "Show today's weather for Paris in one line.",
    }
    shutdown(ext)


# --- guard ------------------------------------------------------------------------


def test_guard(launch: Launcher) -> None:
    ext = launch(EXAMPLES / "guard")
    hello, command, subscribe, ready = ext.frames(4)
    assert hello["name"] == "guard"
    assert command["name"] == "guard"
    assert subscribe == {
        "type": "subscribe",
        "events": ["session_start", "turn_start", "tool_call", "turn_end", "assistant_message"],
        "intercept": ["tool_call", "turn_start", "assistant_message"],
    }
    assert ready == {"type": "ready"}
    ext.send({"type": "hello_ack", "protocol_version": 1})
    # Observed events get no reply; the next frame answers the next request.
    ext.send(
        {"type": "event", "event": "session_start"},
        {"type": "event", "event": "turn_start", "step": 1},
        {"type": "event", "event": "tool_call", "tool_name": "bash", "tool_args": {}},
    )

    def vet_tool(tool: str, args: Frame) -> Frame:
        return intercept(ext, event="tool_call", tool_id="tc", tool_name=tool, tool_args=args)

    assert vet_tool("bash", {"command": "rm -rf /tmp/foo"}) == {
        "type": "event_intercept_response",
        "id": "i1",
        "block": True,
        "reason": 'refused: matches danger pattern "rm -rf"',
    }
    assert vet_tool("bash", {"command": "ls", "timeout": 5})["modified_args"] == {
        "command": "echo GUARDED: ls",
        "timeout": 5,
    }
    rewritten = vet_tool("bash", {"command": "ls -la; rm x"})["modified_args"]
    assert rewritten == {"command": "echo GUARDED: 'ls -la; rm x'"}
    assert vet_tool("read", {"path": "rm -rf"}) == {"type": "event_intercept_response", "id": "i1"}
    assert intercept(ext, event="turn_start", step=3) == {
        "type": "event_intercept_response",
        "id": "i1",
    }
    redacted = intercept(ext, event="assistant_message", text="key SECRET and SECRET")
    assert redacted["replace_text"] == "key [redacted] and [redacted]"
    assert "block" not in redacted
    assert intercept(ext, event="assistant_message", text="all clear") == {
        "type": "event_intercept_response",
        "id": "i1",
    }
    assert invoke(ext, "guard")["display"] == "guard: blocked=1 rewritten=2 redacted=1"
    ext.wait_stderr("event turn_start step=1")
    shutdown(ext)


# --- clock (plain Node) -------------------------------------------------------------

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


@needs_node
def test_clock(launch: Launcher) -> None:
    ext = launch(EXAMPLES / "clock")
    hello, clock, stopwatch = ext.frames(3)
    assert hello == {
        "type": "hello",
        "name": "clock",
        "version": "1.0.0",
        "capabilities": ["commands"],
    }
    assert [clock["name"], stopwatch["name"]] == ["clock", "stopwatch"]
    ext.send({"type": "hello_ack", "protocol_version": 1}, b"not json\n", {"type": "mystery"})
    # No ready frame: the very next frame is the command's answer.
    reply = invoke(ext, "clock")
    assert reply["action"] == "display"
    shown = datetime.datetime.fromisoformat(reply["display"].replace("Z", "+00:00"))
    assert abs(shown - datetime.datetime.now(datetime.UTC)) < datetime.timedelta(minutes=5)
    ext.send({"type": "command_invoked", "id": "sw", "name": "stopwatch", "args": ""})
    note, response = ext.frames(2)
    assert note["type"] == "notify"
    assert note["level"] == "info"
    assert re.fullmatch(r"stopwatch: \d+\.\ds since start", note["message"])
    assert response == {"type": "command_response", "id": "sw", "action": "noop"}
    assert "error" in invoke(ext, "nosuch")
    shutdown(ext)


@needs_node
def test_clock_exits_on_eof(launch: Launcher) -> None:
    ext = launch(EXAMPLES / "clock")
    ext.frames(3)
    ext.close_stdin()
    ext.expect_eof()
    assert ext.wait() == 0


# --- chaos --------------------------------------------------------------------------

CHAOS = EXAMPLES / "chaos"


def chaos_announcement(ext: Ext, *, intercept: bool = False, ready: bool = True) -> Frame:
    """Consume hello ... ready; returns the hello frame."""
    hello = ext.frame()
    assert hello["type"] == "hello"
    tool, command = ext.frames(2)
    assert (tool["type"], tool["name"]) == ("register_tool", "chaos_echo")
    assert tool["schema"] == {"type": "object", "properties": {"text": {"type": "string"}}}
    assert command == {"type": "register_command", "name": "chaos", "description": "say chaos ok"}
    if intercept:
        assert ext.frame() == {"type": "subscribe", "events": [], "intercept": ["tool_call"]}
    if ready:
        assert ext.frame() == {"type": "ready"}
    return hello


def test_chaos_normal(launch: Launcher) -> None:
    ext = launch(CHAOS)
    assert chaos_announcement(ext)["name"] == "chaos"
    ext.send({"type": "hello_ack", "protocol_version": 1})
    assert call(ext, "chaos_echo", {"text": "hi"})["content"] == [
        {"type": "text", "text": "echo: hi"}
    ]
    assert invoke(ext, "chaos") == {
        "type": "command_response",
        "id": "c1",
        "action": "display",
        "display": "chaos ok",
    }
    assert intercept(ext, event="tool_call", tool_name="x", tool_args={}) == {
        "type": "event_intercept_response",
        "id": "i1",
    }
    shutdown(ext)


def test_chaos_eof_exits_zero(launch: Launcher) -> None:
    ext = launch(CHAOS)
    chaos_announcement(ext)
    ext.close_stdin()
    ext.expect_eof()
    assert ext.wait() == 0


def test_chaos_name_and_wrong_name(launch: Launcher) -> None:
    assert chaos_announcement(launch(CHAOS, "--name", "chaos-2"))["name"] == "chaos-2"
    assert chaos_announcement(launch(CHAOS, "--wrong-name"))["name"] == "chaos-impostor"


def test_chaos_crash_after(launch: Launcher) -> None:
    ext = launch(CHAOS, "--crash-after", "2")
    chaos_announcement(ext)
    assert text_of(call(ext, "chaos_echo", {"text": "one"})) == "echo: one"
    ext.send({"type": "tool_call", "id": "t2", "name": "chaos_echo", "args": {"text": "two"}})
    ext.expect_eof()
    assert ext.wait() == 3
    assert "crashing on tool call 2" in ext.stderr


def test_chaos_exit_on_start(launch: Launcher) -> None:
    ext = launch(CHAOS, "--exit-on-start", "7", "--stderr-lines", "2")
    ext.expect_eof()
    assert ext.wait() == 7
    ext.wait_stderr("chaos: exiting on start")
    assert ext.stderr.splitlines() == [
        "chaos: stderr line 1",
        "chaos: stderr line 2",
        "chaos: exiting on start",
    ]


def test_chaos_stderr_lines(launch: Launcher) -> None:
    ext = launch(CHAOS, "--stderr-lines", "3")
    chaos_announcement(ext)
    ext.wait_stderr("chaos: stderr line 3")
    assert ext.stderr.splitlines()[:3] == [f"chaos: stderr line {i}" for i in (1, 2, 3)]


def test_chaos_hang(launch: Launcher) -> None:
    ext = launch(CHAOS, "--hang", "--intercept", "allow")
    chaos_announcement(ext, intercept=True)
    ext.send(
        {"type": "tool_call", "id": "t", "name": "chaos_echo", "args": {"text": "x"}},
        {"type": "command_invoked", "id": "c", "name": "chaos", "args": ""},
        {"type": "event_intercept", "id": "i", "event": "tool_call", "tool_args": {}},
    )
    # It still reads: the shutdown behind the unanswered requests is acknowledged first.
    shutdown(ext)


def test_chaos_ignore_sigterm(launch: Launcher) -> None:
    ext = launch(CHAOS, "--ignore-sigterm")
    chaos_announcement(ext)  # SIGTERM is ignored before hello is sent
    ext.proc.send_signal(signal.SIGTERM)
    ext.send({"type": "shutdown"})
    assert text_of(call(ext, "chaos_echo", {"text": "still here"})) == "echo: still here"
    ext.close_stdin()
    ext.wait_stderr("stdin closed; staying alive anyway")
    assert ext.proc.poll() is None
    ext.proc.kill()
    assert ext.wait() == -signal.SIGKILL


def test_chaos_flood(launch: Launcher) -> None:
    ext = launch(CHAOS, "--flood", "3")
    chaos_announcement(ext)
    garbage = [ext.line() for _ in range(3)]
    for line in garbage:
        with pytest.raises(ValueError, match="Expecting"):
            json.loads(line)
    assert ext.frames(3) == [{"type": "chaos_noise", "n": n} for n in (1, 2, 3)]
    assert text_of(call(ext, "chaos_echo", {"text": "after"})) == "echo: after"


def test_chaos_oversize(launch: Launcher) -> None:
    size = 300_000
    ext = launch(CHAOS, "--oversize", str(size))
    chaos_announcement(ext)
    ext.send({"type": "tool_call", "id": "big", "name": "chaos_echo", "args": {"text": "x"}})
    line = ext.line()
    assert len(line) == size + 1  # plus the newline
    frame = json.loads(line)
    assert (frame["type"], frame["id"]) == ("tool_result", "big")
    assert text_of(call(ext, "chaos_echo", {"text": "small"}, request_id="t2")) == "echo: small"


def test_chaos_stop_reading_fills_the_pipe(launch: Launcher) -> None:
    ext = launch(CHAOS, "--stop-reading")
    chaos_announcement(ext)
    assert ext.proc.stdin is not None
    fd = ext.proc.stdin.fileno()
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    chunk = (json.dumps({"type": "event", "event": "turn_start", "step": 1}) + "\n").encode()
    written = 0
    with pytest.raises(BlockingIOError):  # noqa: PT012 - the loop is what blocks
        while written < 64 * 1024 * 1024:
            written += os.write(fd, chunk * 64)
    assert written < 64 * 1024 * 1024
    assert ext.proc.poll() is None


def test_chaos_spawn(launch: Launcher) -> None:
    ext = launch(CHAOS, "--spawn", "2")
    pids: list[int] = []
    try:
        chaos_announcement(ext)
        ext.wait_stderr(r"(chaos: spawned pid \d+\n){2}")
        pids = [int(p) for p in re.findall(r"chaos: spawned pid (\d+)", ext.stderr)]
        assert len(pids) == 2
        for pid in pids:
            os.kill(pid, 0)  # exists
        child, daemon = pids
        # The ordinary child shares chaos's process group; the daemon has its own session.
        assert os.getpgid(child) == os.getpgid(ext.proc.pid)
        assert os.getsid(daemon) != os.getsid(ext.proc.pid)
        assert os.getpgid(daemon) != os.getpgid(ext.proc.pid)
        if Path("/proc").is_dir():
            for fd in (0, 1, 2):
                assert os.readlink(f"/proc/{daemon}/fd/{fd}") == "/dev/null"
        assert text_of(call(ext, "chaos_echo", {"text": "x"})) == "echo: x"
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # The ordinary child held our stdout; with it gone, chaos stops like any other.
    shutdown(ext)


def test_chaos_no_hello(launch: Launcher) -> None:
    ext = launch(CHAOS, "--no-hello")
    # Nothing at all is sent before the reply to our shutdown.
    shutdown(ext)


def test_chaos_no_ready(launch: Launcher) -> None:
    ext = launch(CHAOS, "--no-ready")
    chaos_announcement(ext, ready=False)
    assert invoke(ext, "chaos")["display"] == "chaos ok"


def test_chaos_delays(launch: Launcher) -> None:
    ext = launch(CHAOS, "--hello-delay", "0.1", "--tool-delay", "0.1")
    chaos_announcement(ext)
    assert text_of(call(ext, "chaos_echo", {"text": "late"})) == "echo: late"


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("block", {"block": True, "reason": "chaos blocks"}),
        ("allow", {}),
        ("badargs", {"modified_args": [1, 2]}),
    ],
)
def test_chaos_intercept_replies(launch: Launcher, mode: str, expected: Frame) -> None:
    ext = launch(CHAOS, "--intercept", mode)
    chaos_announcement(ext, intercept=True)
    reply = intercept(ext, event="tool_call", tool_name="bash", tool_args={"command": "ls"})
    assert reply == {"type": "event_intercept_response", "id": "i1", **expected}


def test_chaos_intercept_garbage(launch: Launcher) -> None:
    ext = launch(CHAOS, "--intercept", "garbage")
    chaos_announcement(ext, intercept=True)
    ext.send({"type": "event_intercept", "id": "g", "event": "tool_call", "tool_args": {}})
    with pytest.raises(ValueError, match="Expecting"):
        json.loads(ext.line())


def test_chaos_intercept_hang(launch: Launcher) -> None:
    ext = launch(CHAOS, "--intercept", "hang")
    chaos_announcement(ext, intercept=True)
    ext.send({"type": "event_intercept", "id": "h", "event": "tool_call", "tool_args": {}})
    assert text_of(call(ext, "chaos_echo", {"text": "next"})) == "echo: next"


def test_chaos_intercept_crash(launch: Launcher) -> None:
    ext = launch(CHAOS, "--intercept", "crash")
    chaos_announcement(ext, intercept=True)
    ext.send({"type": "event_intercept", "id": "x", "event": "tool_call", "tool_args": {}})
    ext.expect_eof()
    assert ext.wait() == 4
