"""Exceptions of the dynamic tools.

::

    ToolError (agent)
    └── DynamicToolError      a dynamic tool cannot be created, stored or run
        ├── DraftRejected     a new_tool request is invalid (name, schema, code, describe)
        ├── CatalogError      the catalog cannot be read or written
        └── EntryRefused      a catalog entry is corrupt or was changed outside corral

The tools turn every one of them into an error result for the model; the CLI
shows them as one line.
"""

from __future__ import annotations

from ..._exceptions import ToolError

__all__ = ["CatalogError", "DraftRejected", "DynamicToolError", "EntryRefused"]


class DynamicToolError(ToolError):
    """Base of the dynamic tools' errors."""


class DraftRejected(DynamicToolError):
    """A ``new_tool`` request cannot become a tool.

    Attributes:
        name: the requested tool name (as given).
        field: what is wrong: ``name``, ``description``, ``schema``, ``code`` or ``describe``.
        reason: why, without the prefix.
    """

    def __init__(self, name: str, field: str, reason: str) -> None:
        super().__init__(f"new_tool {name!r}: {field}: {reason}")
        self.name = name
        self.field = field
        self.reason = reason


class CatalogError(DynamicToolError):
    """The catalog (or its key) cannot be read or written.

    Attributes:
        path: the file at fault.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"dynamic tool catalog {path}: {message}")
        self.path = path


class EntryRefused(DynamicToolError):
    """A catalog entry is not loaded.

    Attributes:
        name: the entry's name (or its key, when the name cannot be read).
        reason: why: corrupt, or its seal does not match (edited outside corral).
    """

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"dynamic tool {name!r} refused: {reason}")
        self.name = name
        self.reason = reason
