"""Content digests of extension directories: what trust is pinned to.

The digest covers every entry below the directory in one canonical order (each
directory's entries sorted by name, depth first): the entry's path relative to the
directory, its kind, its permission bits, and for a regular file its size and
SHA-256, for a symbolic link its target as text. FIFOs, sockets and devices are
recorded and never opened. Owners and timestamps are not covered, so a copy made
by another user digests the same.

A link whose target lies **outside** every directory being digested is code the
walk would otherwise not cover (``helper.py -> ../../scripts/helper.py``, which a
later command may edit): right after the link, the digest records what it
resolves to now, as a :attr:`EntryKind.TARGET` entry (a file's size and SHA-256, a
directory, a missing target, or anything else), and a directory's whole tree below
it, under the link's path. Links in that tree are treated the same way. Links
inside the directory are covered by the walk itself and are not followed.

The walk is bounded (:class:`DigestLimits`); a directory past a bound is refused
with :class:`~supervisor._exceptions.DirectoryUnhashable`, never hashed in part, and
a file that the listed sizes already put past the byte bound is refused unread.
Every directory and file is opened relative to its parent's descriptor with
``O_NOFOLLOW`` and checked against the ``lstat`` that listed it, so swapping a
path for a link while the walk runs cannot lead it outside the directory.

A file's SHA-256 is remembered for the life of the process, keyed by its device and
inode and checked against its size, ``mtime_ns`` and ``ctime_ns``: any write, and
any ``utime`` that tries to hide one, changes ``ctime``. A file whose times are
within :data:`_RACY_NS` of the moment it was read is not remembered, because a
file system with coarse timestamps could hide a second write in the same tick (the
"racy git" rule).
"""

from __future__ import annotations

import enum
import hashlib
import os
import stat
import time
import typing
from collections.abc import Sequence

import msgspec

from sandbox import inside

from ._exceptions import DirectoryUnhashable
from ._smallfile import describe_size

