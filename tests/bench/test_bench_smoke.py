"""Smoke test of the benchmark runner: ``bench/run.py --quick --only supervisor``.

It checks that every case is measured and reported as a number; it asserts nothing
about speed (that is what the full benchmark is for, on a quiet machine).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import REPO as ROOT

EXPECTED_CASES = {
    "raw.seq",
    "raw.pipelined32",
    "mcp.seq",
    "mcp.concurrent32",
    "corral.seq",
    "corral.concurrent32",
    "corral.seq_vs_raw",
    "corral.concurrent32_vs_raw_pipelined",
    "corral.seq_vs_mcp",
    "corral.concurrent32_vs_mcp",
    "corral.intercept_chain1",
    "corral.intercept_chain5",
    "corral.ready1",
    "corral.ready10",
    "corral.ready50",
    "corral.bare_python50",
    "corral.ready50_vs_bare",
    "corral.direct_lean50_ready",
    "corral.ready50_vs_direct",
    "corral.stop50_cooperative",
    "corral.direct_lean50_stop",
    "corral.stop10_stubborn",
    "corral.idle_cpu_s",
    "corral.idle_cpu_pct",
}
ROW_KEYS = {"bench", "case", "value", "unit", "target", "ok", "note"}


@pytest.mark.slow
def test_quick_supervisor_bench_reports_every_case(tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="the MCP comparison needs the 'bench' extra")
    out = tmp_path / "rows.json"
    argv = [sys.executable, "bench/run.py", "--quick", "--only", "supervisor", "--json", str(out)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]

    rows = json.loads(out.read_text())
    assert isinstance(rows, list)
    for row in rows:
        assert set(row) == ROW_KEYS, row
        assert row["bench"] == "supervisor"
        assert not row["note"].startswith("error:"), row
        value = row["value"]
        assert isinstance(value, int | float), row
        assert not isinstance(value, bool), row
        assert math.isfinite(value), row
        assert value >= 0, row
        assert row["ok"] in (True, False, None), row
        assert (row["target"] is None) == (row["ok"] is None), row
    cases = [row["case"] for row in rows]
    assert len(cases) == len(set(cases)), cases
    assert set(cases) == EXPECTED_CASES
    # The table is printed before the JSON.
    assert "corral.seq_vs_raw" in proc.stdout.split("[", 1)[0]
