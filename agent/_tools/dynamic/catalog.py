"""Where dynamic tools are kept between sessions: one interface, two stores.

:class:`SqliteCatalog` (production, the stdlib's ``sqlite3``) and
:class:`JsonCatalog` (a JSON file, for tests and for reading by eye) implement
:class:`Catalog`. Both keep entries in creation order, write each change in one
transaction (SQLite's own; for the JSON file a temporary file, ``fsync`` and an
atomic rename under an exclusive ``flock``), so a crash mid-write leaves the
catalog as it was before the change or as it is after it, never between. Every
entry is stored as its own JSON document: a corrupt one is refused by name
(:class:`~.errors.EntryRefused`), the others still load.

Both are blocking: call them from a worker thread. The default location is
``$CORRAL_HOME/state/dynamic-tools.db``; :func:`open_catalog` picks the JSON store
for a path ending in ``.json``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import msgspec

from supervisor.lowlevel import StateFile

from .errors import CatalogError, EntryRefused
from .template import ToolDraft

__all__ = [
    "CATALOG_NAME",
    "Catalog",
    "CatalogEntry",
    "JsonCatalog",
    "SqliteCatalog",
    "open_catalog",
]

CATALOG_NAME = "dynamic-tools.db"
_MAX_FILE = 256 * 1024 * 1024


class CatalogEntry(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """One stored dynamic tool."""

    name: str
    description: str
    parameters: dict[str, Any]
    code: str
    #: When it was created (UTC, ISO 8601).
    created: str
    #: ``hmac-sha256:<hex>`` over everything else (see :mod:`.seal`).
    seal: str
    #: The network destinations it was granted ([] for none).
    network: list[str] = []

    def content(self) -> dict[str, Any]:
        """What the seal covers (``network`` only when granted: older seals still hold)."""
        content: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "code": self.code,
            "created": self.created,
        }
        if self.network:
            content["network"] = self.network
        return content

    def draft(self) -> ToolDraft:
        """The entry as a draft (to check and render)."""
        return ToolDraft(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            code=self.code,
            network=list(self.network),
        )


_entry_decoder = msgspec.json.Decoder(CatalogEntry)
_encoder = msgspec.json.Encoder()


def _decode(raw: bytes, where: str) -> CatalogEntry | EntryRefused:
    try:
        return _entry_decoder.decode(raw)
    except msgspec.DecodeError as exc:
        name = where
        with contextlib.suppress(msgspec.DecodeError, AttributeError, TypeError):
            found = msgspec.json.decode(raw).get("name")
            if isinstance(found, str) and found:
                name = found
        return EntryRefused(name, f"corrupt entry ({exc}); remove it")


class Catalog(Protocol):
    """The store behind the dynamic tools. Every method blocks."""

    @property
    def path(self) -> str:
        """The file the catalog lives in."""
        ...

    def load(self) -> list[CatalogEntry | EntryRefused]:
        """Every entry in creation order; a corrupt one as :class:`EntryRefused`.

        Raises:
            CatalogError: the catalog as a whole cannot be read.
        """
        ...

    def put(self, entry: CatalogEntry) -> None:
        """Add ``entry``, or replace the one of the same name (keeping its place).

        Raises:
            CatalogError: it cannot be written.
        """
        ...

    def remove(self, name: str) -> bool:
        """Remove the entry ``name``; False when there was none.

        Raises:
            CatalogError: it cannot be written.
        """
        ...

    def clear(self) -> int:
        """Remove every entry; returns how many there were.

        Raises:
            CatalogError: it cannot be written.
        """
        ...


def _private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 (in a 0700 directory) if it is missing."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        os.close(fd)


@typing.final
class SqliteCatalog:
    """The catalog in an SQLite database (one row per tool, the entry as JSON)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)

    def __repr__(self) -> str:
        return f"<SqliteCatalog {str(self._path)!r}>"

    @property
    def path(self) -> str:
        """The database file."""
        return str(self._path)

    @contextlib.contextmanager
    def _connect(self, write: bool) -> Iterator[sqlite3.Connection]:
        if not write and not self._path.exists():
            yield sqlite3.connect(":memory:")  # nothing stored yet: an empty catalog
            return
        try:
            _private_file(self._path)
            if self._path.is_symlink() or not self._path.is_file():
                raise CatalogError(self.path, "is not a regular file")
            conn = sqlite3.connect(self._path, timeout=10.0, isolation_level=None)
        except OSError as exc:
            raise CatalogError(self.path, f"cannot open: {exc.strerror}") from exc
        except sqlite3.Error as exc:
            raise CatalogError(self.path, f"cannot open: {exc}") from exc
        try:
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS tools (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                "name TEXT NOT NULL UNIQUE, entry BLOB NOT NULL)"
            )
            yield conn
        except sqlite3.DatabaseError as exc:
            raise CatalogError(
                self.path, f"unreadable ({exc}); move it away to start over"
            ) from exc
        finally:
            conn.close()

    def load(self) -> list[CatalogEntry | EntryRefused]:
        """Every entry in creation order (see :meth:`Catalog.load`)."""
        with self._connect(write=False) as conn:
            try:
                rows = conn.execute("SELECT name, entry FROM tools ORDER BY seq").fetchall()
            except sqlite3.OperationalError:
                return []  # the in-memory stand-in for a missing file has no table
        out: list[CatalogEntry | EntryRefused] = []
        for name, raw in rows:
            data = raw if isinstance(raw, bytes) else str(raw).encode()
            entry = _decode(data, str(name))
            if isinstance(entry, CatalogEntry) and entry.name != name:
                entry = EntryRefused(str(name), f"stored under another name ({entry.name!r})")
            out.append(entry)
        return out

    def put(self, entry: CatalogEntry) -> None:
        """Add or replace ``entry`` in one transaction."""
        with self._connect(write=True) as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO tools (name, entry) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET entry = excluded.entry",
                (entry.name, _encoder.encode(entry)),
            )
            conn.execute("COMMIT")

    def remove(self, name: str) -> bool:
        """Remove ``name`` in one transaction."""
        if not self._path.exists():
            return False
        with self._connect(write=True) as conn:
            return conn.execute("DELETE FROM tools WHERE name = ?", (name,)).rowcount > 0

    def clear(self) -> int:
        """Remove every entry in one transaction."""
        if not self._path.exists():
            return 0
        with self._connect(write=True) as conn:
            return int(conn.execute("DELETE FROM tools").rowcount)


