"""corral's version: the installed distribution's, read once."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["VERSION"]


def _version() -> str:
    try:
        return version("corral")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


#: The ``corral`` distribution's version (``hello_ack``, the RPC ``hello`` response).
VERSION = _version()
