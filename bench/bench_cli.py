"""How fast the ``corral`` command answers: start-up of the cheap commands and imports.

* ``version`` / ``help`` / ``run_help`` / ``ext_list_help``: wall time of
  ``corral --version``, ``corral --help``, ``corral run --help`` and
  ``corral ext list --help`` as the console script runs them (a fresh interpreter
  each time), target under 150 ms for the first two;
* ``run_offline``: ``corral run --provider offline hi`` with no extension (a
  fresh home, an empty working directory): a whole prompt, target under 300 ms;
* ``python``: a bare ``python -c pass`` on the same machine, the floor under all of them;
* ``import.<module>``: ``python -X importtime`` total of one import in a fresh
  interpreter (``agent`` is the facade, lazy; ``agent._cli.main`` is what every
  command imports; ``agent._cli.render`` pulls in rich for rendered output).

Every command runs from cached bytecode, as an installed corral does (pip compiles
it): ``PYTHONDONTWRITEBYTECODE`` is dropped, the bytecode goes to a cache directory
in the temporary home (``PYTHONPYCACHEPREFIX``, nothing written into the checkout)
and the first run of each command, which compiles, is not counted. Without that, a
shell with ``PYTHONDONTWRITEBYTECODE=1`` and a checkout without ``__pycache__``
would time the compiler on every run, not corral.

Figures are medians, in milliseconds. The machine is shared, so expect noise of
a few milliseconds; the bench takes the median of many runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, Row, Rows, main, median

#: Commands that must answer at once (the issue's target).
TARGET_MS = 150.0
#: A whole offline prompt without extensions.
RUN_TARGET_MS = 300.0


def _corral() -> list[str]:
    script = Path(sys.executable).with_name("corral")
    if script.exists():
        return [str(script)]
    found = shutil.which("corral")
    return [found] if found else [sys.executable, "-m", "agent._cli.main"]


def _env(home: str) -> dict[str, str]:
    env = dict(os.environ)
    env["CORRAL_HOME"] = home
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(home, "pycache")
    return env


def _wall(argv: list[str], env: dict[str, str], reps: int, cwd: str | Path = ROOT) -> float:
    times = []
    for _ in range(reps + 1):  # the first run compiles the bytecode: not counted
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return median(times[1:]) * 1000


_IMPORT_LINE = re.compile(r"import time:\s+\d+\s+\|\s+(\d+)\s+\|\s*(\S+)$")


def _import_ms(module: str, env: dict[str, str], reps: int) -> float:
    """Cumulative import time of ``module`` alone, by ``-X importtime``."""
    totals = []
    for _ in range(reps + 1):  # the first run compiles the bytecode: not counted
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        top = module.split(".")[0]
        total = 0
        for line in proc.stderr.splitlines():
            m = _IMPORT_LINE.match(line)
            # Top-level lines (no indentation in the name column) add up to the whole.
            if m and not line.split("|")[2].startswith("  ") and m.group(2).startswith(top):
                total += int(m.group(1))
        totals.append(total / 1000)
    return median(totals[1:])


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(quick: bool) -> list[Row]:
    """Start-up of ``corral --version``, ``--help`` and friends; import costs."""
    reps = 5 if quick else 21
    rows = Rows("cli")
    corral = _corral()
    with tempfile.TemporaryDirectory(prefix="corral-bench-cli-") as home:
        env = _env(home)
        with rows.guard("python"):
            rows.add("python", _wall([sys.executable, "-c", "pass"], env, reps), "ms")
        cases = {
            "version": (["--version"], True),
            "help": (["--help"], True),
            "run_help": (["run", "--help"], False),
            "ext_list_help": (["ext", "list", "--help"], False),
        }
        for case, (args, targeted) in cases.items():
            with rows.guard(case):
                ms = _wall([*corral, *args], env, reps)
                if targeted:
                    rows.add(case, ms, "ms", target=f"< {TARGET_MS:g}", ok=ms < TARGET_MS)
                else:
                    rows.add(case, ms, "ms")
        with rows.guard("run_offline"), tempfile.TemporaryDirectory() as empty:
            argv = [*corral, "run", "--provider", "offline", "hi"]
            ms = _wall(argv, env, reps, cwd=empty)
            target = f"< {RUN_TARGET_MS:g}"
            note = "a whole prompt, no extension; load average " + _load()
            rows.add("run_offline", ms, "ms", target=target, ok=ms < RUN_TARGET_MS, note=note)
        for module in ("agent", "agent._cli.main", "agent._cli.agent_cmds", "agent._cli.render"):
            with rows.guard(f"import.{module}"):
                rows.add(f"import.{module}", _import_ms(module, env, reps), "ms")
    return rows.rows


if __name__ == "__main__":
    main(measure)
