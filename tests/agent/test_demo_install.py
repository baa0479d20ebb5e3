"""``corral demo`` says so when its examples directory is not the examples.

The installed demo (a wheel in a fresh venv, run under bwrap as root and as an
unprivileged user) is tests/sandbox/test_installed_demo.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from agent._cli.main import main

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_demo_with_an_empty_examples_dir_is_a_clear_error(home: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["demo", "--examples", str(empty)], catch_exceptions=False)
    assert result.exit_code == 1
    assert f"--examples {empty}: not the example extensions" in result.output
    assert "hello-py/extension.json" in result.output
    assert "Traceback" not in result.output
