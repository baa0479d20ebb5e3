"""Lazy package facades (PEP 562): public names imported on first use.

A facade lists where each of its names lives; the first look-up of a name imports
that module and keeps the value in the package, so the next look-ups are plain
attribute reads. ``agent`` and ``agent._tools.web`` use it, so that a command
imports only what it touches (``corral run`` does not load the web tools).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, where: Mapping[str, str], namespace: dict[str, Any], exported: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a lazy facade.

    Args:
        package: the facade's ``__name__``.
        where: public name -> the module (relative to ``package``) defining it, or
            ``.name`` itself for a public submodule.
        namespace: the facade's ``globals()``, where looked-up values are kept.
        exported: the facade's ``__all__``.
    """

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(module, package)
        # A public submodule (``agent.batch``) is its own value.
        value = imported if module == f".{name}" else getattr(imported, name)
        namespace[name] = value  # later look-ups skip this function
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *exported})

    return getattr_, dir_
