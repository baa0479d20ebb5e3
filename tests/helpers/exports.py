"""The one check that a package's public surface is exactly its ``__all__`` (httpx's)."""

from __future__ import annotations

import types


def check_exports(package: types.ModuleType) -> None:
    """Fail unless ``package`` exports exactly ``__all__``, each name once, each
    class and function its own (defined in the package) and documented.

    A lazy facade (PEP 562 ``__getattr__``, as ``agent``'s) is asked for every name
    first, so that what it holds afterwards is compared."""
    name = package.__name__
    # A second facade of a package (supervisor.lowlevel) exports names of its
    # package's private modules.
    home = name.split(".")[0]
    for n in package.__all__:
        getattr(package, n)
    public = {
        n
        for n, value in vars(package).items()
        if not n.startswith("_")
        and not isinstance(value, types.ModuleType)
        and n not in ("annotations", "importlib", "typing")
    }
    exported = list(package.__all__)
    # A module is public only when __all__ names it (supervisor.toolkit).
    public |= {n for n in exported if isinstance(getattr(package, n), types.ModuleType)}
    assert len(exported) == len(set(exported)), "duplicates in __all__"
    assert set(exported) == public, set(exported) ^ public
    assert set(exported) <= set(dir(package))
    for n in exported:
        value = getattr(package, n)
        if isinstance(value, type | types.FunctionType):
            assert value.__module__.startswith(home + "."), (n, value.__module__)
            assert (value.__doc__ or "").strip(), f"{n} has no docstring"
