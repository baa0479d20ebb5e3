"""A project with corral installed inside it, to attack through the agent's own tools.

:func:`make_project` builds, under ``/var/tmp`` (the shell has a private ``/tmp``):

* ``project/.venv``: a real virtual environment (``python -m venv``) with corral
  "installed" in it: a ``.pth`` file in its site-packages puts this checkout and
  the packages corral needs on its ``sys.path``, which is what ``pip install``
  amounts to for what runs at start-up;
* ``project/src/app``: the project's own package, installed *editable* into that
  environment (a ``.pth`` naming ``src``, as ``pip install -e .`` writes);
* ``project/.git``: a repository with one commit;
* a home directory with corral's home in it.

:meth:`Project.call` runs one tool call through ``protect_driver.py`` with the
project's interpreter (so corral computes what it protects from that
installation, as the real CLI would), and :meth:`Project.corral_starts` is "the
next ``corral`` command": the project's interpreter importing corral, from ``/``.
Every payload an attack plants writes a marker file when it runs;
:meth:`Project.ran` says which did.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from helpers.paths import REPO, TESTS

DRIVER = TESTS / "security" / "protect_driver.py"
#: Seconds for one driver run (starts an interpreter and bwrap).
RUN_TIMEOUT = 120


def git(cwd: Path, *args: str) -> str:
    """Run git quietly with a fixed identity; its stdout."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(cwd),
    }
    done = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def payload(marker: Path, tag: str) -> str:
    """A line of Python that, when it runs, appends ``tag`` to ``marker``."""
    return f"import os; open({str(marker)!r}, 'a').write({tag + chr(10)!r})"


class Project:
    """See the module docstring."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.home = base / "home"
        self.corral_home = self.home / ".local" / "state" / "corral"
        self.root = base / "project"
        self.marker = base / "ran.txt"
        self.corral_home.mkdir(parents=True)
        (self.root / "src" / "app").mkdir(parents=True)
        (self.root / "src" / "app" / "__init__.py").write_text("VERSION = 1\n")
        (self.root / "README.md").write_text("readme\n")
        base_python = getattr(sys, "_base_executable", sys.executable)
        subprocess.run(
            [base_python, "-m", "venv", "--without-pip", str(self.root / ".venv")],
            check=True,
            timeout=120,
        )
        self.python = self.root / ".venv" / "bin" / "python"
        found = subprocess.run(
            [str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            cwd="/",
        )
        self.site = Path(found.stdout.strip())
        ours = sysconfig.get_paths()["purelib"]
        (self.site / "corral.pth").write_text(f"{REPO}\n{ours}\n")
        (self.site / "__editable__.app-0.1.pth").write_text(f"{self.root / 'src'}\n")
        git(self.root, "init", "-q")
        git(self.root, "add", "README.md", "src")
        git(self.root, "commit", "-q", "-m", "first")

    @property
    def hooks(self) -> Path:
        return self.root / ".git" / "hooks"

    def call(self, tool: str, protect: list[str] | None = None, **args: Any) -> tuple[bool, str]:
        """One call of ``tool`` with ``args``; (succeeded, its text)."""
        answer = self.call_full(tool, protect, **args)
        return answer["ok"], answer["text"]

    def call_full(self, tool: str, protect: list[str] | None = None, **args: Any) -> Any:
        request: dict[str, Any] = {
            "workspace": str(self.root),
            "corral_home": str(self.corral_home),
            "home": str(self.home),
            "tool": tool,
            "args": args,
        }
        if protect:
            request["protect"] = protect
        done = subprocess.run(
            [str(self.python), str(DRIVER), json.dumps(request)],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            cwd="/",
            env={**os.environ, "HOME": str(self.home)},
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    def corral_starts(self) -> None:
        """The next ``corral`` command: the project's Python starting and importing corral."""
        subprocess.run(
            [str(self.python), "-c", "import agent, sandbox, supervisor"],
            check=True,
            timeout=RUN_TIMEOUT,
            cwd="/",
            capture_output=True,
            env={**os.environ, "HOME": str(self.home)},
        )

    def ran(self) -> list[str]:
        """Tags of the payloads that ran."""
        try:
            return self.marker.read_text().split()
        except FileNotFoundError:
            return []


def make_project() -> Project:
    """A fresh project (remove ``project.base`` afterwards)."""
    base = Path(tempfile.mkdtemp(prefix="corral-protect-", dir="/var/tmp"))
    os.chmod(base, 0o755)
    try:
        return Project(base)
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
