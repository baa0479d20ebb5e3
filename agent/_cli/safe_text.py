"""Text from others, made safe to show on a terminal: the CLI's name for
:mod:`supervisor.lowlevel`'s sanitiser (the supervisor cleans extension panels with it
too, so there is one definition of "terminal-safe")."""

from __future__ import annotations

from supervisor.lowlevel import StreamSanitizer, visible, visible_lines

__all__ = ["StreamSanitizer", "visible", "visible_lines"]
