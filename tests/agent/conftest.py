"""Fixtures of the agent tests: private homes, working directories, leak checks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.procs import children, lasting


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """Fail the test if it leaves a child process running."""
    before = {p.pid for p in children()}
    yield
    left = lasting(before)
    assert not left, f"leaked processes: {left}"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private CORRAL_HOME."""
    where = tmp_path / "home"
    where.mkdir()
    monkeypatch.setenv("CORRAL_HOME", str(where))
    return where


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The agent's working directory."""
    where = tmp_path / "work"
    where.mkdir()
    return where


@pytest.fixture
def ext_dir(tmp_path: Path) -> Path:
    """Where tests put their extension directories."""
    where = tmp_path / "exts"
    where.mkdir()
    return where


@pytest.fixture
def clean_http_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No API keys or base URLs of the developer's shell, and no proxies before 127.0.0.1."""
    keys = ["OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]
    proxies = [f"{scheme}_proxy" for scheme in ("http", "https", "all")]
    for var in keys + proxies + [p.upper() for p in proxies]:
        monkeypatch.delenv(var, raising=False)
