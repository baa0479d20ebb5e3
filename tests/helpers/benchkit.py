"""Run one bench module quickly (``bench/run.py --quick --only NAME``) and read its rows."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers.paths import REPO


def quick_rows(bench: str, tmp_path: Path, timeout: float = 300) -> list[dict[str, Any]]:
    """The rows of ``bench``, each checked to be a measured, finite number of that bench.

    Nothing about speed is asserted: that is what the full benchmark is for.
    """
    out = tmp_path / "rows.json"
    argv = [sys.executable, "bench/run.py", "--quick", "--only", bench, "--json", str(out)]
    proc = subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows: list[dict[str, Any]] = json.loads(out.read_text())
    # The load average beside the figures, before and after the run.
    machine = [row["case"] for row in rows if row["bench"] == "machine"]
    assert machine == ["loadavg.before", "loadavg.after"]
    rows = [row for row in rows if row["bench"] != "machine"]
    for row in rows:
        assert row["bench"] == bench
        assert not row["note"].startswith("error:"), row
        assert isinstance(row["value"], int | float), row
        assert math.isfinite(row["value"]), row
        assert (row["target"] is None) == (row["ok"] is None), row
    cases = [row["case"] for row in rows]
    assert len(cases) == len(set(cases)), cases
    return rows
