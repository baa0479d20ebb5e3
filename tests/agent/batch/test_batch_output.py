"""The results file: one writer, whole lines only, resume after a crash or a stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest
from helpers.paths import REPO

from agent.batch import OutputError, Result, ResultsFile, Status
from agent.batch._output import transcript_name, write_transcript


def result(task_id: str, status: Status = Status.DONE, answer: str = "ok") -> Result:
    return Result(id=task_id, status=status, answer=answer)


def line(task_id: str, status: str = "done") -> bytes:
    return msgspec.json.encode(result(task_id, Status(status))) + b"\n"


def test_each_result_is_one_whole_line(tmp_path: Path) -> None:
    out = ResultsFile(tmp_path / "r.jsonl")
    assert out.open(resume=False).done == frozenset()
    out.append(result("a", answer="line one\nline two"))
    out.append(result("b", Status.TIMEOUT))
    out.close()
    lines = (tmp_path / "r.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert [json.loads(x)["id"] for x in lines[:-1]] == ["a", "b"]
    assert json.loads(lines[0])["answer"] == "line one\nline two"


def test_a_second_writer_is_refused_while_the_first_has_it(tmp_path: Path) -> None:
    first = ResultsFile(tmp_path / "r.jsonl")
    first.open(resume=False)
    with pytest.raises(OutputError, match="another batch is writing it"):
        ResultsFile(tmp_path / "r.jsonl").open(resume=True)
    first.close()
    ResultsFile(tmp_path / "r.jsonl").open(resume=True)


def test_results_are_not_overwritten_without_resume(tmp_path: Path) -> None:
    (tmp_path / "r.jsonl").write_bytes(line("a"))
    with pytest.raises(OutputError, match="already holds results: --resume"):
        ResultsFile(tmp_path / "r.jsonl").open(resume=False)
    assert (tmp_path / "r.jsonl").read_bytes() == line("a")


def test_resume_drops_a_torn_last_line_and_keeps_every_whole_one(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    kept = line("a") + line("b", "error") + line("c", "timeout")
    path.write_bytes(kept + line("d")[:25])
    out = ResultsFile(path)
    resumed = out.open(resume=True)
    assert resumed.done == {"a", "b", "c"}
    assert resumed.torn_bytes == 25
    assert path.read_bytes() == kept
    out.append(result("d"))
    out.close()
    assert path.read_bytes() == kept + line("d")


def test_resume_runs_cancelled_tasks_again_and_rewrites_the_file_atomically(
    tmp_path: Path,
) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(line("a") + line("b", "cancelled") + line("c") + line("d", "cancelled"))
    inode = path.stat().st_ino
    out = ResultsFile(path)
    resumed = out.open(resume=True)
    assert (resumed.done, resumed.cancelled) == ({"a", "c"}, 2)
    assert path.read_bytes() == line("a") + line("c")
    assert path.stat().st_ino != inode  # a new file, renamed over the old one
    # The lock moved with it: the new file is held.
    with pytest.raises(OutputError, match="another batch"):
        ResultsFile(path).open(resume=True)
    out.append(result("b"))
    out.close()
    assert path.read_bytes() == line("a") + line("c") + line("b")
    assert [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]


def test_a_damaged_line_before_the_end_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(line("a") + b'{"id": "b", "stat\n' + line("c"))
    with pytest.raises(OutputError, match="line 2 is not a result"):
        ResultsFile(path).open(resume=True)


def test_a_short_write_is_cut_back_off(tmp_path: Path) -> None:
    """A full disk (here: RLIMIT_FSIZE) writes part of a line: it is removed again."""
    path = tmp_path / "r.jsonl"
    code = textwrap.dedent(
        f"""
        import resource, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        from agent.batch import OutputError, Result, ResultsFile, Status
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        out = ResultsFile({str(path)!r})
        out.open(resume=False)
        out.append(Result(id="a", status=Status.DONE))
        size = {str(path)!r}
        import os
        limit = os.path.getsize(size) + 20
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        try:
            out.append(Result(id="b", status=Status.DONE, answer="x" * 200))
        except OutputError as exc:
            print("refused:", exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "refused:" in done.stdout
    assert "short write" in done.stdout
    lines = path.read_bytes().split(b"\n")
    assert [json.loads(x)["id"] for x in lines if x] == ["a"]
    assert path.read_bytes().endswith(b"\n")


def test_transcript_names_are_plain_and_never_collide(tmp_path: Path) -> None:
    assert transcript_name("task-1.a_b") == "task-1.a_b.jsonl"
    names = {transcript_name(i) for i in ["../x", "..-x", "a/b", "a_b", "a b", ".hidden", ""]}
    assert len(names) == 7
    assert all("/" not in n and not n.startswith(".") for n in names)
    path = write_transcript(tmp_path, "../../etc/passwd", b"data\n")
    assert path.parent == tmp_path
    assert path.read_bytes() == b"data\n"
    assert os.listdir(tmp_path) == [path.name]
