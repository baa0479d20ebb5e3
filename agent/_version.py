"""corral's version: the one place it is written.

``pyproject.toml`` reads it (setuptools' dynamic ``version``, parsed from this
file without importing it) and ``corral --version`` prints it, so the command
does not look it up in the installed metadata (``importlib.metadata``: a
third of a bare ``corral --version``).
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
