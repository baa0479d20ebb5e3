"""Fixtures of the sandbox package's tests (shared: ``helpers.sandbox_fixtures``)."""

from __future__ import annotations

from helpers.sandbox_fixtures import site, who, world

__all__ = ["site", "who", "world"]
