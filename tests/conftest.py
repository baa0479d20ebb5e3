"""Fixtures for the whole suite."""

from __future__ import annotations

import compileall
import signal
from collections.abc import Iterator

import pytest
import structlog

from supervisor.lowlevel import SDK_DIR

#: Fixtures that live in the helpers package: ``launch`` (an extension as a bare
#: subprocess, for the SDK's and the examples' tests).
pytest_plugins = ["helpers.extproc"]

# A job a non-interactive shell starts in the background ignores SIGINT, and so would
# every process the tests start (an ignored signal stays ignored across exec): the
# tests that stop `corral chat`, `corral run` or `ext logs -f` with Ctrl-C need it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True, scope="session")
def _sdk_bytecode() -> None:
    """Compile the extension SDK once, as ``pip install`` (or ``./dev``) does: a
    checkout has no bytecode, and corral never writes any at run time."""
    compileall.compile_dir(SDK_DIR, quiet=1)


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """Undo any ``structlog.configure`` a test did (CLI tests run the real entry point)."""
    yield
    structlog.reset_defaults()
