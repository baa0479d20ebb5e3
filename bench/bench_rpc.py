"""RPC: ``ping`` and one-tool-call prompt round trips, and events per second to a client.

The client is one blocking Python process writing a line and reading lines back.
``ping`` through ``corral rpc`` is compared with a raw trio NDJSON ping-pong server
(decode, encode, one task) measured in the same run by the same client; the
target is within 2x of it. Prompts use the scripted provider, no extensions are
installed and the sandbox is off, so the figures are corral's own overhead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from _common import ROOT, Row, Rows, main, median

RPC_ARGV = [sys.executable, "-c", "from agent._cli.rpc_cmd import rpc_cmd; rpc_cmd()"]

#: The baseline: what any trio NDJSON server has to do for a ping, and nothing more.
RAW_SERVER = r"""
import os, msgspec, trio
decode, encode = msgspec.json.decode, msgspec.json.Encoder().encode
async def main():
    stdin = trio.lowlevel.FdStream(os.dup(0))
    stdout = trio.lowlevel.FdStream(os.dup(1))
    rest = b""
    while data := await stdin.receive_some(65536):
        *lines, rest = (rest + data).split(b"\n")
        out = [
            encode({"type": "response", "id": decode(line).get("id"), "command": "ping",
                    "success": True, "data": {"pong": True}}) + b"\n"
            for line in lines if line.strip()
        ]
        if out:
            await stdout.send_all(b"".join(out))
trio.run(main)
"""


class Client:
    """A child process spoken to in JSON lines."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
        )
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout

    def send(self, frame: dict[str, Any]) -> None:
        self.stdin.write(json.dumps(frame).encode() + b"\n")
        self.stdin.flush()

    def line(self) -> bytes:
        line = self.stdout.readline()
        if not line:
            raise EOFError("the server closed its stdout")
        return line

    def until_done(self) -> int:
        """Read through the next ``done``; the number of event lines read."""
        count = 0
        while True:
            line = self.line()
            if line.startswith(b'{"type":"response"'):
                continue
            count += 1
            if line.startswith(b'{"type":"done"'):
                return count

    def close(self) -> None:
        self.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def client(argv: list[str], tmp: Path) -> Iterator[Client]:
    env = dict(os.environ, CORRAL_HOME=str(tmp / "home"))
    env.pop("CORRAL_RPC_TOKEN", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [env.get("PYTHONPATH", ""), str(ROOT)] if p)
    c = Client(argv, env, str(tmp))
    try:
        yield c
    finally:
        c.close()


def rpc_argv(script: Path, *extra: str) -> list[str]:
    return [
        *RPC_ARGV,
        "--provider",
        "scripted",
        "--script",
        str(script),
        "--no-extensions",
        "--sandbox",
        "off",
        *extra,
    ]


def write_script(path: Path, turns: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in turns), encoding="utf-8")
    return path


def ping_times(c: Client, count: int, warmup: int) -> list[float]:
    out: list[float] = []
    for n in range(warmup + count):
        t0 = time.perf_counter()
        c.send({"id": n, "type": "ping"})
        c.line()
        if n >= warmup:
            out.append(time.perf_counter() - t0)
    return out


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def measure(quick: bool) -> list[Row]:
    rows = Rows("rpc")
    pings, warm = (300, 50) if quick else (3000, 300)
    prompts = 50 if quick else 400
    stream_chars = 5_000 if quick else 50_000
    with tempfile.TemporaryDirectory(prefix="corral-bench-rpc-") as name:
        tmp = Path(name)
        (tmp / "notes.txt").write_text("hello\n", encoding="utf-8")
        raw = corral = float("nan")
        with rows.guard("raw.ping"), client([sys.executable, "-c", RAW_SERVER], tmp) as c:
            raw = rows.add("raw.ping", median(ping_times(c, pings, warm)) * 1e6, "us")
        script = write_script(tmp / "idle.jsonl", [{"text": "unused"}])
        with rows.guard("corral.ping"), client(rpc_argv(script), tmp) as c:
            times = ping_times(c, pings, warm)
            corral = rows.add("corral.ping", median(times) * 1e6, "us")
            rows.add("corral.ping_p95", p95(times) * 1e6, "us")
        if raw == raw and corral == corral:  # both measured (not NaN)
            ratio = corral / raw
            rows.add(
                "corral.ping_vs_raw",
                ratio,
                "x",
                target="<= 2",
                ok=ratio <= 2.0,
                note=f"{pings} sequential pings each, medians",
            )

        chaos = str(ROOT / "examples" / "extensions" / "chaos")
        cases = [
            ("corral.prompt_builtin_tool", "read", {"path": "notes.txt"}, []),
            ("corral.prompt_ext_tool", "chaos_echo", {"text": "hi"}, ["-e", chaos]),
        ]
        for case, tool, args, extra in cases:
            turns: list[dict[str, Any]] = []
            for n in range(prompts + 10):
                turns.append({"tool_calls": [{"name": tool, "args": args, "id": f"t{n}"}]})
                turns.append({"text": f"done ({n})"})
            script = write_script(tmp / "tool.jsonl", turns)
            with rows.guard(case), client(rpc_argv(script, *extra), tmp) as c:
                times, events = [], 0
                for n in range(prompts + 10):
                    t0 = time.perf_counter()
                    c.send({"id": n, "type": "prompt", "message": "go"})
                    events = c.until_done()
                    if n >= 10:
                        times.append(time.perf_counter() - t0)
                    if n % 100 == 99:
                        c.send({"id": f"clear{n}", "type": "clear"})
                        c.line()
                rows.add(
                    case,
                    median(times) * 1e3,
                    "ms",
                    note=f"prompt to done: 2 model calls, {events} events; median",
                )
                rows.add(f"{case}_p95", p95(times) * 1e3, "ms")

        script = write_script(tmp / "stream.jsonl", [{"text": "x" * stream_chars, "chunk": 1}])
        with rows.guard("corral.events_streamed"), client(rpc_argv(script), tmp) as c:
            c.send({"id": 1, "type": "prompt", "message": "stream"})
            c.line()  # the response
            t0 = time.perf_counter()
            count = c.until_done()
            elapsed = time.perf_counter() - t0
            rows.add(
                "corral.events_streamed",
                count / elapsed,
                "events/s",
                note=f"{count} events (text_delta of 1 char) read by the client",
            )
    return rows.rows


if __name__ == "__main__":
    main(measure)
