"""Each package's public surface is exactly its ``__all__`` (the one check, every facade)."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest
from helpers.exports import check_exports

import agent
import agent.batch
import sandbox
import sandbox.log
import supervisor
import supervisor.lowlevel

_ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = ("agent", "supervisor", "sandbox")


@pytest.mark.parametrize(
    "package",
    [agent, agent.batch, supervisor, supervisor.lowlevel, sandbox, sandbox.log],
    ids=lambda p: p.__name__,
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


def _foreign_private_imports(package: str) -> list[str]:
    """Every ``import``/``from`` in ``package`` that names another package's private module."""
    found: list[str] = []
    for path in sorted((_ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                foreign = parts[0] in _PACKAGES and parts[0] != package
                if foreign and any(p.startswith("_") for p in parts[1:]):
                    found.append(f"{path.relative_to(_ROOT)}:{node.lineno}: {name}")
    return found


@pytest.mark.parametrize("package", _PACKAGES)
def test_no_package_imports_another_package_private_module(package: str) -> None:
    # docs/architecture.md: across a package boundary only through its facades
    # (`supervisor`, `supervisor.lowlevel`, `sandbox`, `sandbox.log`).
    assert _foreign_private_imports(package) == []
