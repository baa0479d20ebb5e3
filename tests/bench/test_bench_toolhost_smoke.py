"""Smoke test of ``bench/bench_toolhost.py --quick`` through ``bench/run.py``.

It checks that every case is measured and reported as a number; it asserts nothing
about speed (that is what the full benchmark is for, on a quiet machine).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import REPO as ROOT


@pytest.mark.slow
def test_quick_toolhost_bench_reports_every_case(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    out = tmp_path / "rows.json"
    argv = [sys.executable, "bench/run.py", "--quick", "--only", "toolhost", "--json", str(out)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads(out.read_text())
    for row in rows:
        assert row["bench"] == "toolhost"
        assert not row["note"].startswith("error:"), row
        assert math.isfinite(row["value"]), row
        assert row["value"] > 0, row
        assert (row["target"] is None) == (row["ok"] is None), row
    cases = {row["case"] for row in rows}
    for tool in ("extension", "python", "node"):
        assert {f"call.{tool}.seq", f"call.{tool}.conc"} <= cases
    for host in ("python", "node"):
        assert {f"call.{host}.seq_vs_extension", f"call.{host}.conc_vs_extension"} <= cases
    for child in ("extension", "python_raw", "python_typed", "node"):
        assert f"ready.{child}_(no_sandbox)" in cases
    for host in ("python_raw", "python_typed", "node"):
        assert f"ready.{host}_vs_bare" in cases
    assert {"ready.bare_python", "ready.bare_node"} <= cases
