"""``run_many`` in this process: sessions, results once per id, stop, workspaces."""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
from helpers.agentkit import chaos
from helpers.batchkit import echo_script

from agent.batch import LocalBackend, Result, Status, Task, run_many
from agent.batch._local import session_area
from agent.batch._session import Outcome, Session
from agent.batch._workspace import copy_workspace, pack_dir, unpack

pytestmark = pytest.mark.usefixtures("no_leaks")


async def collect(tasks: list[Task], **kw: object) -> list[Result]:
    async with run_many(tasks, **kw) as results:  # type: ignore[arg-type]
        return [r async for r in results]


async def test_sessions_run_side_by_side_each_in_its_own_directory(
    tmp_path: Path, home: Path
) -> None:
    ext = chaos(tmp_path / "exts")
    script = [
        {"tool_calls": [{"name": "bash", "args": {"command": "cat seed.txt; pwd; touch mine"}}]},
        {"tool_calls": [{"name": "chaos_echo", "args": {"text": "x"}}]},
        {"text": "finished", "usage": {"input": 5, "output": 2}},
    ]
    tasks = [
        Task(
            id=f"t{i}",
            prompt="go",
            extensions=[ext],
            script=script,  # type: ignore[arg-type]
            workspace={"seed.txt": f"seed {i}"},
            meta={"n": i},
        )
        for i in range(4)
    ]
    with trio.fail_after(60):
        results = await collect(tasks, backend=LocalBackend(jobs=4), transcripts=tmp_path / "tr")
    assert sorted(r.id for r in results) == ["t0", "t1", "t2", "t3"]
    for r in results:
        assert r.status is Status.DONE, r.error
        assert r.answer == "finished"
        assert r.steps == 3
        assert r.usage.input >= 5
        assert r.meta == {"n": int(r.id[1])}
        assert [(c.name, c.source, c.is_error) for c in r.tool_calls] == [
            ("bash", "builtin", False),
            ("chaos_echo", "chaos", False),
        ]
        (report,) = r.extensions
        assert (report.name, report.calls, report.crashes) == ("chaos", 1, 0)
        lines = Path(r.transcript or "").read_text().splitlines()
        header, *messages = (json.loads(x) for x in lines)
        assert header["type"] == "session"
        assert header["name"] == r.id
        bash_out = messages[2]["message"]["content"][0]["content"][0]["text"]
        assert f"seed {r.id[1]}" in bash_out  # its own copy of the workspace
    # Every session's directory is gone.
    assert not [p for p in os.listdir(tmp_path.parent) if p.startswith("corral-batch-")]


async def test_stop_cancels_running_sessions_and_starts_no_more(tmp_path: Path, home: Path) -> None:
    ext = chaos(tmp_path / "exts", "--hang")
    tasks = [
        Task(id=f"t{i}", prompt="go", extensions=[ext], script=echo_script(str(i)))  # type: ignore[arg-type]
        for i in range(6)
    ]
    seen: list[Result] = []
    with trio.fail_after(30):
        async with run_many(tasks, backend=LocalBackend(jobs=2)) as results:
            with trio.move_on_after(1.5):
                async for r in results:
                    seen.append(r)
            assert not seen  # every session waits on a tool that never answers
            results.stop()
            seen = [r async for r in results]
    assert len(seen) == 2
    assert {r.status for r in seen} == {Status.CANCELLED}
    # Every call has its result (docs/agent.md: an aborted call is answered).
    assert all(r.tool_calls[0].error == "aborted before the tool finished" for r in seen)
    assert all(r.extensions[0].state == "running" for r in seen)


async def test_leaving_early_stops_every_session(tmp_path: Path, home: Path) -> None:
    ext = chaos(tmp_path / "exts", "--hang")
    tasks = [
        Task(id=f"t{i}", prompt="go", extensions=[ext], script=echo_script(str(i)))  # type: ignore[arg-type]
        for i in range(3)
    ]
    with trio.fail_after(30):
        async with run_many(tasks, backend=LocalBackend(jobs=3)) as results:
            with trio.move_on_after(1.0):
                async for _ in results:
                    pass
    # no_leaks: every extension went down the ladder.


