"""Trust for MCP servers a project declares: a cloned repo must not start a server.

A project's ``.corral/mcp.json`` is as much code as a project-local extension: a
stdio entry names a program to run, an HTTP entry a URL to send headers (and
``${VAR}`` secrets) to. So, like a project-local extension, a project server
starts only once the user trusted it, and asks again whenever its entry changes.

A pin records, per (project directory, server name), the SHA-256 of the entry as
written (before ``${VAR}`` substitution: trusting an entry does not pin the
secrets it refers to) and of the code it runs from the project: every file or
directory inside the project that its ``command`` or ``args`` name (after
substitution; also as ``--opt=PATH``), a file with the rest of its directory
(what it imports), unless that directory is the project itself (see
:func:`code_paths`). Editing that code, as the agent's ``bash`` may, asks again.
The pins live in ``$CORRAL_HOME/state/mcp-trust.json``, locked and replaced
atomically, readable only if the user's own. Trust is given with ``corral tools
mcp trust NAME`` in the project, or by answering the prompt of ``corral chat``;
``run`` and ``rpc`` skip an untrusted server with a warning naming that command
(leaving a server out removes tools; it never weakens a guard).

The user's own ``$CORRAL_HOME/mcp.json`` needs no pin: only the user can write it
(a file others may write is refused when it is read).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import typing
from pathlib import Path

import msgspec

from supervisor import DirectoryUnhashable
from supervisor.lowlevel import (
    DigestLimits,
    StateFile,
    digest_tree,
    file_sha256,
    read_small_file,
)

from .config import Origin, ServerDecl, expanded
from .errors import McpConfigError

__all__ = ["McpTrust", "code_paths", "entry_digest", "pin_digest", "trust_hint"]

_encoder = msgspec.json.Encoder(order="sorted")
_MAX = 16 * 1024 * 1024


class _Pin(msgspec.Struct, frozen=True, kw_only=True):
    digest: str
    trusted_at: str


class _Store(msgspec.Struct, kw_only=True):
    version: int = 1
    pins: dict[str, _Pin] = {}


_decoder = msgspec.json.Decoder(_Store)


def entry_digest(decl: ServerDecl) -> str:
    """``sha256:<hex>`` of a server's entry as written."""
    return "sha256:" + hashlib.sha256(_encoder.encode(decl.config)).hexdigest()


def _project(decl: ServerDecl) -> str:
    """The project a ``.corral/mcp.json`` belongs to (real path)."""
    return os.path.realpath(os.path.dirname(os.path.dirname(decl.path)))


def code_paths(decl: ServerDecl) -> list[str]:
    """The files and directories inside the project that a stdio server runs.

    Every value of ``command`` and ``args`` (after ``${VAR}`` substitution; the
    part after ``=`` of ``--opt=PATH`` too), absolute or relative to the project,
    that exists inside the project: a directory as itself, a file with its
    directory (its siblings are what a script imports), or alone when that
    directory is the project itself (the rest of the project is data). The project
    named as a whole is data too. Real paths, sorted.
    """
    c = decl.config
    if c.command is None or not decl.path:
        return []
    project = _project(decl)
    with contextlib.suppress(McpConfigError):  # a missing variable: it will not start
        c = expanded(decl)
    values = [c.command or "", *c.args]
    found: set[str] = set()
    for value in [v for a in values for v in (a, a.partition("=")[2]) if v and "\x00" not in v]:
        real = os.path.realpath(os.path.join(project, os.path.expanduser(value)))
        if real == project or not real.startswith(project + "/") or not os.path.exists(real):
            continue
        parent = os.path.dirname(real)
        found.add(parent if os.path.isfile(real) and parent != project else real)
    return sorted(p for p in found if not any(p.startswith(q + "/") for q in found))


def _file_digest(path: str, limit: int) -> str:
    # Not only regular files reach here (a FIFO in the project is neither a file nor
    # a directory): they are refused, never opened to wait for a writer.
    return file_sha256(read_small_file(path, limit))


