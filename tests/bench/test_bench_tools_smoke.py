"""Smoke test of ``bench/bench_mcp.py`` and ``bench/bench_dynamic.py --quick`` through ``run.py``.

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

import sandbox

_CLIENTS = ("sdk", "sdk_trio", "corral", "corral.sandboxed")
MCP_CASES = {
    *(f"{c}.{m}" for c in _CLIENTS for m in ("connect_ms", "call_us", "concurrent16")),
    "corral.call_vs_sdk",
    "corral.concurrent16_vs_sdk",
}
DYNAMIC_CASES = {
    "bare_python_ms",
    *(f"{k}.{v}_ms" for k in ("call", "new_tool") for v in ("unsandboxed", "sandboxed")),
    "call.sandboxed_vs_unsandboxed",
}


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend")
def test_quick_mcp_and_dynamic_benches_report_every_case(tmp_path: Path) -> None:
    if sandbox.select_sandbox("auto").backend != "bwrap":
        pytest.skip("the sandboxed cases need bwrap")
    out = tmp_path / "rows.json"
    argv = [sys.executable, "bench/run.py", "--quick", "--only", "mcp", "dynamic"]
    proc = subprocess.run(
        [*argv, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads(out.read_text())
    # The load average beside the figures (bench/run.py), not a measurement of these.
    rows = [row for row in rows if row["bench"] != "machine"]
    for row in rows:
        assert not row["note"].startswith("error:"), row
        assert isinstance(row["value"], int | float), row
        assert math.isfinite(row["value"]), row
        assert row["value"] > 0, row
        assert (row["target"] is None) == (row["ok"] is None), row
    cases = {(row["bench"], row["case"]) for row in rows}
    assert len(cases) == len(rows)
    assert cases == {("mcp", c) for c in MCP_CASES} | {("dynamic", c) for c in DYNAMIC_CASES}
