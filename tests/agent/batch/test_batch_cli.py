"""``corral batch`` as a real process: exactly once, resume after SIGKILL, clean stops."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections import Counter
from pathlib import Path

import pexpect
import pytest
from helpers.agentkit import chaos, finish
from helpers.agentkit import spawn_corral as corral
from helpers.batchkit import TreeWatch, chaos_mix, echo_script, read_results, write_tasks
from helpers.paths import REPO


def count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


@pytest.mark.slow  # 50 sessions, ten of which wait for their timeout
def test_fifty_chaos_tasks_each_end_once_with_the_right_status(tmp_path: Path, home: Path) -> None:
    tasks, expected = chaos_mix(tmp_path, 50)
    proc = corral(["batch", str(tasks), "-o", "r.jsonl", "--jobs", "4", "--json"], home, tmp_path)
    watch = TreeWatch(proc.pid)
    watch.until(lambda: proc.poll() is not None, limit=120)
    out, err = finish(proc)
    assert proc.returncode == 0, err
    results = read_results(tmp_path / "r.jsonl")
    assert Counter(r["id"] for r in results) == Counter(list(expected))  # every id, once
    assert {r["id"]: r["status"] for r in results} == expected
    for r in results:
        kind = r["meta"]["kind"]
        (ext,) = r["extensions"]
        if kind == "crash":
            assert ext["crashes"] == 1
            assert r["tool_calls"][0]["is_error"]
            assert "exited" in r["tool_calls"][0]["error"]
            assert r["answer"] == f"answer {r['id'].split('-')[1]}"
        elif kind == "dead":
            assert "extension dead did not start" in r["error"]
        elif kind == "hang":
            assert r["error"] == "no result after 1.5 s"
            assert ext["state"] == "running"
        else:
            assert (r["answer"], r["error"], ext["calls"]) == (f"answer {r['id'][3:]}", None, 1)
    lines = [json.loads(x) for x in out.splitlines()]
    assert [x["type"] for x in lines] == ["result"] * 50 + ["summary"]
    summary = lines[-1]
    assert (summary["done"], summary["error"], summary["timeout"]) == (30, 10, 10)
    assert summary["extension_crashes"] == 10
    assert watch.left() == []


@pytest.mark.slow  # two batches of sessions, one killed
def test_a_batch_killed_midway_resumes_without_losing_or_repeating_a_result(
    tmp_path: Path, home: Path
) -> None:
    ext = chaos(tmp_path / "exts")
    write_tasks(
        tmp_path / "tasks.jsonl",
        [
            {
                "id": f"t{i}",
                "prompt": "go",
                "extensions": [ext],
                "script": echo_script(str(i), delay=0.2),
            }
            for i in range(30)
        ],
    )
    out = tmp_path / "r.jsonl"
    args = ["batch", "tasks.jsonl", "-o", "r.jsonl", "--jobs", "3"]
    proc = corral(args, home, tmp_path)
    watch = TreeWatch(proc.pid)
    watch.until(lambda: count_lines(out) >= 8)
    watch.look()
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert watch.left() == []  # the guardian took every extension down with the host
    data = out.read_bytes()
    first = data[: data.rfind(b"\n") + 1]  # a torn last line may follow
    done_first = [json.loads(x)["id"] for x in first.splitlines()]
    assert 8 <= len(done_first) < 30
    proc = corral([*args, "--resume"], home, tmp_path)
    watch = TreeWatch(proc.pid)
    watch.until(lambda: proc.poll() is not None)
    _, err = finish(proc)
    assert proc.returncode == 0, err
    assert out.read_bytes().startswith(first)  # what was written is kept as it was
    results = read_results(out)
    assert Counter(r["id"] for r in results) == Counter(f"t{i}" for i in range(30))
    assert {r["status"] for r in results} == {"done"}
    assert f"skipped (in the output already): {len(done_first)}" in err
    assert watch.left() == []


@pytest.mark.slow  # waits for sessions to be running, then for their stop
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_batch_writes_cancelled_results_and_resume_reruns_them(
    tmp_path: Path, home: Path, signum: signal.Signals
) -> None:
    ext = chaos(tmp_path / "exts", "--hang")
    ids = [f"t{i}" for i in range(5)]
    tasks = [{"id": i, "prompt": "go", "extensions": [ext], "script": echo_script(i)} for i in ids]
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    out = tmp_path / "r.jsonl"
    proc = corral(["batch", "tasks.jsonl", "-o", "r.jsonl", "--jobs", "2"], home, tmp_path)
    watch = TreeWatch(proc.pid)
    running = lambda: sum("chaos.py" in " ".join(p.cmdline()) for p in _alive(watch)) >= 2  # noqa: E731
    watch.until(running)
    proc.send_signal(signum)
    _, err = finish(proc)
    assert proc.returncode == 128 + signum.value, err
    assert f"{signum.name}: stopping" in err
    results = read_results(out)
    assert [r["status"] for r in results] == ["cancelled", "cancelled"]
    assert "not run: 3" in err
    assert "--resume" in err
    assert watch.left() == []
    # The same ids, now with an extension that answers: the cancelled run again.
    quick = chaos(tmp_path / "exts2")
    write_tasks(tmp_path / "tasks.jsonl", [{**t, "extensions": [quick]} for t in tasks])
    proc = corral(["batch", "tasks.jsonl", "-o", "r.jsonl", "--resume"], home, tmp_path)
    _, err = finish(proc)
    assert proc.returncode == 0, err
    assert "2 cancelled results run again" in err
    results = read_results(out)
    assert sorted(r["id"] for r in results) == ids
    assert {r["status"] for r in results} == {"done"}


def _alive(watch: TreeWatch) -> list:  # type: ignore[type-arg]
    out = []
    for proc in watch.seen.values():
        try:
            if proc.is_running() and proc.status() != "zombie":
                proc.cmdline()
                out.append(proc)
        except Exception:
            pass
    return out


def test_bad_lines_stop_the_batch_before_anything_starts(tmp_path: Path, home: Path) -> None:
    write_tasks(
        tmp_path / "tasks.jsonl",
        [
            {"id": "a", "prompt": 'say "a"'},
            {"id": "b", "prompt": ""},
            {"id": "c", "prompt": "hi", "extensions": ["missing"]},
            {"id": "\x1b]0;x\x07", "prompt": 'say "d"', "timeout": 0},
        ],
    )
    proc = corral(["batch", "tasks.jsonl", "-o", "r.jsonl"], home, tmp_path)
    _, err = finish(proc)
    assert proc.returncode == 1
    assert err.startswith("Error: 3 task lines are invalid; nothing was started (--skip-invalid")
    assert "tasks.jsonl:2: field prompt: must not be empty" in err
    assert "tasks.jsonl:3: field extensions[0]: " in err
    assert "tasks.jsonl:4: field timeout: " in err
    assert not (tmp_path / "r.jsonl").exists()
    proc = corral(["batch", "tasks.jsonl", "-o", "r.jsonl", "--skip-invalid"], home, tmp_path)
    _, err = finish(proc)
    assert proc.returncode == 0, err
    assert [r["answer"] for r in read_results(tmp_path / "r.jsonl")] == ["a"]
    assert "invalid lines left out: 3" in err
    assert "skipped: " in err


def test_what_others_wrote_is_shown_terminal_safe(tmp_path: Path, home: Path) -> None:
    evil = "t\x1b]0;owned\x07"
    script = [{"error": "bad \x1b[2J news", "status": 400}]
    write_tasks(tmp_path / "tasks.jsonl", [{"id": evil, "prompt": "go", "script": script}])
    proc = corral(["batch", "tasks.jsonl", "-o", "r.jsonl"], home, tmp_path)
    _, err = finish(proc)
    assert proc.returncode == 0, err
    assert "\x1b" not in err
    assert "t\\x1b]0;owned\\x07" in err
    assert "bad \\x1b[2J news" in err
    (result,) = read_results(tmp_path / "r.jsonl")
    assert (result["id"], result["status"]) == (evil, "error")  # exact in the data


def test_on_a_terminal_a_progress_bar_then_a_summary_table(tmp_path: Path, home: Path) -> None:
    script = [{"text": "slow", "delay": 1.0}]
    tasks = [{"id": f"t{i}", "prompt": "go", "script": script} for i in range(3)]
    tasks.append({"id": "bad\x1b[2J", "prompt": "go", "script": [{"error": "no"}]})
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    env = {**os.environ, "CORRAL_HOME": str(home), "PYTHONPATH": str(REPO), "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    code = "import sys; from agent._cli.main import main; sys.exit(main())"
    args = ["-c", code, "batch", "tasks.jsonl", "-o", "r.jsonl", "--jobs", "2"]
    child = pexpect.spawn(sys.executable, args, cwd=str(tmp_path), env=env, dimensions=(40, 120))
    child.expect(pexpect.EOF, timeout=60)
    child.close()
    assert child.exitstatus == 0
    raw = child.before.decode(errors="replace")
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    assert re.search(r"sessions .* 0/4 +0 failed", shown)  # the bar, as it started
    assert re.search(r"4/4 +1 failed +[0-9.]+/s", shown)  # and as it ended
    assert "corral batch" in shown  # the summary table's title
    assert "bad\\x1b[2J" in shown  # the failure, printed above the bar, terminal-safe
    assert "bad\x1b[2J" not in raw
