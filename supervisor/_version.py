"""corral's version: the installed distribution's, read once, on first use.

Reading a distribution's metadata imports ``importlib.metadata`` and scans the
path (25-30 ms): a command that never says its version (``corral run``) should
not pay for it, so ``VERSION`` is computed when first asked for (PEP 562).
"""

from __future__ import annotations

import functools
import typing

__all__ = ["VERSION", "corral_version"]

if typing.TYPE_CHECKING:
    #: The ``corral`` distribution's version (``hello_ack``, the RPC ``hello`` response).
    VERSION: str


@functools.cache
def corral_version() -> str:
    """The ``corral`` distribution's version (read once)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("corral")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str) -> str:
    if name == "VERSION":
        return corral_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
