"""Smoke test of ``bench/sidebyside.py``: every driver answers every figure asked, a
plugged-in driver gets its own column, and the table has the issue's shape.

It asserts nothing about speed (that is what the full benchmark is for)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _sidebyside(*args: str) -> subprocess.CompletedProcess[str]:
    """``bench/sidebyside.py --reps 1 ARGS...``, run to the end."""
    argv = [sys.executable, str(ROOT / "bench" / "sidebyside.py"), "--reps", "1", *args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="the guardian")
def test_side_by_side_measures_each_driver_and_a_plugged_in_one(tmp_path: Path) -> None:
    out = tmp_path / "sbs.json"
    plugged = f"{sys.executable} {ROOT / 'bench' / 'drivers' / 'bare.py'}"
    proc = _sidebyside(
        "--only", "ready1", "stop1", "rss10", "--json", str(out), "--driver", f"other={plugged}"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {row["case"]: row for row in json.loads(out.read_text())}
    for figure in ("ready1", "stop1", "rss10"):
        for name in ("bare", "corral", "other"):
            assert rows[f"{figure}.{name}"]["value"] > 0
    assert rows["ready1.corral_vs_bare"]["unit"] == "×"
    assert "stop1.corral_vs_other" in rows
    assert rows["stop1.bare_vs_other"]["unit"] == "×"  # the floor against a third one
    assert "stop1.bare_vs_bare" not in rows
    assert "rss10.bare_vs_other" not in rows
    assert rows["rss10.corral_minus_bare"]["target"] == "≤ 4"
    head = proc.stdout.splitlines()[0].split()
    assert head == ["figure", "bare", "corral", "other", "corral", "vs", "bare"]


def test_a_driver_that_breaks_the_protocol_is_named(tmp_path: Path) -> None:
    proc = _sidebyside(
        "--only", "stop1", "--json", str(tmp_path / "x.json"), "--driver", "broken=false"
    )
    assert proc.returncode != 0
    assert "false stop1: exit 1" in proc.stderr


def test_a_run_that_fails_once_is_repeated_and_shown(tmp_path: Path) -> None:
    mark = tmp_path / "failed-once"
    flaky = (
        "import json, os, sys\n"
        f"if not os.path.exists({str(mark)!r}):\n"
        f"    open({str(mark)!r}, 'w').close(); sys.exit('lost an extension')\n"
        "print(json.dumps({'value': 2.0}))"
    )
    out = tmp_path / "x.json"
    proc = _sidebyside(
        "--only", "stop1", "--reps", "1", "--json", str(out),
        "--driver", f"flaky={sys.executable} -c {shlex.quote(flaky)}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = {r["case"]: r for r in json.loads(out.read_text())}
    assert rows["stop1.flaky"]["value"] == 2.0
    assert "a run failed (exit 1), repeated: lost an extension" in proc.stdout


@pytest.mark.skipif(sys.platform != "linux", reason="the guardian")
def test_inner_repetitions_reach_every_driver_and_stderr_is_shown(tmp_path: Path) -> None:
    out = tmp_path / "sbs.json"
    probe = (
        "import json, os, sys; sys.stderr.write('lost 0 calls\\x1b[2J\\n'); "
        "print(json.dumps({'value': float(os.environ['SBS_INNER'])}))"
    )
    probe_driver = f"probe={sys.executable} -c {probe!r}"
    proc = _sidebyside(
        "--only", "stop1", "--inner", "3", "--json", str(out), "--driver", probe_driver
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {row["case"]: row for row in json.loads(out.read_text())}
    assert rows["stop1.probe"]["value"] == 3
    assert "each the median of 3" in rows["stop1.corral"]["note"]
    assert rows["stop1.bare"]["value"] > 0
    # What a driver says on stderr is shown, without its terminal escapes.
    assert "  stop1.probe: lost 0 calls[2J" in proc.stdout.splitlines()
    assert "\x1b" not in proc.stdout
