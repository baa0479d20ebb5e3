"""The CLI's one error type: a mistake the user can fix, or an unusable setup.

Every command raises :class:`CLIError` for what it reports as one message and exit
status 1 (usage mistakes stay click's own, exit status 2). Messages quote
manifests, paths, logs, git and extension output: every line is made
terminal-safe (:func:`~.safe_text.visible_lines`).
"""

from __future__ import annotations

import click

from .safe_text import visible_lines

__all__ = ["CLIError"]


class CLIError(click.ClickException):
    """A mistake the user can fix, or an unusable setup: ``Error: <message>`` on
    stderr, no traceback, exit status 1."""

    def format_message(self) -> str:
        return "\n".join(visible_lines(self.message))
