"""Whether a path lies at or below another: the one containment test of the sandbox."""

from __future__ import annotations

__all__ = ["inside"]


def inside(path: str, root: str) -> bool:
    """True when ``path`` is ``root`` or lies below it (both absolute and normalised)."""
    return path == root or path.startswith(root.rstrip("/") + "/")