class Twice:
    """A backend (behind the seam) that reports every task twice, as a retried task
    whose first run reports late would."""

    concurrency = 1

    async def serve(
        self,
        tasks: Sequence[Task],
        out: trio.MemorySendChannel[Outcome],
        stop: trio.Event,
        *,
        transcripts: bool = False,
    ) -> None:
        for attempt in (1, 2):
            for task in tasks:
                result = Result(id=task.id, status=Status.DONE, answer=f"run {attempt}")
                await out.send(Outcome(result=result, transcript=b"x\n"))


async def test_a_result_reported_twice_is_delivered_once(tmp_path: Path) -> None:
    tasks = [Task(id="a", prompt="p"), Task(id="b", prompt="p")]
    results = await collect(tasks, backend=Twice(), transcripts=tmp_path)
    assert [(r.id, r.answer) for r in results] == [("a", "run 1"), ("b", "run 1")]


def test_a_workspace_copy_keeps_links_as_links_and_leaves_out_fifos(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f.txt").write_text("data")
    (src / "out").symlink_to("/etc/hostname")
    os.mkfifo(src / "pipe")
    copy_workspace(str(src), tmp_path / "dst")
    dst = tmp_path / "dst"
    assert (dst / "sub" / "f.txt").read_text() == "data"
    assert os.readlink(dst / "out") == "/etc/hostname"
    assert not (dst / "pipe").exists()


def test_the_area_of_a_killed_run_is_swept_and_a_live_one_kept(tmp_path: Path) -> None:
    stale = tmp_path / "corral-batch-old"
    (stale / "s1" / "work").mkdir(parents=True)
    (stale / ".lock").touch()
    with session_area(str(tmp_path)) as live:
        assert not stale.exists()
        with session_area(str(tmp_path)) as other:
            assert live.exists()
            assert other != live
    assert os.listdir(tmp_path) == []


def test_a_packed_directory_unpacks_with_modes_and_links_and_nothing_outside(
    tmp_path: Path,
) -> None:
    src = tmp_path / "src"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "run.py").write_text("print(1)")
    (src / "bin" / "run.py").chmod(0o755)
    (src / "link").symlink_to("bin/run.py")
    unpack(pack_dir(str(src)), tmp_path / "dst")
    assert os.access(tmp_path / "dst" / "bin" / "run.py", os.X_OK)
    assert os.readlink(tmp_path / "dst" / "link") == "bin/run.py"
    with pytest.raises(ValueError, match="directory holds more than"):
        pack_dir(str(src), limit=3)
    # A hostile tar: a link out, then a file through it; an absolute name.
    for members in (
        [("out", tarfile.SYMTYPE, str(tmp_path / "outside")), ("out/x", tarfile.REGTYPE, "")],
        [(str(tmp_path / "abs"), tarfile.REGTYPE, "")],
        [("../up", tarfile.REGTYPE, "")],
    ):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, kind, link in members:
                info = tarfile.TarInfo(name)
                info.type, info.linkname = kind, link
                tar.addfile(info, io.BytesIO(b""))
        with pytest.raises((ValueError, FileExistsError)):
            unpack(buffer.getvalue(), tmp_path / "evil")
    assert not (tmp_path / "outside").exists()
    assert not (tmp_path / "abs").exists()
    assert not (tmp_path / "up").exists()


async def test_a_workspace_that_cannot_be_copied_is_the_tasks_error(tmp_path: Path) -> None:
    gone = tmp_path / "gone"  # checked when the task was, removed before it ran
    task = Task(id="t", prompt="hi", workspace=str(gone), provider="offline", timeout=30)
    outcome = await Session(task, root=tmp_path / "area").run()
    assert outcome.result.status is Status.ERROR
    assert (outcome.result.error or "").startswith("cannot prepare the working directory: ")
    assert not (tmp_path / "area").exists()
