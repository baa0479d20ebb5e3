#!/usr/bin/env python3
"""A corral RPC client in plain Python (standard library only).

Spawns ``corral rpc`` (the scripted provider with SCRIPT, the offline model without),
says hello (with ``$CORRAL_RPC_TOKEN`` when it is set), sends one prompt, prints the
events until ``done``, asks for the state, then closes stdin and waits for the exit.

    python examples/rpc/client.py [--script SCRIPT] [PROMPT ...]

``$CORRAL`` overrides the command that starts corral (default: ``corral``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import subprocess
import sys
from typing import IO, Any


class Rpc:
    """One ``corral rpc`` process: write commands, read frames."""

    def __init__(self, argv: list[str]) -> None:
        # stderr is inherited: corral's warnings and logs show up in the terminal.
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        self.ids = itertools.count(1)

    def send(self, kind: str, **fields: Any) -> int:
        """Send one command; returns its id."""
        ident = next(self.ids)
        line = json.dumps({"id": ident, "type": kind, **fields})
        self.stdin.write(line.encode() + b"\n")
        self.stdin.flush()
        return ident

    def frames(self) -> Any:
        """Every frame until corral closes its stdout."""
        for line in self.stdout:
            yield json.loads(line)

    def call(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Send a command and return its response (events in between are shown)."""
        ident = self.send(kind, **fields)
        for frame in self.frames():
            if frame["type"] == "response" and frame["id"] == ident:
                if not frame["success"]:
                    raise SystemExit(f"{kind} failed: {frame['error']}")
                return frame
            show(frame)
        raise SystemExit(f"corral exited before answering {kind}")

    def close(self) -> int:
        """Close stdin (corral finishes queued work, then exits); the exit status."""
        self.stdin.close()
        for frame in self.frames():
            show(frame)
        return self.proc.wait()


def show(frame: dict[str, Any]) -> None:
    """Print one frame for people."""
    kind = frame["type"]
    if kind == "text_delta":
        print(frame["delta"], end="", flush=True)
    elif kind == "assistant_start":
        print("assistant: ", end="", flush=True)
    elif kind == "assistant_message":
        print()
    elif kind == "tool_call":
        print(f"  -> {frame['name']} {json.dumps(frame['args'])}")
    elif kind == "tool_result":
        text = " ".join(b.get("text", f"<{b['type']}>") for b in frame["content"])
        mark = "error" if frame["is_error"] else "ok"
        print(f"  <- {mark}: {text[:200]!r}")
    elif kind == "turn_end":
        extra = f" ({frame['error']})" if frame.get("error") else ""
        print(f"[turn_end {frame['stop']}{extra}]")
    elif kind in ("turn_start", "user_message"):
        pass
    else:
        rest = {k: v for k, v in frame.items() if k != "type"}
        print(f"[{kind}] {json.dumps(rest)}" if rest else f"[{kind}]")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", help="JSONL script for the scripted provider")
    parser.add_argument("prompt", nargs="*", default=["Summarise the README."])
    args = parser.parse_args()
    argv = [*shlex.split(os.environ.get("CORRAL", "corral")), "rpc"]
    if args.script:
        argv += ["--provider", "scripted", "--script", args.script]
    rpc = Rpc(argv)
    token = os.environ.get("CORRAL_RPC_TOKEN")
    hello = rpc.call("hello", **({"token": token} if token else {}))["data"]
    print(f"connected: corral {hello['version']}, {hello['provider']}/{hello['model']}")
    rpc.call("prompt", message=" ".join(args.prompt))
    for frame in rpc.frames():
        show(frame)
        if frame["type"] == "done":
            break
    state = rpc.call("get_state")["data"]
    print(f"messages: {state['message_count']}, tokens out: {state['usage']['output']}")
    status = rpc.close()
    print(f"corral exited with {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())
