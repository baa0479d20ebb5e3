"""The package's public surface is exactly ``__all__``."""

from __future__ import annotations

import sandbox


def test_all_is_what_the_package_exports() -> None:
    # `annotations` is the __future__ feature object, not an export.
    public = {n for n in dir(sandbox) if not n.startswith("_") and n != "annotations"}
    assert set(sandbox.__all__) == public
    assert sandbox.__all__ == sorted(sandbox.__all__)
    for name in set(sandbox.__all__) - {"SandboxMode"}:  # a typing alias
        value = getattr(sandbox, name)
        if isinstance(value, type) or callable(value):
            assert value.__module__.startswith("sandbox"), name
