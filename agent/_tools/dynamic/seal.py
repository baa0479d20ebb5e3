"""Binding catalog entries to what corral stored: an HMAC under a per-home key.

A dynamic tool is code the agent wrote and the user was shown (in the transcript,
the audit log, and in ``chat`` before it was created). The catalog must not become
a way to run code the user never saw: a row edited with ``sqlite3``, a JSON file
copied in from elsewhere, an entry whose code changed on disk. So every entry
carries a seal, ``hmac-sha256:<hex>`` over its canonical content (name,
description, schema, code, creation time), under a random key that only corral
writes: ``$CORRAL_HOME/state/dynamic-tools.key`` (32 bytes, mode 0600, in a 0700
directory). An entry whose seal does not match is refused when the catalog is
loaded, naming the entry; nothing of it runs.

The key is as private as the catalog itself (both under ``$CORRAL_HOME``, which the
agent's file tools and sandboxed shell never see); it stops edits by anything that
cannot read it, and it makes a catalog carried to another home worthless there.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import typing
from pathlib import Path
from typing import Any

import msgspec

from supervisor.lowlevel import StateFile

from .catalog import CatalogEntry
from .errors import CatalogError
from .template import ToolDraft

__all__ = ["KEY_NAME", "Sealer", "code_digest"]

KEY_NAME = "dynamic-tools.key"
_KEY_BYTES = 32
_PREFIX = "hmac-sha256:"

_encoder = msgspec.json.Encoder(order="sorted")


def code_digest(code: str) -> str:
    """``sha256:<hex>`` of a tool's code (for the audit log and listings)."""
    return "sha256:" + hashlib.sha256(code.encode()).hexdigest()


@typing.final
class Sealer:
    """Seals and checks entries with the key of one corral home.

    Blocking file-system work on first use: call it from a worker thread.
    """

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / KEY_NAME
        self._key: bytes | None = None

    def __repr__(self) -> str:
        return f"<Sealer {str(self.path)!r}>"

    def _load(self) -> bytes:
        if self._key is not None:
            return self._key
        where = str(self.path)
        if not os.path.lexists(self.path):
            # Made once, under the lock and whole (a temporary file renamed): two
            # sessions starting at once agree on one key, and none reads half of it.
            key_file = StateFile(self.path)
            try:
                with key_file.locked():
                    if not os.path.lexists(self.path):
                        key_file.replace(secrets.token_bytes(_KEY_BYTES))
            except OSError as exc:
                raise CatalogError(where, f"cannot create the key: {exc.strerror}") from exc
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise CatalogError(where, f"cannot open the key: {exc.strerror}") from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
                raise CatalogError(
                    where,
                    "the key must be a regular file of yours with mode 600; remove it "
                    "(every dynamic tool will then be refused: create them again)",
                )
            key = os.read(fd, _KEY_BYTES + 1)
        finally:
            os.close(fd)
        if len(key) != _KEY_BYTES:
            raise CatalogError(where, f"the key is {len(key)} bytes, not {_KEY_BYTES}; remove it")
        self._key = key
        return key

    def seal(self, content: dict[str, Any]) -> str:
        """The seal of ``content`` (a JSON object).

        Raises:
            CatalogError: the key cannot be created or read.
        """
        mac = hmac.new(self._load(), _encoder.encode(content), hashlib.sha256)
        return _PREFIX + mac.hexdigest()

    def entry(self, draft: ToolDraft, created: str) -> CatalogEntry:
        """The catalog entry of a checked ``draft``, sealed.

        Raises:
            CatalogError: the key cannot be created or read.
        """
        entry = CatalogEntry(
            name=draft.name,
            description=draft.description,
            parameters=draft.parameters,
            code=draft.code,
            created=created,
            seal="",
            network=list(draft.network),
        )
        return msgspec.structs.replace(entry, seal=self.seal(entry.content()))

    def matches(self, content: dict[str, Any], seal: str) -> bool:
        """Whether ``seal`` is the seal of ``content`` (compared in constant time).

        Raises:
            CatalogError: the key cannot be read.
        """
        return hmac.compare_digest(self.seal(content), seal)
