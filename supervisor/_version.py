"""corral's version as the supervisor states it (``hello_ack``, the RPC ``hello``).

A constant, not the installed distribution's metadata: reading that imports
``importlib.metadata`` and scans the path (20-30 ms), which the first spawn of
every host process paid for its ``hello_ack``. ``agent/_version.py`` holds the
same string for ``corral --version`` (and ``pyproject.toml`` reads it there);
``tests/agent/test_cli_surface.py`` checks that the two and the installed metadata agree.
"""

from __future__ import annotations

from typing import Final

__all__ = ["VERSION"]

#: The ``corral`` distribution's version.
VERSION: Final = "0.1.0"
