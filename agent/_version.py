"""corral's version, as ``corral --version`` prints it.

``pyproject.toml`` reads it (setuptools' dynamic ``version``, parsed from this
file without importing it) and ``corral --version`` prints it, so the command
does not look it up in the installed metadata (``importlib.metadata``: a
third of a bare ``corral --version``). ``supervisor/_version.py`` states the same
string for the wire (importing the ``supervisor`` package here would cost more);
``tests/agent/test_cli_surface.py`` checks that they and the installed metadata agree.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
