"""Machinery of the trust tests: a user's machine with corral on it, and the real CLI.

A :class:`Site` is a fresh home for one user (root, or an unprivileged user when the
tests run as root): ``$HOME``, ``$CORRAL_HOME`` inside it, and a project directory.
:meth:`Site.corral` runs the real ``corral`` command as that user, in the project,
with ``--sandbox required`` where it starts extensions, so every extension runs under
bwrap. Extensions are copies of ``attacks/squat.py``, which reports the data
directory it got and what it could read.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psutil

from helpers.sandbox_harness import ATTACKS, RUN_TIMEOUT, Identity, as_user
from supervisor import data_dir, identity_of, log_file, quarantine_file

#: ``corral run`` with the offline model and a sandbox that must hold.
RUN = ("run", "--sandbox", "required", "--provider", "offline")
CHAT = ("chat", "--sandbox", "required", "--provider", "offline")
RPC = ("rpc", "--sandbox", "required", "--provider", "offline")
_MAIN = "from agent._cli.main import main; main()"


@dataclasses.dataclass
class Site:
    """One user's machine: a home, corral's home in it, and a project."""

    who: Identity
    base: Path
    home: Path
    corral_home: Path
    project: Path

    @property
    def local(self) -> Path:
        """The project's ``.corral/extensions``."""
        return self.project / ".corral" / "extensions"

    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "CORRAL_HOME": str(self.corral_home),
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "PYTHONPATH": self.who.pythonpath,
            "LANG": "C.UTF-8",
            "CORRAL_LOG": "error",
        }

    def command(self, *args: str) -> list[str]:
        return [self.who.python, "-c", _MAIN, *args]

    def corral(
        self, *args: str, stdin: str = "", cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``corral ARGS`` as the site's user, in the project; bounded."""
        return subprocess.run(
            self.command(*args),
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env(),
            cwd=str(cwd or self.project),
            timeout=RUN_TIMEOUT,
            check=False,
            **as_user(self.who.uid, self.who.gid),
        )

    def extension(self, where: Path, name: str, *args: str, **manifest: Any) -> Path:
        """An extension ``where/<dirname>`` running a copy of ``squat.py`` with ``args``."""
        d = where / manifest.pop("dirname", name)
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ATTACKS / "squat.py", d / "squat.py")
        data = {"name": name, "version": "1.0.0", "exec": "./squat.py", "args": list(args)}
        (d / "extension.json").write_text(json.dumps({**data, **manifest}))
        self.give()
        return d

    def give(self) -> None:
        """Hand everything under the site to its user (tests write as root)."""
        os.chown(self.base, self.who.uid, self.who.gid)
        for root, dirs, files in os.walk(self.base):
            for name in [*dirs, *files]:
                os.lchown(os.path.join(root, name), self.who.uid, self.who.gid)

    # --- per-extension state, by identity ----------------------------------------------

    def identity(self, d: Path, name: str | None = None) -> str:
        return identity_of(name or json.loads((d / "extension.json").read_text())["name"], str(d))

    def data(self, d: Path) -> Path:
        return data_dir(self.corral_home, self.identity(d))

    def log(self, d: Path) -> Path:
        return log_file(self.corral_home, self.identity(d))

    def quarantine(self, d: Path) -> Path:
        return quarantine_file(self.corral_home, self.identity(d))

    def report(self, d: Path) -> dict[str, Any] | None:
        """What the squatter in ``d`` reported at its last start (None: never started)."""
        path = self.data(d) / "report.json"
        return json.loads(path.read_text()) if path.exists() else None

    def reports(self) -> list[Path]:
        """Every report written anywhere under corral's home."""
        return sorted((self.corral_home / "data").glob("*/report.json"))

    def leftovers(self) -> list[str]:
        """Processes still running from this site (there must be none)."""
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if str(self.base) in cmdline:
                found.append(f"{proc.pid}: {cmdline}")
        return found


def make_site(who: Identity) -> Site:
    """A fresh site for ``who``; the caller removes ``site.base``."""
    # Not under /tmp: extensions get a private /tmp in the sandbox.
    base = Path(tempfile.mkdtemp(prefix="corral-trust-", dir="/var/tmp"))
    base.chmod(0o755)
    home = base / "home" / "user"
    site = Site(who, base, home, home / ".local" / "state" / "corral", home / "project")
    site.project.mkdir(parents=True)
    site.give()
    return site
