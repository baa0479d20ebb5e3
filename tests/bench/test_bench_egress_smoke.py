"""Smoke test of ``bench/bench_egress.py --quick`` through ``run.py``.

It checks that every case is measured and reported as a number; it asserts nothing
about speed (that is what the full benchmark is for, on a quiet machine).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers.benchkit import quick_rows

import sandbox

CASES = {
    "direct.ttfb_ms",
    "direct.MBps",
    *(f"{mode}.{what}" for mode in ("connect", "http") for what in (
        "ttfb_ms", "MBps", "ttfb_overhead_ms", "throughput_vs_direct"
    )),
    "spawn.no_network_ms",
    "spawn.list_ms",
    "spawn.list_added_ms",
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend")
def test_quick_egress_bench_reports_every_case(tmp_path: Path) -> None:
    if sandbox.select_sandbox("auto").backend != "bwrap":
        pytest.skip("a network list needs bwrap")
    rows = quick_rows("egress", tmp_path)
    assert {row["case"] for row in rows} == CASES
    # Differences may be below zero (a list can start faster); the rest is positive.
    assert all(row["value"] > 0 for row in rows if not row["case"].endswith("_overhead_ms")
               and row["case"] != "spawn.list_added_ms")  # fmt: skip
