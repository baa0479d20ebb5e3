"""Each package's public surface is exactly its ``__all__`` (the one check, three packages)."""

from __future__ import annotations

import types

import pytest
from helpers.exports import check_exports

import agent
import agent.batch
import sandbox
import supervisor


@pytest.mark.parametrize(
    "package", [agent, agent.batch, supervisor, sandbox], ids=lambda p: p.__name__
)
def test_the_package_exports_exactly_all(package: types.ModuleType) -> None:
    check_exports(package)
