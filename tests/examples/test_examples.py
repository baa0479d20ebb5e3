"""The example extensions (``examples/extensions``) as real subprocesses, frame by frame.

See :mod:`helpers.extproc` for how the extensions are driven.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import re
import shutil
import signal
from pathlib import Path

import pytest
from helpers.extproc import (
    SEEDS,
    Ext,
    Frame,
    Launcher,
    call,
    intercept,
    invoke,
    shutdown,
    text_of,
)
from helpers.paths import EXAMPLES

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
    # stderr is read by a thread: the exit can come before it read the last line.
    ext.wait_stderr("crashing on tool call 2")


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
