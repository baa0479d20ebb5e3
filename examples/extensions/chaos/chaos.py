#!/usr/bin/env python3
"""chaos: a deliberately misbehaving extension, for testing the host.

Written with raw frames and the standard library only (no SDK), so it keeps working
whatever state the SDK is in. Misbehaviour is chosen by command-line flags (put them
in the manifest's ``args``); the flags combine.

Normal behaviour: ``hello`` (name "chaos"), ``register_tool chaos_echo`` (returns
``echo: <text>``), ``register_command chaos`` (displays "chaos ok"), ``ready``; then it
answers requests until ``shutdown`` (acknowledged) or end of stdin (exit 0).

Start-up order: ignore SIGTERM, stderr lines, spawn, exit-on-start, hello delay,
hello / registrations / subscribe / ready, flood, stop-reading.

Run ``chaos.py --help`` for the flags.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, NoReturn

ECHO_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"text": {"type": "string"}}}
# The grandchildren: "sleep 1000" in Python, tagged in argv so they are easy to spot.
SLEEPER = [sys.executable, "-c", "import time; time.sleep(1000)", "chaos-grandchild"]
INTERCEPT_MODES = ("block", "allow", "hang", "crash", "garbage", "badargs")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The misbehaviour switches."""
    p = argparse.ArgumentParser(prog="chaos.py", description=__doc__.splitlines()[0])
    p.add_argument("--name", default="chaos", help="name sent in hello (default: chaos)")
    p.add_argument(
        "--crash-after", type=int, metavar="N", help="on the Nth tool call exit 3 without replying"
    )
    p.add_argument(
        "--exit-on-start", type=int, metavar="CODE", help="exit with CODE before sending hello"
    )
    p.add_argument("--hang", action="store_true", help="never answer tools/commands/intercepts")
    p.add_argument(
        "--ignore-sigterm",
        action="store_true",
        help="ignore SIGTERM, shutdown frames and end of stdin: only SIGKILL ends it",
    )
    p.add_argument(
        "--flood", type=int, metavar="N", default=0, help="after ready: N garbage + N unknown lines"
    )
    p.add_argument(
        "--oversize",
        type=int,
        metavar="BYTES",
        help="answer the first tool call with one BYTES-long line (then answer later calls)",
    )
    p.add_argument("--stop-reading", action="store_true", help="after ready, never read stdin")
    p.add_argument(
        "--spawn", type=int, metavar="N", default=0, help="spawn N sleeping grandchildren at start"
    )
    p.add_argument("--no-hello", action="store_true", help="send nothing at all; just read stdin")
    p.add_argument("--hello-delay", type=float, metavar="SECONDS", default=0.0)
    p.add_argument("--wrong-name", action="store_true", help="send hello as '<name>-impostor'")
    p.add_argument("--tool-delay", type=float, metavar="SECONDS", default=0.0)
    p.add_argument("--intercept", choices=INTERCEPT_MODES, help="intercept tool_call like MODE")
    p.add_argument("--stderr-lines", type=int, metavar="N", default=0)
    p.add_argument("--no-ready", action="store_true", help="never send ready")
    return p.parse_args(argv)


