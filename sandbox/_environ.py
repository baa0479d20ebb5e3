"""The environment an extension sees inside a sandbox.

The supervisor has already reduced the host's environment to an allowlist. The
sandbox only rewrites what would otherwise point at something invisible:

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

__all__ = ["sandbox_env"]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


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
        kept = [
            entry
            for entry in out["PATH"].split(":")
            if entry and any(_inside(entry, root) for root in visible)
        ]
        out["PATH"] = ":".join(dict.fromkeys(kept)) or "/usr/bin:/bin"
    return out
