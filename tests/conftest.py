"""Fixtures for the whole suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """Undo any ``structlog.configure`` a test did (CLI tests run the real entry point)."""
    yield
    structlog.reset_defaults()