class _JsonFile(msgspec.Struct, kw_only=True):
    version: int = 1
    tools: list[msgspec.Raw] = []


_file_decoder = msgspec.json.Decoder(_JsonFile)


@typing.final
class JsonCatalog:
    """The catalog in one JSON file: ``{"version": 1, "tools": [entry, ...]}``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        self._file = StateFile(self._path)

    def __repr__(self) -> str:
        return f"<JsonCatalog {str(self._path)!r}>"

    @property
    def path(self) -> str:
        """The JSON file."""
        return str(self._path)

    def _read(self) -> list[msgspec.Raw]:
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CatalogError(self.path, f"cannot open: {exc.strerror}") from exc
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(_MAX_FILE + 1)
        if len(data) > _MAX_FILE:
            raise CatalogError(self.path, f"larger than {_MAX_FILE >> 20} MiB")
        try:
            return _file_decoder.decode(data).tools
        except msgspec.DecodeError as exc:
            raise CatalogError(self.path, f"corrupt ({exc}); move it away to start over") from None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            with self._file.locked():
                yield
        except OSError as exc:
            raise CatalogError(self.path, f"cannot lock or write: {exc.strerror}") from exc

    def _write(self, tools: list[msgspec.Raw]) -> None:
        self._file.replace(_encoder.encode(_JsonFile(tools=tools)) + b"\n")

    def load(self) -> list[CatalogEntry | EntryRefused]:
        """Every entry in file order (see :meth:`Catalog.load`)."""
        return [_decode(bytes(raw), f"#{n}") for n, raw in enumerate(self._read(), start=1)]

    def _names(self, tools: list[msgspec.Raw]) -> list[str | None]:
        names: list[str | None] = []
        for raw in tools:
            entry = _decode(bytes(raw), "")
            names.append(entry.name if entry.name else None)
        return names

    def put(self, entry: CatalogEntry) -> None:
        """Add or replace ``entry``; the file is replaced atomically."""
        raw = msgspec.Raw(_encoder.encode(entry))
        with self._locked():
            tools = self._read()
            names = self._names(tools)
            if entry.name in names:
                tools[names.index(entry.name)] = raw
            else:
                tools.append(raw)
            self._write(tools)

    def remove(self, name: str) -> bool:
        """Remove ``name``; the file is replaced atomically."""
        with self._locked():
            tools = self._read()
            kept = [raw for raw, n in zip(tools, self._names(tools), strict=True) if n != name]
            if len(kept) == len(tools):
                return False
            self._write(kept)
        return True

    def clear(self) -> int:
        """Remove every entry; the file is replaced atomically."""
        with self._locked():
            count = len(self._read())
            if count:
                self._write([])
        return count


def open_catalog(path: str | os.PathLike[str]) -> Catalog:
    """The catalog at ``path``: :class:`JsonCatalog` for ``*.json``, else :class:`SqliteCatalog`."""
    if str(path).endswith(".json"):
        return JsonCatalog(path)
    return SqliteCatalog(path)
