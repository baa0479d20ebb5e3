"""Every documented command works as written.

The commands are the fenced blocks tagged ``sh`` (or ``bash``, ``shell``) in
README.md, docs/*.md and examples/*/README.md (and one level deeper). Each block
runs as one bash script from the repository root (``set -e``; a ``cd`` in it holds
for the rest of it), with stdin from /dev/null (so ``corral chat`` leaves at once),
a private ``CORRAL_HOME`` and the virtualenv's ``corral`` first on PATH.

A line that cannot run here says why in a trailing ``# needs: …`` comment (a
network, an API key, the whole test suite); it is left out and the test reports it
as skipped with that reason. A line ending in ``# exit: N`` must exit with status N
(a documented usage error, a refusal), and any other status fails the block; a
documented side effect is checked by a ``test …`` line after the command (``set
-e`` fails the block when it does not hold). An untagged block may not hold a ``corral`` command:
it would escape this check unnoticed (``text`` marks a synopsis or an output).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("examples/**/README.md")])
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
RUNNABLE = {"sh", "bash", "shell"}
NEEDS = re.compile(r"#\s*needs:\s*(.+)$")
EXIT = re.compile(r"#\s*exit:\s*(\d+)\b")
#: One block may take this long (./dev demo installs nothing here, but runs the tour).
BLOCK_TIMEOUT = 240


def _blocks() -> list[tuple[str, int, str, str]]:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((str(path.relative_to(ROOT)), line, match.group(1), match.group(2)))
    return found


BLOCKS = _blocks()
RUN = [b for b in BLOCKS if b[2] in RUNNABLE]


def checked(line: str) -> str:
    """``line`` as the block's script runs it: with ``# exit: N``, a failure unless it
    exits with status N (``set -e`` would stop at any non-zero status)."""
    want = EXIT.search(line)
    if want is None:
        return line
    command = line[: line.index("#")].rstrip()
    status = want.group(1)
    quoted = command.replace("'", "'\\''")
    return (
        f'set +e; {command}; _status=$?; set -e; [ "$_status" -eq {status} ] || '
        f"{{ echo 'exit status '\"$_status\"', documented {status}: {quoted}' >&2; exit 1; }}"
    )


def _script(lines: list[str]) -> str:
    return "set -euo pipefail\n" + "\n".join(checked(line) for line in lines) + "\n"


@pytest.mark.parametrize(
    ("line", "ok"),
    [
        ("false  # exit: 1", True),
        ("(exit 2)  # exit: 2", True),
        ("true  # exit: 2", False),
        ("(exit 1)  # exit: 2", False),
        ("false", False),
    ],
)
def test_a_documented_exit_status_is_checked(line: str, ok: bool) -> None:
    done = subprocess.run(["bash", "-c", _script([line, "echo reached"])], capture_output=True)
    assert (done.returncode == 0 and b"reached" in done.stdout) is ok, done


def test_untagged_blocks_hold_no_commands() -> None:
    for where, line, lang, body in BLOCKS:
        if lang:  # sh: run below; text (a synopsis, an output): deliberately not run
            continue
        for text in body.splitlines():
            assert not re.match(r"\s*(corral|\./dev)\s", text), (
                f"{where}:{line}: a command in an untagged block; "
                "tag it sh (it will be run) or text (it will not)"
            )


@pytest.mark.parametrize(
    ("where", "line", "body"),
    [(w, ln, b) for w, ln, _, b in RUN],
    ids=[f"{w}:{ln}" for w, ln, _, _ in RUN],
)
def test_documented_commands_run(where: str, line: int, body: str, tmp_path: Path) -> None:
    kept, skipped = [], []
    for text in body.splitlines():
        need = NEEDS.search(text)
        if need:
            skipped.append(f"{text.split('#')[0].strip()} (needs {need.group(1).strip()})")
        else:
            kept.append(text)
    if any("node " in k for k in kept) and shutil.which("node") is None:
        pytest.skip(f"{where}:{line}: needs node, not installed here")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "CORRAL_HOME": str(home),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("CORRAL_RPC_TOKEN", None)
    script = _script(kept)
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, (
        f"{where}:{line} failed ({done.returncode}):\n{script}\n"
        f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )
    if skipped:
        pytest.skip(f"{where}:{line}: ran the rest; not run here: " + "; ".join(skipped))