def pin_digest(decl: ServerDecl, limits: DigestLimits | None = None) -> str:
    """What a pin records: :func:`entry_digest` alone, or with the content of
    :func:`code_paths` (each directory's tree, links out followed; each file).

    Raises:
        McpConfigError: some of that code cannot be read or is too large to pin.
    """
    paths = code_paths(decl)
    if not paths:
        return entry_digest(decl)
    h = hashlib.sha256(entry_digest(decl).encode())
    for path in paths:
        try:
            if os.path.isdir(path):
                part = digest_tree(path, limits).digest
            else:
                part = _file_digest(path, (limits or DigestLimits()).max_bytes)
        except (DirectoryUnhashable, OSError) as exc:
            why = exc.reason if isinstance(exc, DirectoryUnhashable) else exc.strerror
            raise McpConfigError(
                decl.path,
                f"server {decl.name}: {path} cannot be pinned ({why}); put the server's "
                "own files in a directory of their own",
                server=decl.name,
            ) from None
        h.update(f"\0{path}\0{part}".encode())
    return "sha256:" + h.hexdigest()


def trust_hint(decl: ServerDecl) -> str:
    """The command that trusts ``decl``."""
    return f"corral tools mcp trust {decl.name}"


def _key(decl: ServerDecl) -> str:
    return f"{_project(decl)}::{decl.name}"


@typing.final
class McpTrust:
    """The pins of project MCP servers under one corral home. Every method blocks."""

    def __init__(self, home: str | Path) -> None:
        self.path = Path(home) / "state" / "mcp-trust.json"
        self._file = StateFile(self.path, limit=_MAX)

    def __repr__(self) -> str:
        return f"<McpTrust {str(self.path)!r}>"

    def _pins(self) -> dict[str, _Pin]:
        try:
            data = self._file.read()
        except OSError as exc:  # a refusal's strerror is its reason
            raise McpConfigError(str(self.path), exc.strerror or str(exc)) from exc
        if data is None:
            return {}
        try:
            return _decoder.decode(data).pins
        except msgspec.DecodeError as exc:
            raise McpConfigError(
                str(self.path), f"corrupt ({exc}); remove it (every project server asks again)"
            ) from None

    def problem(self, decl: ServerDecl) -> str | None:
        """Why ``decl`` may not start now, or None when it may.

        Raises:
            McpConfigError: the store cannot be read, or the code the server runs
                cannot be pinned.
        """
        if decl.origin is not Origin.PROJECT:
            return None
        pin = self._pins().get(_key(decl))
        if pin is None:
            why = "is not trusted"
        elif pin.digest != pin_digest(decl):
            why = (
                f"changed since it was trusted on {pin.trusted_at} (its entry, or the "
                "files it runs in the project)"
            )
        else:
            return None
        return (
            f"project MCP server {decl.name} ({decl.path}) {why}; review it, then run: "
            f"{trust_hint(decl)}"
        )

    def trust(self, decl: ServerDecl) -> None:
        """Pin ``decl`` as it is now, with the code it runs from the project.

        Raises:
            McpConfigError: the store cannot be read or written, or that code cannot
                be pinned.
        """
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self._update(_key(decl), _Pin(digest=pin_digest(decl), trusted_at=now))

    def untrust(self, decl: ServerDecl) -> bool:
        """Forget ``decl``'s pin; False when there was none.

        Raises:
            McpConfigError: the store cannot be read or written.
        """
        return self._update(_key(decl), None)

    def _update(self, key: str, pin: _Pin | None) -> bool:
        try:
            with self._file.locked():
                pins = self._pins()
                found = key in pins
                if pin is None:
                    pins.pop(key, None)
                else:
                    pins[key] = pin
                self._file.replace(_encoder.encode(_Store(pins=pins)) + b"\n")
        except OSError as exc:
            raise McpConfigError(str(self.path), f"cannot write: {exc.strerror}") from exc
        return found
