"""What the ``corral ext`` commands share: where installed extensions live, the error.

Cancellation: nothing here awaits.
"""

from __future__ import annotations

from pathlib import Path

import click

from supervisor import MANIFEST_NAME, corral_home

from .trust import visible

__all__ = ["cell", "ext_dirs", "installed_dir", "is_git_url"]


def ext_dirs(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[str, ...]:
    """``-e/--ext PATH`` (a click callback): an extension's directory, or its
    ``extension.json`` (the seed's examples point at the manifest too), which means the
    directory that holds it.

    Any other file is refused, naming it. A path that does not exist is left to the
    loader, whose error names it (``no extension.json here``).
    """
    out = []
    for value in values:
        path = Path(value)
        if path.is_file():
            if path.name != MANIFEST_NAME:
                message = f"{value} is a file: give an extension's directory or its {MANIFEST_NAME}"
                raise click.BadParameter(message, ctx, param)
            value = str(path.parent)
        out.append(value)
    return tuple(out)


def installed_dir() -> Path:
    """Where ``corral ext install`` puts extensions: ``$CORRAL_HOME/extensions``."""
    return corral_home() / "extensions"


def is_git_url(source: str) -> bool:
    """Whether ``source`` names a git repository rather than an existing directory."""
    if Path(source).exists():
        return False
    prefixes = ("http://", "https://", "git@", "ssh://", "git://", "file://")
    return source.startswith(prefixes) or source.endswith(".git")


def cell(value: object) -> str:
    """``value`` as one terminal-safe table cell."""
    return visible(str(value))
