"""The bwrap backend remembers an interpreter's runtime paths, never past a change."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from sandbox import LaunchRequest, select_sandbox
from sandbox._bwrap import BwrapSandbox


@pytest.fixture
def bwrap() -> BwrapSandbox:
    # A backend of its own: its cache starts empty.
    backend = select_sandbox("required")
    assert isinstance(backend, BwrapSandbox)
    return BwrapSandbox(backend.config)


def _base(root: Path, name: str) -> Path:
    """A fake Python installation: ``<root>/<name>/bin/python3.11``."""
    real = root / name / "bin" / "python3.11"
    real.parent.mkdir(parents=True)
    real.write_bytes(b"\x7fELF fake")
    return real


def _venv(root: Path, real: Path) -> Path:
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    python = venv / "bin" / "python"
    python.unlink(missing_ok=True)
    python.symlink_to(real)
    (venv / "pyvenv.cfg").write_text(f"home = {real.parent}\n")
    return python


def _bound(bwrap: BwrapSandbox, tmp_path: Path, interpreter: Path) -> set[str]:
    """What a plan for ``interpreter`` binds read-only under ``tmp_path``."""
    ext = tmp_path / "ext"
    ext.mkdir(exist_ok=True)
    request = LaunchRequest(
        name="demo",
        argv=[str(interpreter), "main.py"],
        env={},
        ext_dir=str(ext),
        data_dir=None,
        interpreter=str(interpreter),
    )
    plan = bwrap.plan(request)
    bwrap.cleanup(plan)
    argv = plan.argv
    dests = {argv[i + 2] for i, a in enumerate(argv) if a in ("--ro-bind-fd", "--ro-bind")}
    return {d for d in dests if d.startswith(str(tmp_path)) and d != str(ext)}


def test_a_venv_pointed_at_another_base_is_noticed(bwrap: BwrapSandbox, tmp_path: Path) -> None:
    one, two = _base(tmp_path, "one"), _base(tmp_path, "two")
    python = _venv(tmp_path, one)
    venv = str(tmp_path / "venv")
    assert _bound(bwrap, tmp_path, python) == {venv, str(tmp_path / "one")}
    assert _bound(bwrap, tmp_path, python) == {venv, str(tmp_path / "one")}  # cached
    time.sleep(0.05)  # past the file system's timestamp granularity
    _venv(tmp_path, two)  # the link and pyvenv.cfg now name the other base
    assert _bound(bwrap, tmp_path, python) == {venv, str(tmp_path / "two")}


def test_a_retargeted_interpreter_link_is_noticed(bwrap: BwrapSandbox, tmp_path: Path) -> None:
    one, two = _base(tmp_path, "one"), _base(tmp_path, "two")
    link = tmp_path / "python"
    link.symlink_to(one)
    assert _bound(bwrap, tmp_path, link) == {str(tmp_path / "one")}
    link.unlink()
    link.symlink_to(two)
    assert _bound(bwrap, tmp_path, link) == {str(tmp_path / "two")}


def test_a_script_interpreter_is_followed_each_time(bwrap: BwrapSandbox, tmp_path: Path) -> None:
    one, two = _base(tmp_path, "one"), _base(tmp_path, "two")
    wrapper = tmp_path / "wrap" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!{one}\n")
    assert _bound(bwrap, tmp_path, wrapper) == {str(wrapper.parent), str(tmp_path / "one")}
    # The script's own identity may not change (same size, same times): its #! line
    # names a path outside it, so a script is never cached.
    other = tmp_path / "one" / "bin" / "python3.11"
    other.unlink()
    other.symlink_to(two)
    assert _bound(bwrap, tmp_path, wrapper) == {str(wrapper.parent), str(tmp_path / "two")}


def test_this_interpreter_plans_the_same_twice(bwrap: BwrapSandbox, tmp_path: Path) -> None:
    first = _bound(bwrap, tmp_path, Path(sys.executable))
    assert _bound(bwrap, tmp_path, Path(sys.executable)) == first
