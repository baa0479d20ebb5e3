"""Helpers of the agent tests: extension dirs, options, scripts, event collectors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from agent import (
    AgentEvent,
    AgentOptions,
    AssistantMessage,
    TextContent,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
)
from helpers.paths import CHAOS, PROBE, REPO


def write_ext(base: Path, name: str, script: Path, args: list[str] | None = None) -> str:
    """An extension dir ``base/name`` running a copy of ``script`` with ``args``.

    The script is copied in, so a sandbox that exposes only the extension's own
    directory can run it.
    """
    where = base / name
    where.mkdir(parents=True, exist_ok=True)
    shutil.copy2(script, where / script.name)
    manifest = {
        "name": name,
        "version": "1.0.0",
        "exec": f"./{script.name}",
        "args": args or [],
        "language": "python",
    }
    (where / "extension.json").write_text(json.dumps(manifest), encoding="utf-8")
    return str(where)


def chaos(ext_dir: Path, *args: str, name: str = "chaos") -> str:
    """A chaos extension with ``args``."""
    extra = ["--name", name] if name != "chaos" else []
    return write_ext(ext_dir, name, CHAOS, [*extra, *args])


def probe(ext_dir: Path, *args: str, name: str = "probe") -> str:
    """A probe extension (tests/agent/fixtures/probe_ext.py) with ``args``."""
    extra = ["--name", name] if name != "probe" else []
    return write_ext(ext_dir, name, PROBE, [*extra, *args])


def options(home: Path, work: Path, **kw: Any) -> AgentOptions:
    """AgentOptions for a test: private home, no discovery, sandbox auto."""
    base: dict[str, Any] = {"home": str(home), "cwd": str(work), "discover": False}
    base.update(kw)
    return AgentOptions(**base)


def script(tmp_path: Path, *turns: dict[str, Any], name: str = "script.jsonl") -> str:
    """A scripted-provider script file."""
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(t) for t in turns) + "\n", encoding="utf-8")
    return str(path)


class Collector:
    """An Emit that keeps every event."""

    def __init__(self) -> None:
        self.events: list[AgentEvent] = []
        self._changed = trio.Event()

    async def __call__(self, event: AgentEvent) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, predicate: Callable[[AgentEvent], bool]) -> AgentEvent:
        """Wait until an event matching ``predicate`` arrived; return the first one."""
        while True:
            for event in self.events:
                if predicate(event):
                    return event
            await self._changed.wait()

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def types(self) -> list[str]:
        return [type(e).__name__ for e in self.events]

    def streamed(self) -> str:
        return "".join(e.delta for e in self.of(TextDelta))

    def shown(self) -> list[str]:
        return [
            "".join(b.text for b in e.content if isinstance(b, TextContent))
            for e in self.of(AssistantMessage)
        ]

    def results(self) -> list[ToolResultEvent]:
        return self.of(ToolResultEvent)

    def result_texts(self) -> list[str]:
        return [
            " ".join(b.text for b in r.content if isinstance(b, TextContent))
            for r in self.results()
        ]

    def calls(self) -> list[ToolCallEvent]:
        return self.of(ToolCallEvent)

    def stops(self) -> list[str]:
        return [e.stop for e in self.of(TurnEnd)]


def spawn_corral(args: list[str], home: Path, work: Path) -> subprocess.Popen[str]:
    """``corral ARGS`` as a real process (pipes for stdin, stdout, stderr), in ``work``."""
    env = {**os.environ, "CORRAL_HOME": str(home), "PYTHONPATH": str(REPO)}
    code = "import sys; from agent._cli.main import main; sys.exit(main())"
    return subprocess.Popen(
        [sys.executable, "-u", "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=work,
        env=env,
    )


def read_until(proc: subprocess.Popen[str], needle: str) -> str:
    """Read ``proc``'s stdout until ``needle`` appeared; what was read."""
    assert proc.stdout is not None
    seen = ""
    while needle not in seen:
        char = proc.stdout.read(1)
        if not char:
            raise AssertionError(f"EOF before {needle!r}; got {seen!r}")
        seen += char
    return seen


def finish(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """Wait (30 s at most, then kill) and return stdout and stderr."""
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise
    return out, err


def results_by_id(events: list[AgentEvent]) -> dict[str, tuple[bool, str]]:
    """The tool results among ``events`` by call id: (is_error, their text)."""
    out = {}
    for event in events:
        if isinstance(event, ToolResultEvent):
            text = " ".join(b.text for b in event.content if isinstance(b, TextContent))
            out[event.id] = (event.is_error, text)
    return out
