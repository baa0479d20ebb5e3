"""Smoke tests of the benchmark runner: ``bench/run.py --quick --only NAME``.

They check that every case is measured and reported as a number; they assert
nothing about speed (that is what the full benchmark is for, on a quiet machine).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.benchkit import quick_rows
from helpers.paths import REPO

EXPECTED_CASES = {
    "raw.seq",
    "raw.pipelined32",
    "raw.seq_cpu",
    "mcp.seq",
    "mcp.concurrent32",
    "corral.seq",
    "corral.seq_nospin",
    "corral.concurrent32",
    "corral.seq_vs_raw",
    "corral.seq_nospin_vs_raw",
    "corral.seq_cpu",
    "corral.seq_cpu_vs_raw",
    "corral.seq_nospin_cpu_vs_raw",
    "corral.concurrent32_vs_raw_pipelined",
    "raw.callers32",
    "raw.callers32_vs_pipelined",
    "corral.concurrent32_vs_raw_callers32",
    "corral.concurrent32_cpu",
    "raw.pipelined32_cpu",
    "corral.concurrent32_host_busy",
    "corral.seq_vs_mcp",
    "corral.concurrent32_vs_mcp",
    "corral.intercept_chain1",
    "corral.intercept_chain5",
    "corral.stop10_stubborn",
}


@pytest.mark.slow
def test_quick_supervisor_bench_reports_every_case(tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="the MCP comparison needs the 'bench' extra")
    rows = quick_rows("supervisor", tmp_path)
    assert {row["case"] for row in rows} == EXPECTED_CASES
    assert all(row["value"] >= 0 for row in rows)


@pytest.mark.slow
def test_quick_spawn_bench_compares_each_figure_with_its_direct_twin(tmp_path: Path) -> None:
    cases = {row["case"] for row in quick_rows("spawn", tmp_path)}
    for n in (1, 5, 10):
        assert {f"ready{n}", f"ready{n}_direct", f"ready{n}_vs_direct"} <= cases
    assert {"stop5", "stop5_direct", "stop5_vs_direct", "ready1_first_vs_direct"} <= cases


@pytest.mark.slow
def test_quick_sandbox_bench_sets_corral_beside_plain_bwrap(tmp_path: Path) -> None:
    import shutil

    import sandbox

    if sandbox.select_sandbox("auto").backend != "bwrap" or not shutil.which("bwrap"):
        pytest.skip("needs bwrap")
    rows = {row["case"]: row for row in quick_rows("sandbox", tmp_path)}
    for n in (1, 10):
        assert {f"ready{n}.none", f"added{n}.bwrap", f"added{n}.plain_bwrap"} <= set(rows)
        assert {f"corral_share{n}", f"added{n}.view_bwrap", f"corral_share{n}.view"} <= set(rows)
    assert rows["corral_share1"]["target"] == "≤ 1 ms"
    assert rows["corral_share1.view"]["target"] is None
    for kind in ("corral", "plain", "view", "direct"):
        assert f"first_output.{kind}" in rows
    assert rows["first_output.corral_vs_plain"]["target"] == "≤ 1 ms"
    assert {"first_output.corral_vs_view", "first_output.plain_vs_direct"} <= set(rows)
    assert {"first1.auto", "first1.off", "first1.added"} <= set(rows)


@pytest.mark.slow
def test_quick_curves_bench_reports_each_count_and_plots(tmp_path: Path) -> None:
    rows = {row["case"]: row for row in quick_rows("curves", tmp_path)}
    for n in (1, 5, 10):
        assert {f"ready.n{n}", f"rss.n{n}", f"idle_cpu.n{n}", f"call.n{n}"} <= set(rows)
        assert rows[f"call_vs_raw.n{n}"]["value"] > 0
    assert rows["call.flatness"]["target"] == "≤ 1.5"
    assert rows["rss.per_extension"]["unit"] == "KiB"
    assert (REPO / "bench" / "results" / "curves.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_quick_bash_bench_reports_the_repository_case(tmp_path: Path) -> None:
    rows = {row["case"]: row for row in quick_rows("bash", tmp_path)}
    assert "unconfined_p50" in rows
    for case in ("shell_sandbox", "shell_sandbox_repo", "shell_sandbox_nocgroup"):
        # Measured where bwrap works; a row saying why (NaN) where it does not.
        assert f"{case}_p50" in rows or case in rows, sorted(rows)


BATCH_CASES = {
    "local.jobs2",
    "xargs.run_p2",
    "local_vs_xargs",
    "local.host_cpu",
    "local.tree_cpu",
    "shape.two_processes",
    "shape.two_vs_one",
    "memory.base",
    "memory.per_session",
    "memory.tree_per_session",
    "ray.jobs2",
    "ray.local_jobs2",
    "ray_vs_local",
}


@pytest.mark.slow  # corral run processes, a batch, and a two-node Ray cluster
def test_quick_batch_bench_reports_every_case(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="the Ray rows need the 'ray' extra")
    rows = {row["case"]: row for row in quick_rows("batch", tmp_path, timeout=900)}
    assert set(rows) == BATCH_CASES
    assert all(row["value"] > 0 for row in rows.values())
    assert rows["memory.per_session"]["target"] == "≤ 10"
