"""Built-in tools: confinement (``..``, absolute paths, symlinks), read/write/edit, bash."""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
from helpers.procs import children, lasting

from agent import ImageContent, TextContent, ToolError
from agent._tools.base import ToolKind, ToolRunResult
from agent._tools.bash import BashTool, BoundedOutput
from agent._tools.confine import Workspace
from agent._tools.files import EditTool, ReadTool, WriteTool

pytestmark = pytest.mark.usefixtures("no_leaks")


async def no_progress(text: str) -> None:
    raise AssertionError("unexpected progress")


async def any_progress(text: str) -> None:
    """bash reports its output lines as progress (tests/agent/test_bash_progress.py)."""


def body(result: ToolRunResult) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, TextContent))


async def run(tool: Any, **args: Any) -> ToolRunResult:
    with trio.fail_after(30):
        progress = any_progress if isinstance(tool, BashTool) else no_progress
        result: ToolRunResult = await tool.run("c1", args, progress)
        return result


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace and, beside it, a secret file outside it."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "sub").mkdir()
    (root / "a.txt").write_text("line1\nline2\nline3\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("top secret\n")
    return root, outside


# --- confinement ---------------------------------------------------------------------


def test_resolve_inside(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    ws = Workspace(str(root))
    assert ws.resolve("a.txt") == str(root / "a.txt")
    assert ws.resolve("sub/../a.txt") == str(root / "a.txt")
    assert ws.resolve(str(root / "a.txt")) == str(root / "a.txt")
    assert ws.resolve(".") == str(root)
    (root / "sub" / "new.txt").write_text("")
    assert ws.show(ws.resolve("sub/new.txt")) == "sub/new.txt"


@pytest.mark.parametrize("path", ["../secret.txt", "sub/../../secret.txt", "/etc/passwd", "~"])
def test_resolve_refuses_escapes(tree: tuple[Path, Path], path: str) -> None:
    root, _ = tree
    with pytest.raises(ToolError, match="outside the working directory"):
        Workspace(str(root)).resolve(path)


def test_resolve_refuses_symlinks_out(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "link.txt").symlink_to(outside)
    (root / "linkdir").symlink_to(outside.parent)
    (root / "sub" / "up").symlink_to("../..")
    ws = Workspace(str(root))
    for path in ("link.txt", "linkdir/secret.txt", "sub/up/secret.txt", "linkdir"):
        with pytest.raises(ToolError, match="outside the working directory"):
            ws.resolve(path)


def test_symlink_inside_is_fine(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    (root / "alias.txt").symlink_to(root / "a.txt")
    assert Workspace(str(root)).resolve("alias.txt") == str(root / "a.txt")


def test_unconfined_workspace(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    assert Workspace(str(root), confine=False).resolve("../secret.txt") == str(outside)


@pytest.mark.parametrize("bad", ["", "a\x00b"])
def test_resolve_rejects_empty_and_nul(tree: tuple[Path, Path], bad: str) -> None:
    with pytest.raises(ToolError, match="non-empty"):
        Workspace(str(tree[0])).resolve(bad)


# --- read ----------------------------------------------------------------------------


async def test_read_lines_offset_limit(tree: tuple[Path, Path]) -> None:
    tool = ReadTool(Workspace(str(tree[0])))
    assert body(await run(tool, path="a.txt")) == "line1\nline2\nline3"
    partial = body(await run(tool, path="a.txt", offset=2, limit=1))
    assert partial.startswith("line2\n[a.txt: lines 2-2 of 3;")


async def test_read_refusals(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    (root / "bin.dat").write_bytes(b"\x00\x01\x02")
    (root / "link").symlink_to(tree[1])
    tool = ReadTool(Workspace(str(root)))
    cases = {
        "../secret.txt": "outside the working directory",
        "link": "outside the working directory",
        "missing.txt": "No such file",
        "sub": "is a directory",
        "bin.dat": "looks binary",
    }
    for path, needle in cases.items():
        result = await run(tool, path=path)
        assert result.is_error, path
        assert needle in body(result), path
    bad = await run(tool, paht="a.txt")
    assert bad.is_error
    assert "invalid arguments" in body(bad)


async def test_read_image(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
    (root / "pic.png").write_bytes(png)
    result = await run(ReadTool(Workspace(str(root))), path="pic.png")
    (block,) = result.content
    assert isinstance(block, ImageContent)
    assert block.mime_type == "image/png"
    assert block.data is not None
    assert base64.b64decode(block.data) == png


async def test_read_is_bounded(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    (root / "big.txt").write_text("x" * 100 + "\n" * 5000)
    text = body(await run(ReadTool(Workspace(str(root))), path="big.txt"))
    assert "lines 1-2000 of 5000" in text


# --- write / edit ----------------------------------------------------------------------


async def test_write_creates_directories(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    result = await run(WriteTool(Workspace(str(root))), path="new/deep/f.txt", content="héllo")
    assert not result.is_error
    assert body(result) == "wrote 6 bytes to new/deep/f.txt"
    assert (root / "new" / "deep" / "f.txt").read_text() == "héllo"


async def test_write_refuses_escapes_and_symlinks(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "link.txt").symlink_to(outside)
    (root / "dangling").symlink_to(outside.parent / "created-outside.txt")
    tool = WriteTool(Workspace(str(root)))
    for path in ("../evil.txt", "link.txt", "dangling", str(outside)):
        result = await run(tool, path=path, content="pwned")
        assert result.is_error, path
        assert "outside the working directory" in body(result)
    assert outside.read_text() == "top secret\n"
    assert not (outside.parent / "created-outside.txt").exists()
    assert not (outside.parent / "evil.txt").exists()


async def test_edit(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    (root / "e.txt").write_text("alpha beta alpha\n")
    tool = EditTool(Workspace(str(root)))
    once = await run(tool, path="e.txt", old_text="beta", new_text="BETA")
    assert body(once) == "replaced 1 occurrence in e.txt"
    many = await run(tool, path="e.txt", old_text="alpha", new_text="A")
    assert many.is_error
    assert "occurs 2 times" in body(many)
    missing = await run(tool, path="e.txt", old_text="gamma", new_text="G")
    assert "not found" in body(missing)
    every = await run(tool, path="e.txt", old_text="alpha", new_text="A", replace_all=True)
    assert body(every) == "replaced 2 occurrences in e.txt"
    assert (root / "e.txt").read_text() == "A BETA A\n"
    empty = await run(tool, path="e.txt", old_text="", new_text="x")
    assert empty.is_error


async def test_edit_refuses_outside(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "link.txt").symlink_to(outside)
    tool = EditTool(Workspace(str(root)))
    for path in ("../secret.txt", "link.txt"):
        result = await run(tool, path=path, old_text="top", new_text="no")
        assert result.is_error
        assert "outside the working directory" in body(result)
    assert outside.read_text() == "top secret\n"


# --- bash -----------------------------------------------------------------------------


def test_bounded_output_keeps_head_and_tail() -> None:
    out = BoundedOutput(10)
    for chunk in (b"abc", b"defgh", b"ijklmnop", b"qrst"):
        out.feed(chunk)
    assert out.total == 20
    assert out.text() == "abcde\n[... 10 bytes of output omitted ...]\npqrst"
    small = BoundedOutput(100)
    small.feed(b"hi")
    assert small.text() == "hi"


@pytest.fixture
def bash(tree: tuple[Path, Path]) -> BashTool:
    return BashTool(Workspace(str(tree[0])), default_timeout=20, output_limit=1024)


async def test_bash_runs_in_the_workspace(bash: BashTool, tree: tuple[Path, Path]) -> None:
    result = await run(bash, command="pwd; cat a.txt | wc -l; echo err >&2")
    assert not result.is_error
    assert body(result).split() == [str(tree[0]), "3", "err"]


async def test_bash_exit_code_is_an_error(bash: BashTool) -> None:
    result = await run(bash, command="echo nope; exit 3")
    assert result.is_error
    assert body(result) == "nope\n[exit status 3]"


async def test_bash_environment_is_allowlisted(
    bash: BashTool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    result = await run(bash, command="env")
    assert "sk-should-not-leak" not in body(result)
    assert "PATH=" in body(result)


async def test_bash_output_is_bounded(bash: BashTool) -> None:
    result = await run(bash, command="yes 0123456789 | head -c 100000")
    text = body(result)
    assert "bytes of output omitted" in text
    assert len(text) < 1200


async def test_bash_timeout_kills_the_whole_group(bash: BashTool) -> None:
    before = {p.pid for p in children()}
    result = await run(bash, command="sleep 300 & sleep 301 & echo started; wait", timeout=0.5)
    assert result.is_error
    assert "timed out after 0.5 s" in body(result)
    assert "started" in body(result)
    assert lasting(before) == []


async def test_bash_background_jobs_do_not_outlive_the_call(bash: BashTool) -> None:
    before = {p.pid for p in children()}
    result = await run(bash, command="sleep 300 >/dev/null 2>&1 & echo spawned")
    assert body(result) == "spawned"
    assert lasting(before) == []


async def test_bash_a_daemon_that_left_the_group_does_not_outlive_the_call(
    bash: BashTool,
) -> None:
    # setsid: a session and a group of its own, out of reach of the group's SIGKILL;
    # the guardian adopted it when the shell exited, and the call's end kills it.
    before = {p.pid for p in children()}
    command = (
        "setsid sleep 300 >/dev/null 2>&1 & "
        "until [ $(ps -o sid= -p $!) = $! ]; do :; done; echo daemon"  # it left
    )
    result = await run(bash, command=command)
    assert body(result) == "daemon"
    assert lasting(before) == []


async def test_bash_cancellation_kills_and_reaps(bash: BashTool) -> None:
    before = {p.pid for p in children()}
    with trio.move_on_after(0.5) as scope:
        await bash.run("c", {"command": "sleep 300"}, any_progress)
    assert scope.cancelled_caught
    assert lasting(before) == []


async def test_bash_argument_errors(bash: BashTool) -> None:
    assert "command must not be empty" in body(await run(bash, command="  "))
    assert "invalid arguments" in body(await run(bash, cmd="ls"))
    assert "timeout must be positive" in body(await run(bash, command="ls", timeout=-1))


async def test_bash_required_sandbox_without_backend(tree: tuple[Path, Path]) -> None:
    tool = BashTool(Workspace(str(tree[0])), sandbox=None, require_sandbox=True)
    result = await run(tool, command="true")
    assert result.is_error
    assert "no sandbox backend" in body(result)


def _sandbox() -> Any:
    import sandbox

    try:
        chosen = sandbox.select_sandbox("auto")
    except Exception:
        return None
    return chosen if chosen.backend != "none" else None


@pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend")
async def test_bash_in_the_sandbox(tree: tuple[Path, Path], tmp_path: Path) -> None:
    backend = _sandbox()
    if backend is None:
        pytest.skip("no sandbox backend available")
    root, outside = tree
    tool = BashTool(Workspace(str(root)), sandbox=backend)
    assert tool.sandboxed
    ok = await run(tool, command="echo inside > made.txt && cat made.txt")
    assert body(ok) == "inside"
    assert (root / "made.txt").read_text() == "inside\n"
    # Outside the workspace the write fails, or lands in the sandbox's private tmpfs.
    await run(tool, command=f"echo x > {outside.parent / 'escaped.txt'}")
    await run(tool, command=f"echo x > {Path.home() / 'corral-escaped.txt'}")
    assert not (outside.parent / "escaped.txt").exists()
    assert not (Path.home() / "corral-escaped.txt").exists()
    secret = await run(tool, command=f"cat {outside}")
    assert "top secret" not in body(secret)
    connect = "import socket; socket.create_connection(('1.1.1.1', 53), 2)"
    net = await run(tool, command=f'{sys.executable} -c "{connect}"')
    assert net.is_error


def test_repr_and_source(tree: tuple[Path, Path]) -> None:
    ws = Workspace(str(tree[0]))
    for tool in (ReadTool(ws), WriteTool(ws), EditTool(ws), BashTool(ws)):
        assert (tool.kind, tool.owner) == (ToolKind.BUILTIN, "")
        assert tool.spec.schema["type"] == "object"
        assert str(tree[0]) in repr(tool)
    assert os.path.isabs(ws.root)
    assert psutil.Process().is_running()
