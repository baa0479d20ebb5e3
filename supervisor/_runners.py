"""Bare program names in ``exec`` (``node``, ``npx``, ``go``), and what runners need.

The seed's ``exec`` is "relative to the manifest"; its reference implementation
reads a name without a slash as a program on ``PATH`` (so that ``node``, ``npx``,
``python3`` work). corral keeps both: a file of that name in the extension's
directory first, then ``PATH`` (:func:`find_on_path`). The lookup uses corral's own
``PATH`` when the manifest is loaded and skips entries an extension or a cloned
project could control: empty and relative ones (``.``, ``node_modules/.bin``), and
absolute ones inside the extension's directory or the project. ``python``,
``python3`` and ``python3.N`` are corral's own interpreter, as ``"language":
"python"`` is (the SDK on ``sys.path``, no version-manager shim).

Some runners need what the sandbox withholds: ``npx`` and its kind fetch packages
from a registry (network), ``tsx``'s CLI opens a unix socket. :func:`runner_note`
says so when the manifest is loaded (``ext list``, the trust screen, start-up), and
:func:`exit_hint` reads a crashed child's stderr for the known symptoms, so the user
learns which permission is missing instead of "no hello within 10 s".
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

from sandbox import Permissions, inside

__all__ = [
    "PYTHON_NAMES",
    "corral_python",
    "exit_hint",
    "find_on_path",
    "project_roots",
    "runner_note",
]

#: Bare names that mean "a Python interpreter": corral runs its own.
PYTHON_NAMES = re.compile(r"^python(3(\.\d+)?)?$")

#: Runners that download what they run, by program name: the first arguments that
#: make them do so (empty: always), and what they fetch from.
_FETCHERS: dict[str, tuple[tuple[str, ...], str]] = {
    "npx": ((), "the npm registry"),
    "pnpx": ((), "the npm registry"),
    "bunx": ((), "the npm registry"),
    "npm": (("exec",), "the npm registry"),
    "pnpm": (("dlx",), "the npm registry"),
    "yarn": (("dlx",), "the npm registry"),
    "bun": (("x",), "the npm registry"),
    "uvx": ((), "the Python package index"),
    "uv": (("tool", "run"), "the Python package index"),
    "pipx": (("run",), "the Python package index"),
}

_EPERM_SOCKET = re.compile(r"listen EPERM: operation not permitted (/\S+)")
#: Node's error object, printed after the stack (the message line may have left the
#: tail): ``code: 'EPERM'``, ``syscall: 'listen'``, ``address: '/tmp/tsx-0/2.pipe'``.
_ADDRESS = re.compile(r"address: '(/[^']+)'")


def _refused_socket(tail: Sequence[str]) -> str:
    """The unix socket a Node program was refused (its ``listen`` got EPERM), or ""."""
    text = "\n".join(tail)
    found = _EPERM_SOCKET.search(text)
    if found:
        return found[1]
    address = _ADDRESS.search(text)
    if address and "code: 'EPERM'" in text and "syscall: 'listen'" in text:
        return address[1]
    return ""


def find_on_path(name: str, skip: Sequence[str]) -> tuple[str | None, list[str]]:
    """The first executable file ``name`` on corral's ``PATH``, and what was skipped.

    Entries that are empty, relative, or inside one of ``skip`` (real paths compared)
    are never searched; an executable of that name in a skipped entry is reported
    (``"<path> (inside <root>)"``) so that the refusal can say why it was not used.
    The path returned is absolute and not resolved (a link keeps its ``bin``
    directory, which is where its installation is found).
    """
    roots = [os.path.realpath(s) for s in skip if s]
    ignored: list[str] = []
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            if entry and os.path.isfile(os.path.join(entry, name)):
                ignored.append(f"{os.path.join(entry, name)} (a relative PATH entry)")
            continue
        candidate = os.path.normpath(os.path.join(entry, name))
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        real_entry = os.path.realpath(entry)
        root = next((r for r in roots if inside(real_entry, r)), None)
        if root is not None:
            ignored.append(f"{candidate} (inside {root})")
            continue
        return candidate, ignored
    return None, ignored


def project_roots(ext_dir: str, project: bool) -> list[str]:
    """What a ``PATH`` lookup for the extension in ``ext_dir`` must not search: its
    directory, the project holding a project-local one (``<project>/.corral/extensions/
    <name>``), and the working directory unless it is the home directory or above it."""
    roots = [ext_dir]
    if project:
        roots.append(os.path.dirname(os.path.dirname(os.path.dirname(ext_dir))))
    try:
        cwd = os.getcwd()
    except OSError:  # removed under us: nothing there to skip
        return roots
    home = os.path.expanduser("~")
    if cwd != "/" and not inside(os.path.realpath(home), os.path.realpath(cwd)):
        roots.append(cwd)
    return roots


def corral_python() -> str:
    """The interpreter a bare ``python3`` means: corral's own."""
    return os.path.abspath(sys.executable)


def runner_note(program: str, args: Sequence[str], permissions: Permissions) -> str:
    """What a runner needs that these permissions withhold, or "" (shown at load time)."""
    name = os.path.basename(program)
    fetcher = _FETCHERS.get(name)
    if fetcher is None or permissions.network:
        return ""
    words, source = fetcher
    if tuple(args[: len(words)]) != words:
        return ""
    what = next((a for a in args[len(words) :] if not a.startswith("-")), "its package")
    return (
        f"{name} fetches {what!r} from {source}, which needs permissions.network; "
        f"grant it, or install {what!r} in the extension's directory and run it from there"
    )


def exit_hint(note: str, tail: Sequence[str], network: bool) -> str:
    """Why the child probably exited, from its stderr ``tail``: "" when nothing is known.

    ``note`` is the manifest's :func:`runner_note` (said again: a runner without the
    network is silent for a minute, so a refusal at the handshake has no tail).
    """
    socket = _refused_socket(tail)
    if socket and not network:
        return (
            f"it could not open the unix socket {socket}: the sandbox allows unix "
            'sockets only with "permissions": {"network": true} (tsx\'s CLI needs '
            "one; running the compiled JavaScript with node does not)"
        )
    return note
