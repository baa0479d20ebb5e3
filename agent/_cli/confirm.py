"""The one confirmation rule of every destructive or trusting command.

``ext trust``, ``ext remove``, ``tools mcp trust``, ``tools clear`` and
``sessions rm`` ask y/N on a terminal; without one (a script, ``</dev/null``, a
pipe) they never read an answer from stdin: only ``-y`` goes ahead. Anything but
yes changes nothing.
"""

from __future__ import annotations

import sys

import click

from .errors import CLIError

__all__ = ["confirm"]


def confirm(question: str, yes: bool, *, declined: str, what: str = "go ahead") -> None:
    """Ask ``question`` y/N on a terminal; without one, only ``yes`` (``-y``) goes ahead.

    Raises:
        CLIError: no terminal and no ``-y`` (the message says to add it, and what
            it would do), or an answer other than yes (``declined``).
    """
    if yes:
        return
    if not sys.stdin.isatty():
        raise CLIError(f"not asking without a terminal: add -y to {what}")
    if not click.confirm(question, default=False):
        raise CLIError(declined)
