"""Trust for MCP servers a project declares: a cloned repo must not start a server.

A project's ``.corral/mcp.json`` is as much code as a project-local extension: a
stdio entry names a program to run, an HTTP entry a URL to send headers (and
``${VAR}`` secrets) to. So, like a project-local extension, a project server
starts only once the user trusted it, and asks again whenever its entry changes.

A pin records, per (project directory, server name), the SHA-256 of the entry as
written (before ``${VAR}`` substitution: trusting an entry does not pin the
secrets it refers to). The pins live in ``$CORRAL_HOME/state/mcp-trust.json``,
locked and replaced atomically, readable only if the user's own. Trust is given
with ``corral tools mcp trust NAME`` in the project, or by answering the prompt
of ``corral chat``; ``run`` and ``rpc`` skip an untrusted server with a warning
naming that command (leaving a server out removes tools; it never weakens a guard).

The user's own ``$CORRAL_HOME/mcp.json`` needs no pin: only the user can write it
(a file others may write is refused when it is read).
"""

from __future__ import annotations

import datetime
import hashlib
import os
import typing
from pathlib import Path

import msgspec

from ..statefile import locked, read_private, replace_file
from .config import Origin, ServerDecl
from .errors import McpConfigError

__all__ = ["McpTrust", "entry_digest", "trust_hint"]

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


def trust_hint(decl: ServerDecl) -> str:
    """The command that trusts ``decl``."""
    return f"corral tools mcp trust {decl.name}"


def _key(decl: ServerDecl) -> str:
    project = os.path.realpath(os.path.dirname(os.path.dirname(decl.path)))
    return f"{project}::{decl.name}"


@typing.final
class McpTrust:
    """The pins of project MCP servers under one corral home. Every method blocks."""

    def __init__(self, home: str | Path) -> None:
        self.path = Path(home) / "state" / "mcp-trust.json"

    def __repr__(self) -> str:
        return f"<McpTrust {str(self.path)!r}>"

    def _pins(self) -> dict[str, _Pin]:
        try:
            data = read_private(self.path, _MAX)
        except OSError as exc:
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
            McpConfigError: the store cannot be read.
        """
        if decl.origin is not Origin.PROJECT:
            return None
        pin = self._pins().get(_key(decl))
        if pin is None:
            why = "is not trusted"
        elif pin.digest != entry_digest(decl):
            why = f"changed since it was trusted on {pin.trusted_at}"
        else:
            return None
        return (
            f"project MCP server {decl.name} ({decl.path}) {why}; review it, then run: "
            f"{trust_hint(decl)}"
        )

    def trust(self, decl: ServerDecl) -> None:
        """Pin ``decl`` as it is now.

        Raises:
            McpConfigError: the store cannot be read or written.
        """
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self._update(_key(decl), _Pin(digest=entry_digest(decl), trusted_at=now))

    def untrust(self, decl: ServerDecl) -> bool:
        """Forget ``decl``'s pin; False when there was none.

        Raises:
            McpConfigError: the store cannot be read or written.
        """
        return self._update(_key(decl), None)

    def _update(self, key: str, pin: _Pin | None) -> bool:
        try:
            with locked(self.path):
                pins = self._pins()
                found = key in pins
                if pin is None:
                    pins.pop(key, None)
                else:
                    pins[key] = pin
                replace_file(self.path, _encoder.encode(_Store(pins=pins)) + b"\n")
        except OSError as exc:
            raise McpConfigError(str(self.path), f"cannot write: {exc.strerror}") from exc
        return found
