"""What confining the agent's ``bash`` tool costs per call.

Run from the repository root::

    python bench/bench_bash.py [--quick] [--json-out PATH]   # or: python bench/run.py

The built-in ``bash`` tool runs ``true`` in a fresh workspace, one call after
another: unconfined (``--sandbox off``), then under :func:`sandbox.plan_shell`
(bwrap: host read-only, workspace read-write, its protected paths read-only,
corral's home and the credential stores hidden), with a cgroup per call as corral
does when it may, and without. The figure that matters is the difference of the
medians: what sandboxing adds to every call.

``shell_sandbox_repo`` is the everyday case: the workspace is a git repository
with a submodule (hooks, configuration and ``.git`` files protected, each with
the directories on the way pinned) in a home that holds a handful of credential
stores (``.ssh``, ``.config/gh``, ``.mozilla``, ``.bash_history`` ..., each
hidden). Paired with ``shell_sandbox`` (a bare directory in an empty home), it
says what the protected paths and the credential list cost per call.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import Row, main, median

import sandbox
from agent._cli.logs import configure_logging
from agent._tools.bash import BashTool
from agent._tools.confine import Workspace


async def _no_progress(text: str) -> None:
    return None


async def _calls(tool: BashTool, count: int) -> list[float]:
    for _ in range(3):  # warm-up: the spawner thread, the page cache
        await tool.run("w", {"command": "true"}, _no_progress)
    took: list[float] = []
    for _ in range(count):
        start = time.perf_counter()
        result = await tool.run("b", {"command": "true"}, _no_progress)
        took.append(time.perf_counter() - start)
        assert not result.is_error, result
    return took


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)}
    ident = ["-c", "user.name=b", "-c", "user.email=b@example.invalid"]
    ident += ["-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always"]
    subprocess.run(["git", *ident, *args], cwd=cwd, env=env, check=True, capture_output=True)


def _repo(base: Path) -> Workspace:
    """A git repository with a submodule, in a home with a few credential stores."""
    home = base / "repo-home"
    for store in (".ssh", ".config/gh", ".mozilla", ".docker", ".aws", ".cargo"):
        (home / store).mkdir(parents=True)
    for name in (".bash_history", ".python_history", ".netrc", ".npmrc"):
        (home / name).write_text("x\n")
    lib, project = base / "lib", home / "project"
    for repo in (lib, project):
        repo.mkdir(parents=True)
        _git(repo, "init", "-q")
        _git(repo, "commit", "-q", "--allow-empty", "-m", "first")
    _git(project, "submodule", "add", "-q", str(lib), "lib")
    return Workspace(str(project), corral_home=str(base / "home"), home=str(home))


async def measure(quick: bool) -> list[Row]:
    """Per-call medians and the sandbox's share (``--quick``: 20 calls each)."""
    configure_logging(level="error")
    count = 20 if quick else 200
    base = Path(tempfile.mkdtemp(prefix="corral-bench-bash-", dir="/var/tmp"))
    try:
        (base / "project").mkdir()
        (base / "home").mkdir()
        ws = Workspace(str(base / "project"), corral_home=str(base / "home"), home=str(base))
        plain = median(await _calls(BashTool(ws, sandbox=None), count)) * 1000
        rows = [
            Row(
                bench="bash",
                case="unconfined_p50",
                value=plain,
                unit="ms",
                note=f"`true` via the bash tool, --sandbox off; {count} calls",
            )
        ]
        repo = _repo(base)
        auto = sandbox.select_sandbox("auto")
        variants: list[tuple[str, Any, Workspace, str]] = [
            ("shell_sandbox", auto, ws, "a bare directory"),
            ("shell_sandbox_repo", auto, repo, "a repository with a submodule, 10 stores"),
            ("shell_sandbox_nocgroup", sandbox.select_sandbox("auto", cgroups=False), ws, ""),
        ]
        for case, backend, where, what in variants:
            if backend.backend != "bwrap":
                rows.append(Row(bench="bash", case=case, value=float("nan"), unit="ms",
                                note=f"no bwrap backend ({backend.backend})"))  # fmt: skip
                continue
            confined = median(await _calls(BashTool(where, sandbox=backend), count)) * 1000
            cgroups = "with a cgroup per call" if backend.cgroups else "no cgroup"
            note = f"bwrap, {cgroups}" + (f"; {what}" if what else "")
            rows.append(Row(bench="bash", case=f"{case}_p50", value=confined, unit="ms",
                            note=note))  # fmt: skip
            rows.append(Row(bench="bash", case=f"{case}_overhead", value=confined - plain,
                            unit="ms", note="added per call by the sandbox (medians)"))  # fmt: skip
        return rows
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main(measure)
