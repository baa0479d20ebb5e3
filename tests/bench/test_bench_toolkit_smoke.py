"""Smoke test of ``bench/bench_toolkit.py --quick`` through ``bench/run.py``.

It checks that every case is measured and reported as a number; it asserts nothing
about speed (that is what the full benchmark is for, on a quiet machine).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.benchkit import quick_rows

EXPECTED_CASES = {
    *(f"decode.{k}" for k in ("strict_text", "repair_aware_text", "added_text")),
    *(f"decode.{k}" for k in ("strict_dict", "repair_aware_dict", "added_dict", "one_repair")),
    *(f"ready.{k}" for k in ("bare_python", "py_runner_raw_tool", "py_runner_typed_tool")),
    "ready.bare_python_msgspec",
    *(f"ready.{k}" for k in ("bare_node", "js_runner", "js_runner_vs_bare")),
    "ready.py_runner_raw_tool_vs_bare",
    "ready.py_runner_typed_tool_vs_bare",
    "ready.py_runner_typed_tool_vs_floor",
    *(f"import.{m}" for m in ("corral_ext", "corral_toolhost", "msgspec")),
    *(f"rt.{k}.{m}" for k in ("py", "js", "ext") for m in ("seq", "concurrent32")),
    *(f"rt.{k}.{m}_vs_ext" for k in ("py", "js") for m in ("seq", "concurrent32")),
}


@pytest.mark.slow
def test_quick_toolkit_bench_reports_every_case(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    rows = quick_rows("toolkit", tmp_path, timeout=180)
    for row in rows:
        # A difference of two timings ("added") may come out below zero in a quick,
        # noisy run; every other figure is a rate, a time or a ratio.
        assert row["value"] >= 0 or row["case"].startswith("decode.added_"), row
    assert {row["case"] for row in rows} == EXPECTED_CASES