def log(message: str) -> None:
    """One line to stderr (the host's log for this extension)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def sleep_forever() -> NoReturn:
    """Block until a signal kills the process."""
    while True:
        time.sleep(3600)


def die(code: int, message: str) -> NoReturn:
    """Exit at once with ``code``: no cleanup, no reply, like a crash."""
    log(message)
    os._exit(code)


def spawn_child() -> int:
    """An ordinary child: same process group, inherits stdin/stdout/stderr."""
    return subprocess.Popen(SLEEPER).pid


def spawn_daemon() -> int:
    """A double-forked daemon in its own session, holding none of our pipes.

    The intermediate child calls setsid(), starts the sleeper and exits at once, so
    the sleeper is re-parented away from us and escapes our process group.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_end)
            os.setsid()
            sleeper = subprocess.Popen(
                SLEEPER,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
            )
            os.write(write_end, str(sleeper.pid).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    if not data:
        raise RuntimeError("daemon spawn failed")
    return int(data)


class Chaos:
    """The protocol loop, bent according to the flags."""

    def __init__(self, opts: argparse.Namespace) -> None:
        self.opts = opts
        self.tool_calls = 0
        self.out = sys.stdout.buffer
        self.broken = False

    def write(self, data: bytes) -> None:
        if self.broken:
            return
        try:
            self.out.write(data)
            self.out.flush()
        except (BrokenPipeError, ValueError):
            self.broken = True

    def emit(self, frame: dict[str, Any]) -> None:
        self.write(json.dumps(frame, separators=(",", ":")).encode() + b"\n")

    def start(self) -> None:
        opts = self.opts
        if opts.ignore_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for i in range(1, opts.stderr_lines + 1):
            log(f"chaos: stderr line {i}")
        for i in range(opts.spawn):
            # Odd-numbered ones are ordinary children, even-numbered ones daemons.
            pid = spawn_daemon() if i % 2 else spawn_child()
            log(f"chaos: spawned pid {pid}")
        if opts.exit_on_start is not None:
            die(opts.exit_on_start, "chaos: exiting on start")
        if opts.hello_delay > 0:
            time.sleep(opts.hello_delay)
        if opts.no_hello:
            return
        name = f"{opts.name}-impostor" if opts.wrong_name else opts.name
        self.emit(
            {
                "type": "hello",
                "name": name,
                "version": "1.0.0",
                "capabilities": ["commands", "tools"],
            }
        )
        self.emit(
            {
                "type": "register_tool",
                "name": "chaos_echo",
                "description": "Echo the text back.",
                "schema": ECHO_SCHEMA,
            }
        )
        self.emit({"type": "register_command", "name": "chaos", "description": "say chaos ok"})
        if opts.intercept:
            self.emit({"type": "subscribe", "events": [], "intercept": ["tool_call"]})
        if not opts.no_ready:
            self.emit({"type": "ready"})
        if opts.flood > 0:
            garbage = b"".join(
                b"chaos garbage line %d {not json\n" % i for i in range(1, opts.flood + 1)
            )
            noise = b"".join(
                b'{"type":"chaos_noise","n":%d}\n' % i for i in range(1, opts.flood + 1)
            )
            self.write(garbage + noise)

    def serve(self) -> int:
        if self.opts.stop_reading:
            sleep_forever()
        for raw in sys.stdin.buffer:
            line = raw.strip()
            if not line:
                continue
            try:
                frame = json.loads(line)
            except ValueError:
                log(f"chaos: skipping malformed line {line[:60]!r}")
                continue
            if not isinstance(frame, dict):
                log("chaos: skipping non-object line")
                continue
            kind = frame.get("type")
            if kind == "tool_call":
                self.on_tool_call(frame)
            elif kind == "command_invoked":
                self.on_command(frame)
            elif kind == "event_intercept":
                self.on_intercept(frame)
            elif kind == "shutdown":
                if self.opts.ignore_sigterm:
                    log("chaos: ignoring shutdown")
                    continue
                self.emit({"type": "shutdown_ack"})
                return 0
            elif kind not in ("hello_ack", "event"):
                log(f"chaos: skipping unknown frame type {kind!r}")
        if self.opts.ignore_sigterm:
            log("chaos: stdin closed; staying alive anyway")
            sleep_forever()
        return 0

    def on_tool_call(self, frame: dict[str, Any]) -> None:
        self.tool_calls += 1
        request_id = frame.get("id", "")
        if self.opts.crash_after is not None and self.tool_calls == self.opts.crash_after:
            die(3, f"chaos: crashing on tool call {self.tool_calls}")
        if self.opts.hang:
            return
        if self.opts.oversize is not None and self.tool_calls == 1:
            self.write_oversize(request_id, self.opts.oversize)
            return
        if self.opts.tool_delay > 0:
            time.sleep(self.opts.tool_delay)
        args = frame.get("args")
        if frame.get("name") != "chaos_echo":
            content = [{"type": "text", "text": f"chaos: unknown tool {frame.get('name')!r}"}]
            self.emit(
                {"type": "tool_result", "id": request_id, "content": content, "is_error": True}
            )
            return
        text = args.get("text", "") if isinstance(args, dict) else ""
        self.emit(
            {
                "type": "tool_result",
                "id": request_id,
                "content": [{"type": "text", "text": f"echo: {text}"}],
            }
        )

    def write_oversize(self, request_id: Any, size: int) -> None:
        """One line of exactly ``size`` bytes (newline excluded) that looks like the reply."""
        head = b'{"type":"tool_result","id":' + json.dumps(request_id).encode()
        head += b',"content":[{"type":"text","text":"'
        tail = b'"}]}'
        padding = max(0, size - len(head) - len(tail))
        self.write(head + b"x" * padding + tail + b"\n")

    def on_command(self, frame: dict[str, Any]) -> None:
        if self.opts.hang:
            return
        request_id = frame.get("id", "")
        if frame.get("name") == "chaos":
            self.emit(
                {
                    "type": "command_response",
                    "id": request_id,
                    "action": "display",
                    "display": "chaos ok",
                }
            )
        else:
            self.emit(
                {
                    "type": "command_response",
                    "id": request_id,
                    "action": "noop",
                    "error": f"chaos: unknown command /{frame.get('name')}",
                }
            )

    def on_intercept(self, frame: dict[str, Any]) -> None:
        mode = self.opts.intercept or "allow"
        if self.opts.hang or mode == "hang":
            return
        reply: dict[str, Any] = {"type": "event_intercept_response", "id": frame.get("id", "")}
        if mode == "crash":
            die(4, "chaos: crashing in intercept")
        elif mode == "garbage":
            self.write(b"chaos intercept garbage {not json\n")
            return
        elif mode == "block":
            reply.update(block=True, reason="chaos blocks")
        elif mode == "badargs":
            reply["modified_args"] = [1, 2]
        self.emit(reply)


def main(argv: list[str]) -> int:
    """Parse the flags and run the bent protocol loop."""
    chaos = Chaos(parse_args(argv))
    chaos.start()
    return chaos.serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
