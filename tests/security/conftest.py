"""Fixtures of the end-to-end attack and trust tests (shared: ``helpers.sandbox_fixtures``)."""

from __future__ import annotations

from helpers.sandbox_fixtures import site, who, world

__all__ = ["site", "who", "world"]
