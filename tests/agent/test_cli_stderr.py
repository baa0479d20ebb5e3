"""Stderr carries words for people, terminal or not; the structured log goes to the
log file unless ``-v`` or ``--log-format json`` asks for it on stderr.

Real ``corral`` processes with stderr on a pipe (a CI log, a script's ``2>err``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.agentkit import spawn_corral
from helpers.paths import EXAMPLES

pytestmark = pytest.mark.usefixtures("no_leaks")


def _corral(args: list[str], home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = spawn_corral(args, home, cwd)
    out, err = proc.communicate("", timeout=120)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _failing_script(tmp_path: Path) -> Path:
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps({"error": "the model fell over"}) + "\n")
    return script


def test_a_model_failure_is_a_human_line_on_a_piped_stderr(
    home: Path, work: Path, tmp_path: Path
) -> None:
    done = _corral(["run", "--script", str(_failing_script(tmp_path)), "hi"], home, work)
    assert done.returncode == 1
    assert "model error — " in done.stderr
    assert "the model fell over" in done.stderr
    assert _json_lines(done.stderr) == []
    # The structured log still has it, in the log file.
    logged = _json_lines((home / "logs" / "corral.log").read_text())
    assert any("the model fell over" in json.dumps(e) for e in logged)


@pytest.mark.parametrize("asked", [["--log-format", "json", "-v"], ["-v"]])
def test_the_log_is_on_stderr_only_when_asked(
    home: Path, work: Path, tmp_path: Path, asked: list[str]
) -> None:
    done = _corral([*asked, "run", "--script", str(_failing_script(tmp_path)), "hi"], home, work)
    assert done.returncode == 1
    assert "model error — " in done.stderr  # the human line stays
    assert _json_lines(done.stderr)  # and the log joins it


def test_name_clashes_warn_once_in_words(home: Path, work: Path, tmp_path: Path) -> None:
    # A second weather (same tool and command) and a tool named like a built-in.
    twin = tmp_path / "twin"
    shutil.copytree(EXAMPLES / "weather", twin)
    manifest = json.loads((twin / "extension.json").read_text())
    (twin / "extension.json").write_text(json.dumps(manifest | {"name": "twin"}))
    source = (twin / "weather.py").read_text()
    source = source.replace('Extension("weather"', 'Extension("twin"')
    (twin / "weather.py").write_text(source.replace('@ext.tool("weather"', '@ext.tool("bash"'))
    args = ["run", "-e", str(twin), "-e", str(EXAMPLES / "weather"), "weather in Paris"]
    done = _corral(args, home, work)
    assert done.returncode == 0, done.stderr
    assert _json_lines(done.stderr) == []
    lines = [line for line in done.stderr.splitlines() if "is not used" in line]
    assert lines == [
        "warning: extension twin: its tool 'bash' is not used: a built-in has that name",
        "warning: extension weather: its command 'weather' is not used: "
        "extension twin has that name",
    ]


def test_a_broken_extension_is_one_error_line(home: Path, work: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "extension.json").write_text(
        json.dumps({"name": "bad", "version": "1.0.0", "exec": "./bad.py", "language": "python"})
    )
    done = _corral(["run", "-e", str(bad), "hi"], home, work)
    assert done.returncode == 1
    assert _json_lines(done.stderr) == []
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert line.startswith(f"Error: extension {bad}: ")
    assert "--skip-broken-extensions" not in done.stderr  # -e is required: no skipping it
