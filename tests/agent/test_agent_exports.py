"""The ``agent`` package exports exactly what ``__all__`` says (httpx's check)."""

from __future__ import annotations

import types

import agent


def test_all_is_what_the_package_exports() -> None:
    public = {
        name
        for name, value in vars(agent).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }
    assert public == set(agent.__all__)
    assert agent.__all__ == sorted(agent.__all__, key=lambda n: (not n.isupper(), n))


def test_every_export_is_documented() -> None:
    for name in agent.__all__:
        value = getattr(agent, name)
        if isinstance(value, type | types.FunctionType):
            assert (value.__doc__ or "").strip(), name
