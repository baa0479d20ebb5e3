"""Every documented command works as written.

The commands are the fenced blocks tagged ``sh`` (or ``bash``, ``shell``) in
README.md, docs/*.md and examples/*/README.md (and one level deeper). Each block
runs as one bash script from the repository root (``set -e``; a ``cd`` in it holds
for the rest of it), with stdin from /dev/null (so ``corral chat`` leaves at once),
a private ``CORRAL_HOME`` and the virtualenv's ``corral`` first on PATH.

A line that cannot run here says why in a trailing ``# needs: …`` comment (a
network, an API key, the whole test suite); it is left out and the test reports it
as skipped with that reason. An untagged block may not hold a ``corral`` command:
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
    script = "set -euo pipefail\n" + "\n".join(kept) + "\n"
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
