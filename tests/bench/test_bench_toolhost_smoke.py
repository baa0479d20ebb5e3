"""Smoke test of ``bench/bench_toolhost.py --quick`` through ``bench/run.py``.

It checks that every case is measured and reported as a number; it asserts nothing
about speed (that is what the full benchmark is for, on a quiet machine).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.benchkit import quick_rows


@pytest.mark.slow
def test_quick_toolhost_bench_reports_every_case(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    rows = quick_rows("toolhost", tmp_path)
    assert all(row["value"] > 0 for row in rows), rows
    cases = {row["case"] for row in rows}
    for tool in ("extension", "python", "node"):
        assert {f"call.{tool}.seq", f"call.{tool}.conc"} <= cases
    for host in ("python", "node"):
        assert {f"call.{host}.seq_vs_extension", f"call.{host}.conc_vs_extension"} <= cases
    for child in ("extension", "python_raw", "python_typed", "node"):
        assert {
            f"ready.{child}.bare",
            f"ready.{child}.corral",
            f"ready.{child}.corral_vs_bare",
        } <= cases
    for host in ("python_raw", "python_typed", "node"):
        paired = {f"ready.{host}.direct_vs_bare", f"ready.{host}.corral_vs_direct"}
        assert {f"ready.{host}.direct", *paired} <= cases
