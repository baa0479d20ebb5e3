"""The environment a confined process starts from, and what a sandbox rewrites in it.

Nothing corral starts (extensions, the ``bash`` tool) inherits the host's
environment: :func:`host_environment` keeps a small allowlist of it (``PATH``,
``HOME``, ``TERM``, ``TMPDIR``, ``USER`` and the locale variables) plus names the
caller asks for by name. Inside a sandbox, :func:`sandbox_env` then rewrites what
would otherwise point at something invisible:

* ``HOME`` becomes the extension's data directory (its persistent, private home,
  like Flatpak's ``~/.var/app/<id>``), or the private ``/tmp`` without one;
* ``TMPDIR`` becomes the private tmp;
* ``PATH`` keeps only the directories that exist in the sandbox, so a lookup never
  walks into a version-manager shim directory that is not there.

Everything is passed through the process environment, never as ``--setenv``
arguments: a command line is readable by every local user in ``/proc/<pid>/cmdline``,
and the environment may hold the secrets the manifest asked for.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["ALLOWED_ENV", "host_environment", "sandbox_env"]

#: Host variables every confined process sees (when the host has them): the basics,
#: and the locale variables of POSIX and glibc, no other ``LC_*`` name (the host's
#: environment may carry anything under that prefix).
ALLOWED_ENV = (
    "PATH", "HOME", "TERM", "TMPDIR", "USER",
    "LANG", "LANGUAGE", "LC_ALL", "LC_ADDRESS", "LC_COLLATE", "LC_CTYPE",
    "LC_IDENTIFICATION", "LC_MEASUREMENT", "LC_MESSAGES", "LC_MONETARY", "LC_NAME",
    "LC_NUMERIC", "LC_PAPER", "LC_TELEPHONE", "LC_TIME",
)  # fmt: skip


def host_environment(extra: Iterable[str] = ()) -> dict[str, str]:
    """The allowlisted part of the host's environment (:data:`ALLOWED_ENV`), plus the
    variables named in ``extra`` (a manifest's ``permissions.env``), where set."""
    get = os.environ.get  # one lookup per name (each start asks)
    return {name: value for name in (*ALLOWED_ENV, *extra) if (value := get(name)) is not None}


def sandbox_env(
    env: dict[str, str],
    *,
    home: str,
    tmp: str,
    visible: list[str] | None = None,
) -> dict[str, str]:
    """Rewrite ``env`` for a sandboxed run.

    Args:
        env: the environment the supervisor built.
        home: the value of ``HOME`` inside.
        tmp: the value of ``TMPDIR`` inside.
        visible: directories visible inside; when given, ``PATH`` is filtered to them.

    Returns:
        A new dictionary.
    """
    out = dict(env)
    out["HOME"] = home
    out["TMPDIR"] = tmp
    if visible is not None and "PATH" in out:
        roots = set(visible)  # an entry that is one of them, or lies below one
        below = tuple(root.rstrip("/") + "/" for root in visible)
        kept = [
            entry
            for entry in out["PATH"].split(":")
            if entry and (entry in roots or entry.startswith(below))
        ]
        out["PATH"] = ":".join(dict.fromkeys(kept)) or "/usr/bin:/bin"
    return out
