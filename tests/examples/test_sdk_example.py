"""``examples/sdk/embed.py``: a session embedded in-process, run as its README says.

The example is run as a real program (its own interpreter, a temporary CORRAL_HOME
and working directory); its stdout must be the events of its prompts, one JSON
object per line, each prompt's ending with ``done``, and its exit status 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.paths import REPO

EMBED = REPO / "examples" / "sdk" / "embed.py"
TIMEOUT = 120


def run(tmp_path: Path, *prompts: str) -> list[dict[str, object]]:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "CORRAL_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, str(EMBED), *prompts],
        cwd=work,
        env=env,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return [json.loads(line) for line in proc.stdout.decode().splitlines()]


def test_the_embedding_example_prompts_and_prints_every_event(tmp_path: Path) -> None:
    events = run(tmp_path)
    types = [e["type"] for e in events]
    assert types.count("done") == 2
    assert types[-1] == "done"
    results = [e for e in events if e["type"] == "tool_result"]
    texts = [c["text"] for r in results for c in r["content"]]  # type: ignore[attr-defined]
    # The weather extension (supervised, sandboxed when possible) and the bash tool.
    assert texts[0].startswith("Oslo: ")
    assert texts[1] == "hello from the sandbox"
    assert not any(e["type"] == "error" for e in events)


def test_the_embedding_example_takes_prompts_as_arguments(tmp_path: Path) -> None:
    events = run(tmp_path, "weather in Lima")
    assert [e["type"] for e in events].count("done") == 1
    (result,) = [e for e in events if e["type"] == "tool_result"]
    assert result["content"][0]["text"].startswith("Lima: ")  # type: ignore[index]
