"""Each package's public surface is exactly its ``__all__`` (the one check, every facade)."""

from __future__ import annotations

import types

import pytest
from helpers.exports import check_exports

import agent
import sandbox
import supervisor
import supervisor.lowlevel


@pytest.mark.parametrize(
    "package", [agent, supervisor, supervisor.lowlevel, sandbox], ids=lambda p: p.__name__
)
def test_the_package_exports_exactly_all(package: types.ModuleType) -> None:
    check_exports(package)


def test_the_toolkit_is_a_module_too() -> None:
    # docs/toolkit.md calls the builder the module `supervisor.toolkit`: both imports
    # work and name the SDK's own builder (the one tool hosts import as corral_tools).
    from supervisor import toolkit
    from supervisor._sdk import corral_tools
    from supervisor.toolkit import Repair, Tool, tool

    assert toolkit.__all__ == corral_tools.__all__
    assert (tool, Tool, Repair) == (corral_tools.tool, corral_tools.Tool, corral_tools.Repair)
    assert all(getattr(toolkit, n) is getattr(corral_tools, n) for n in toolkit.__all__)


def test_the_toolbox_is_apart_from_the_kernel() -> None:
    # What an embedder needs is in `supervisor`; the agent's plumbing only in
    # `supervisor.lowlevel` (never both).
    assert not set(supervisor.__all__) & set(supervisor.lowlevel.__all__)
    assert "open_child" in supervisor.lowlevel.__all__
    assert "open_supervisor" in supervisor.__all__
