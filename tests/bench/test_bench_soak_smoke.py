"""Smoke test of ``bench/bench_soak.py --quick`` through ``run.py``: 60 prompts through a
real ``corral rpc`` with faults, aborts and reloads.

It checks that every case is reported as a number, and the soak's own checks that
are not about speed (one ``done`` per prompt, nothing refused by the strict API
double, the session file answered and complete, a resumed session answered). The
RSS figure of 60 prompts means nothing: the full run is 3,000.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.benchkit import quick_rows

CASES = {
    "prompts",
    "done_exactly_once",
    "refused",
    "aborts",
    "retries",
    "turns_error",
    "tool_calls",
    "restarts",
    "reloads",
    "compactions",
    "rss_slope",
    "rss_growth",
    "fds_growth",
    "threads_growth",
    "session_pairing",
    "session_user_turns",
    "session_resumes",
    "exit",
    "wall",
}


@pytest.mark.slow
def test_quick_soak_bench_reports_every_case_and_keeps_the_session(tmp_path: Path) -> None:
    rows = {row["case"]: row for row in quick_rows("soak", tmp_path)}
    assert set(rows) == CASES | {"sample.p20", "sample.p40", "sample.p60"}
    for case in ("done_exactly_once", "refused", "session_pairing", "session_user_turns"):
        assert rows[case]["ok"] is True, rows[case]
    assert rows["session_resumes"]["ok"] is True
    assert rows["reloads"]["value"] == 3
    assert rows["tool_calls"]["value"] > 0
