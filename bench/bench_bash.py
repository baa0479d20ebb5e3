"""What confining the agent's ``bash`` tool costs per call.

Run from the repository root::

    python bench/bench_bash.py [--quick] [--json-out PATH]   # or: python bench/run.py

The built-in ``bash`` tool runs ``true`` in a fresh workspace, one call after
another: unconfined (``--sandbox off``), then under :func:`sandbox.plan_shell`
(bwrap: host read-only, workspace read-write, ``.corral`` read-only, corral's home
hidden), with a cgroup per call as corral does when it may, and without. The
figure that matters is the difference of the medians: what sandboxing adds to
every call.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import Row, main, median

import sandbox
from agent._cli.logs import configure_logging
from agent._tools.bash import BashTool
from agent._tools.confine import Workspace


async def _no_progress(text: str) -> None:
    return None


async def _calls(tool: BashTool, count: int) -> list[float]:
    for _ in range(3):  # warm-up: the spawner thread, the page cache
        await tool.run("w", {"command": "true"}, _no_progress)
    took: list[float] = []
    for _ in range(count):
        start = time.perf_counter()
        result = await tool.run("b", {"command": "true"}, _no_progress)
        took.append(time.perf_counter() - start)
        assert not result.is_error, result
    return took


async def measure(quick: bool) -> list[Row]:
    """Per-call medians and the sandbox's share (``--quick``: 20 calls each)."""
    configure_logging(level="error")
    count = 20 if quick else 200
    base = Path(tempfile.mkdtemp(prefix="corral-bench-bash-", dir="/var/tmp"))
    try:
        (base / "project").mkdir()
        (base / "home").mkdir()
        ws = Workspace(str(base / "project"), corral_home=str(base / "home"), home=str(base))
        plain = median(await _calls(BashTool(ws, sandbox=None), count)) * 1000
        rows = [
            Row(
                bench="bash",
                case="unconfined_p50",
                value=plain,
                unit="ms",
                note=f"`true` via the bash tool, --sandbox off; {count} calls",
            )
        ]
        variants: list[tuple[str, Any]] = [
            ("shell_sandbox", sandbox.select_sandbox("auto")),
            ("shell_sandbox_nocgroup", sandbox.select_sandbox("auto", cgroups=False)),
        ]
        for case, backend in variants:
            if backend.backend != "bwrap":
                rows.append(Row(bench="bash", case=case, value=float("nan"), unit="ms",
                                note=f"no bwrap backend ({backend.backend})"))  # fmt: skip
                continue
            confined = median(await _calls(BashTool(ws, sandbox=backend), count)) * 1000
            cgroups = "with a cgroup per call" if backend.cgroups else "no cgroup"
            rows.append(Row(bench="bash", case=f"{case}_p50", value=confined, unit="ms",
                            note=f"bwrap, {cgroups}"))  # fmt: skip
            rows.append(Row(bench="bash", case=f"{case}_overhead", value=confined - plain,
                            unit="ms", note="added per call by the sandbox (medians)"))  # fmt: skip
        return rows
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main(measure)
