"""Helpers of the batch tests: tasks files, chaos mixes, results, process trees.

The command itself runs through ``helpers.agentkit.spawn_corral``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import psutil

from helpers.agentkit import chaos

#: What each kind of task of :func:`chaos_mix` must end as.
EXPECTED = {"ok": "done", "crash": "done", "dead": "error", "hang": "timeout"}


def write_tasks(path: Path, tasks: list[dict[str, Any]]) -> Path:
    """A tasks file, one JSON object per line."""
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    return path


def echo_script(text: str, *, delay: float = 0.0) -> list[dict[str, Any]]:
    """A scripted session: one ``chaos_echo`` call, then an answer (after ``delay``)."""
    return [
        {"tool_calls": [{"name": "chaos_echo", "args": {"text": text}}]},
        {"text": f"answer {text}", "delay": delay},
    ]


def chaos_mix(tmp_path: Path, count: int) -> tuple[Path, dict[str, str]]:
    """``count`` tasks over four chaos extensions: ``ok`` (answers), ``crash`` (crashes
    on its first call: the call fails, the session answers), ``dead`` (exits before
    ``hello``: the session cannot start) and ``hang`` (never answers: the task times
    out). Returns the tasks file and the status each id must end with."""
    exts = tmp_path / "exts"
    dirs = {
        "ok": chaos(exts, name="ok"),
        "crash": chaos(exts, "--crash-after", "1", name="crash"),
        "dead": chaos(exts, "--exit-on-start", "3", name="dead"),
        "hang": chaos(exts, "--hang", name="hang"),
    }
    kinds = ["ok", "crash", "dead", "hang", "ok"]
    tasks, expected = [], {}
    for i in range(count):
        kind = kinds[i % len(kinds)]
        task: dict[str, Any] = {
            "id": f"{kind}-{i}",
            "prompt": "go",
            "extensions": [os.path.relpath(dirs[kind], tmp_path)],
            "script": echo_script(str(i)),
            "meta": {"kind": kind},
        }
        if kind == "hang":
            task["timeout"] = 1.5
        tasks.append(task)
        expected[task["id"]] = EXPECTED[kind]
    return write_tasks(tmp_path / "tasks.jsonl", tasks), expected


def read_results(path: Path) -> list[dict[str, Any]]:
    """The results file's lines (every one must be a whole JSON object)."""
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), "the last line is torn"
    return [json.loads(line) for line in data.splitlines() if line.strip()]


class TreeWatch:
    """Every process that was ever a descendant of ``pid`` while watched."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.seen: dict[int, psutil.Process] = {}

    def look(self) -> None:
        try:
            for proc in self.root.children(recursive=True):
                self.seen.setdefault(proc.pid, proc)
        except psutil.NoSuchProcess:
            pass

    def until(self, condition: Any, limit: float = 60.0) -> None:
        """Keep looking until ``condition()`` holds (fail after ``limit`` seconds)."""
        deadline = time.monotonic() + limit
        while not condition():
            assert time.monotonic() < deadline, "timed out waiting"
            self.look()
            time.sleep(0.05)

    def left(self, limit: float = 10.0) -> list[str]:
        """Those still running after ``limit`` seconds (their command lines)."""
        _, alive = psutil.wait_procs(list(self.seen.values()), timeout=limit)
        out = []
        for proc in alive:
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    out.append(" ".join(proc.cmdline()))
            except psutil.NoSuchProcess:
                pass
        return out
