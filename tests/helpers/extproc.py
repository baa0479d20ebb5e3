"""Extensions as bare subprocesses, driven frame by frame (the SDK's and the examples' tests).

Every test runs the SDK or an example as a real subprocess speaking NDJSON over
pipes, exactly as the host would, and asserts on the frames. Reads are bounded by
timeouts (a helper thread pumps stdout lines into a queue), and "nothing was sent"
is proven by ordering, never by waiting: the extensions handle frames in order, so
a reply that is not there before a later frame's reply was never sent.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.paths import REPO
from supervisor.lowlevel import SDK_DIR as SDK

SDK_DIR = Path(SDK)
SDK_FILE = SDK_DIR / "corral_ext.py"
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
        self._stderr_pump = threading.Thread(target=self._pump_stderr, daemon=True)
        self._pumps = [threading.Thread(target=self._pump_stdout, daemon=True), self._stderr_pump]
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
        """The exit status, once the process has exited and its stderr is read to the end.

        Exit and the pump's last read race: without the join, a line written just
        before exit may not be in `stderr` yet.
        """
        rc = self.proc.wait(timeout)
        self._stderr_pump.join(timeout)
        return rc

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
