"""``corral demo`` finds its examples after a plain ``pip install``, and says so when it cannot.

The packaging test builds the wheel (offline, with the test environment's setuptools),
installs it into a fresh virtual environment and runs the demo from outside the
checkout. The fresh environment borrows only the *dependencies* from the test
environment (a ``.pth`` line; ``.pth`` files inside it are not processed, so the
editable corral there stays invisible).
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.paths import REPO

from agent._cli.main import main
from agent._version import __version__

pytestmark = pytest.mark.usefixtures("no_leaks")

PIP = [sys.executable, "-m", "pip", "--no-input", "--disable-pip-version-check"]


def test_demo_with_an_empty_examples_dir_is_a_clear_error(home: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["demo", "--examples", str(empty)], catch_exceptions=False)
    assert result.exit_code == 1
    assert f"--examples {empty}: not the example extensions" in result.output
    assert "hello-py/extension.json" in result.output
    assert "Traceback" not in result.output


def test_demo_works_from_an_installed_wheel(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            *PIP,
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(wheels),
            str(REPO),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (wheel,) = wheels.glob("corral-*.whl")  # nothing fetched: no index is needed
    assert wheel.name.startswith(f"corral-{__version__}-")  # pyproject reads agent/_version.py
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [*PIP, "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
    (Path(purelib) / "corral-test-deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CORRAL_HOME")}
    done = subprocess.run(
        [str(venv / "bin" / "corral"), "demo", "--sandbox", "off"],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "demo finished: every step went as expected" in done.stdout
    where = subprocess.run(
        [str(python), "-c", "from agent._cli.demo import default_examples_dir as d; print(d())"],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(purelib), where