__all__ = ["DigestLimits", "Entry", "EntryKind", "TreeDigest", "digest_tree", "file_sha256"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20
#: Files changed this recently are hashed again next time instead of remembered.
_RACY_NS = 2_000_000_000
#: Remembered file digests at most (then the memory starts afresh).
_CACHE_MAX = 200_000


class EntryKind(enum.Enum):
    """What a directory entry is."""

    #: A directory (its entries follow it).
    DIR = "d"
    #: A regular file (size and SHA-256 recorded).
    FILE = "f"
    #: A symbolic link (its target recorded as text, never followed).
    LINK = "l"
    #: A FIFO, socket or device (recorded, never opened).
    OTHER = "o"
    #: What a link leading outside resolves to: ``payload`` is ``file:<sha256>``,
    #: ``dir`` (its tree follows under the link's path), ``missing`` or ``other``.
    TARGET = "t"


class DigestLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds of one walk; past any of them the directory is refused."""

    #: Entries (files, directories, links) below the directory.
    max_entries: int = 10_000
    #: Bytes of file content in all.
    max_bytes: int = 256 * 1024 * 1024
    #: Directory nesting.
    max_depth: int = 64


class Entry(typing.NamedTuple):
    """One entry of a walk."""

    #: Path relative to the directory, ``/``-separated; ``""`` is the directory itself.
    path: str
    kind: EntryKind
    #: Permission bits (``stat.S_IMODE``).
    mode: int
    #: SHA-256 (hex) of a file's content, or a link's target; ``""`` otherwise.
    payload: str
    #: Bytes of a file's content (0 for anything else).
    size: int = 0


class TreeDigest(msgspec.Struct, frozen=True, kw_only=True):
    """The digest of one directory, and the walk it came from."""

    #: ``sha256:<hex>`` over every entry in order.
    digest: str
    #: Regular files in the directory.
    files: int
    #: Bytes of their content.
    bytes: int
    #: Every entry, in walk order.
    entries: tuple[Entry, ...]
    #: Links whose target lies outside the directory (``path -> target``); what
    #: each resolves to is digested too.
    outside_links: tuple[str, ...] = ()

    def entry(self, path: str) -> Entry | None:
        """The entry at ``path`` (relative), or None."""
        return next((e for e in self.entries if e.path == path), None)


_cache: dict[tuple[int, int], tuple[tuple[int, int, int], str]] = {}


def _record(entry: Entry) -> bytes:
    # NUL cannot occur in a path or link target, so the fields cannot run together.
    path = os.fsencode(entry.path)
    payload = os.fsencode(entry.payload)
    kind = entry.kind.value.encode()
    return b"%s\0%s\0%o\0%d\0%s\n" % (kind, path, entry.mode, entry.size, payload)


def _kind(mode: int) -> EntryKind:
    if stat.S_ISDIR(mode):
        return EntryKind.DIR
    if stat.S_ISREG(mode):
        return EntryKind.FILE
    if stat.S_ISLNK(mode):
        return EntryKind.LINK
    return EntryKind.OTHER


def _ident(st: os.stat_result) -> tuple[int, int, int]:
    """Device, inode and kind: what must not change between listing and opening."""
    return st.st_dev, st.st_ino, stat.S_IFMT(st.st_mode)


def file_sha256(data: bytes) -> str:
    """SHA-256 (hex) of ``data``, as a file entry records it."""
    return hashlib.sha256(data).hexdigest()


@typing.final
class _Walk:
    def __init__(self, root: str, limits: DigestLimits) -> None:
        self.root = root
        self.limits = limits
        self.entries: list[Entry] = []
        self.outside: list[str] = []
        self.bytes = 0
        self.files = 0
        #: Real paths of the directories being digested (the root, followed ones).
        self.covered: list[str] = [root]
        #: The real directory each entry prefix stands for (for resolving links).
        self.base: dict[str, str] = {"": root}

    def refuse(self, reason: str) -> typing.NoReturn:
        raise DirectoryUnhashable(self.root, reason)

    def add(self, entry: Entry) -> None:
        if len(self.entries) > self.limits.max_entries:
            self.refuse(f"more than {self.limits.max_entries} entries")
        self.entries.append(entry)

    def walk(self, fd: int, prefix: str, depth: int) -> None:
        listed: list[tuple[bytes, str, os.stat_result]] = []
        with os.scandir(fd) as it:
            for item in it:
                if len(listed) + len(self.entries) > self.limits.max_entries:
                    self.refuse(f"more than {self.limits.max_entries} entries")
                listed.append((os.fsencode(item.name), item.name, item.stat(follow_symlinks=False)))
        listed.sort()
        for _, name, st in listed:
            path = f"{prefix}{name}"
            kind = _kind(st.st_mode)
            mode = stat.S_IMODE(st.st_mode)
            if kind is EntryKind.DIR:
                if depth + 1 > self.limits.max_depth:
                    self.refuse(f"nested deeper than {self.limits.max_depth} directories")
                self.add(Entry(path, kind, mode, ""))
                child = self._open(name, fd, _DIR_FLAGS, st, path)
                self.base[f"{path}/"] = os.path.join(self.base[prefix], name)
                try:
                    self.walk(child, f"{path}/", depth + 1)
                finally:
                    os.close(child)
            elif kind is EntryKind.FILE:
                self.add(Entry(path, kind, mode, self._hash(name, fd, st, path), st.st_size))
                self.files += 1
            elif kind is EntryKind.LINK:
                target = os.readlink(name, dir_fd=fd)
                self.add(Entry(path, kind, mode, target))
                self.follow(path, os.path.join(self.base[prefix], name), target, depth)
            else:
                self.add(Entry(path, kind, mode, ""))

    def follow(self, path: str, where: str, target: str, depth: int) -> None:
        """After the link ``path`` (at real ``where``), what it resolves to when that
        lies outside every directory being digested."""
        real = os.path.realpath(where)
        if any(inside(real, root) for root in self.covered):
            return
        self.outside.append(f"{path} -> {target}")
        self.target(path, real, depth)

    def target(self, path: str, real: str, depth: int) -> None:
        """A :attr:`EntryKind.TARGET` entry for ``real`` at ``path``, and its tree."""
        try:
            st = os.stat(real, follow_symlinks=False)
        except FileNotFoundError:
            self.add(Entry(path, EntryKind.TARGET, 0, "missing"))
            return
        kind = _kind(st.st_mode)
        mode = stat.S_IMODE(st.st_mode)
        if kind is EntryKind.FILE:
            digest = self._hash(real, None, st, path)
            self.add(Entry(path, EntryKind.TARGET, mode, f"file:{digest}", st.st_size))
            self.files += 1
        elif kind is EntryKind.DIR:
            if depth + 1 > self.limits.max_depth:
                self.refuse(f"nested deeper than {self.limits.max_depth} directories")
            self.add(Entry(path, EntryKind.TARGET, mode, "dir"))
            child = self._open(real, None, _DIR_FLAGS, st, path)
            self.covered.append(real)
            self.base[f"{path}/"] = real
            try:
                self.walk(child, f"{path}/", depth + 1)
            finally:
                os.close(child)
        else:
            self.add(Entry(path, EntryKind.TARGET, mode, "other"))

    def add_outside(self, path: str) -> None:
        """A file or directory outside the directory that will run too (an ``exec``).

        A regular file is recorded as a file entry under its real path (as pins
        made before directories were covered recorded it); anything else as a
        :attr:`EntryKind.TARGET` entry.
        """
        real = os.path.realpath(path)
        if any(inside(real, root) for root in self.covered):
            return
        st = os.stat(real, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            digest = self._hash(real, None, st, real)
            self.add(Entry(real, EntryKind.FILE, stat.S_IMODE(st.st_mode), digest, st.st_size))
            self.files += 1
        else:
            self.target(real, real, 0)

    def _open(
        self, name: str, dir_fd: int | None, flags: int, listed: os.stat_result, path: str
    ) -> int:
        try:
            fd = os.open(name, flags, dir_fd=dir_fd)
        except OSError as exc:
            self.refuse(f"cannot open {path}: {exc.strerror}")
        if _ident(os.fstat(fd)) != _ident(listed):
            os.close(fd)
            self.refuse(f"{path} changed while it was being read")
        return fd

    def _hash(self, name: str, dir_fd: int | None, st: os.stat_result, path: str) -> str:
        signature = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        key = (st.st_dev, st.st_ino)
        known = _cache.get(key)
        if known is not None and known[0] == signature:
            self._count(st.st_size)
            return known[1]
        if self.bytes + st.st_size > self.limits.max_bytes:
            self._refuse_bytes()  # by its listed size: a sparse 2 GiB file is never read
        fd = self._open(name, dir_fd, _FILE_FLAGS, st, path)
        h = hashlib.sha256()
        try:
            while chunk := os.read(fd, _CHUNK):
                self._count(len(chunk))
                h.update(chunk)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        digest = h.hexdigest()
        if (after.st_size, after.st_mtime_ns, after.st_ctime_ns) != signature:
            self.refuse(f"{path} changed while it was being read")
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > _RACY_NS:
            if len(_cache) >= _CACHE_MAX:
                _cache.clear()
            _cache[key] = (signature, digest)
        return digest

    def _count(self, n: int) -> None:
        self.bytes += n
        if self.bytes > self.limits.max_bytes:
            self._refuse_bytes()

    def _refuse_bytes(self) -> typing.NoReturn:
        self.refuse(f"more than {describe_size(self.limits.max_bytes)} of files")


def digest_tree(
    directory: str, limits: DigestLimits | None = None, *, also: Sequence[str] = ()
) -> TreeDigest:
    """Walk ``directory`` (its real path) and digest everything below it.

    ``also`` names files or directories outside the directory to cover too (an
    executable that lives elsewhere, a script its arguments name); each is recorded
    under its real path, after the walk, unless it lies in what was digested already.
    Blocking file-system work: run it in a worker thread from async code.

    Raises:
        DirectoryUnhashable: the directory is past a bound of ``limits``, cannot be
            read, or changed while it was being read.
    """
    root = os.path.realpath(directory)
    walk = _Walk(root, limits or DigestLimits())
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise DirectoryUnhashable(root, f"cannot open: {exc.strerror}") from exc
    try:
        walk.add(Entry("", EntryKind.DIR, stat.S_IMODE(os.fstat(fd).st_mode), ""))
        walk.walk(fd, "", 0)
        for path in also:
            walk.add_outside(path)
    except OSError as exc:
        raise DirectoryUnhashable(root, f"cannot read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    h = hashlib.sha256()
    for entry in walk.entries:
        h.update(_record(entry))
    return TreeDigest(
        digest=f"sha256:{h.hexdigest()}",
        files=walk.files,
        bytes=walk.bytes,
        entries=tuple(walk.entries),
        outside_links=tuple(walk.outside),
    )
