"""Fixtures for the supervisor tests (helpers live in :mod:`supkit`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.supkit import Kit


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    """A temp CORRAL home plus a directory for extensions."""
    return Kit(tmp_path)
