"""Facts about the terminal the CLI writes to: colour mode and interactivity.

Cheap to import (no rich): ``corral --help`` reads it. The rendering itself is in
:mod:`~agent._cli.screen`.
"""

from __future__ import annotations

import enum
import os
from typing import TextIO

import click

__all__ = ["ColorMode", "color_mode", "is_terminal", "set_color_mode", "wants_color"]


class ColorMode(enum.Enum):
    """``--color``: when human output is coloured."""

    #: On a terminal, unless ``NO_COLOR`` is set.
    AUTO = "auto"
    #: Always, even into a pipe or a file.
    ALWAYS = "always"
    #: Never.
    NEVER = "never"


_META_KEY = "corral.color"


def color_mode() -> ColorMode:
    """The ``--color`` of the running ``corral`` command (AUTO outside one)."""
    ctx = click.get_current_context(silent=True)
    found = ctx.meta.get(_META_KEY) if ctx is not None else None
    return found if isinstance(found, ColorMode) else ColorMode.AUTO


def set_color_mode(ctx: click.Context, mode: ColorMode) -> None:
    """Record ``--color`` for the commands below ``ctx``."""
    ctx.meta[_META_KEY] = mode


def is_terminal(stream: TextIO) -> bool:
    """True when ``stream`` is a terminal (False for anything without ``isatty``)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def wants_color(stream: TextIO, mode: ColorMode | None = None) -> bool:
    """Whether to colour what goes to ``stream`` (``NO_COLOR`` wins over AUTO)."""
    mode = mode or color_mode()
    if mode is ColorMode.ALWAYS:
        return True
    if mode is ColorMode.NEVER or os.environ.get("NO_COLOR"):
        return False
    return is_terminal(stream)
