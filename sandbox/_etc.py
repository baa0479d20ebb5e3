"""The sandbox's ``/etc``: one read-only bind of a directory kept in step with the host's.

A sandbox sees a short list of host ``/etc`` entries, never more. Each bind mount
costs bwrap a mount, a remount and a fresh read of the whole mount table (about
0.15 ms here), and each file it writes into the root about 0.05 ms: a dozen
entries made one way or the other cost 0.8 ms a spawn. So the host keeps a
*mirror*: a directory holding just those entries, which every sandbox gets as
its ``/etc`` in a single read-only bind:

* a link into the system directories (``localtime``) is the same link;
* a world-readable regular file of at most 1 MiB (reached through a link out of
  the system directories too, like ``resolv.conf``) is a copy, with its mode;
* a directory of such files and links (``ld.so.conf.d``, ``alternatives``,
  ``ssl/certs``) is a copy of them;
* anything else (a large or unreadable file, a directory holding directories) is
  an empty placeholder in the mirror, with the real entry bound read-only over it.

It is brought in step at every plan, before bwrap binds it: each entry's identity
(device, inode, mode, size, modification and change times; the latter set only by
the kernel) and, for a copied directory, the identity of each file in it, are
compared with those it was copied from, and a changed entry is copied again
(files and links replaced by rename). An edit of ``/etc/hosts`` therefore reaches
the next spawn, and the extensions already running too (as through a bind of the
host's file). Looking costs a dozen ``lstat`` and more (0.13 ms a plan; 0.25 ms
with the network entries): the entries and the directories on their way are
watched (:mod:`sandbox._inotify`), and while no change is reported, only what the
watch does not cover is looked at (an entry copied through a link to elsewhere).
Every entry is looked at again at least once a second, for what the watch cannot
see (a write through a shared mapping, a network file system).

The mirror lives beside the private tmpfs' mount points (mode 0700, owned by the
host's user, never writable by a sandbox: :mod:`sandbox._mountpoints`) and is
bound by descriptor, checked against the directory made: one replaced by
anyone is never bound, a new one is made.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple, final

from ._inotify import Watch
from ._regular import read_head
from ._runtime import LINUX_SYSTEM_DIRS
from ._within import inside

__all__ = ["ETC", "ETC_NETWORK", "EtcMirror", "own_directory", "stat_identity"]

#: /etc entries every sandbox sees (when present). Deliberately not: passwd, group,
#: shadow, gshadow, sudoers, ssh/, ssl/private/, pki/tls/private/, machine-id.
ETC = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf",
    "hosts", "alternatives", "os-release", "locale.alias", "default/locale", "mime.types",
)  # fmt: skip

#: /etc entries only an extension with network permission needs (name resolution,
#: TLS trust stores).
ETC_NETWORK = (
    "resolv.conf", "host.conf", "gai.conf", "services", "protocols", "ssl/certs",
    "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf", "pki/tls/certs",
    "pki/tls/cert.pem", "pki/tls/openssl.cnf", "pki/ca-trust", "crypto-policies",
)  # fmt: skip

#: Larger files are bound rather than copied.
_MAX_COPY = 1024 * 1024

#: Seconds after which every entry is looked at again, changes reported or not (what
#: the watch cannot see: a write through a shared mapping, a network file system).
_RECHECK = 1.0

_O_PATH = getattr(os, "O_PATH", 0)


def stat_identity(st: os.stat_result) -> tuple[int, ...]:
    """Which file, and which version of it: a rewrite, a chmod or a rename changes it.

    The change time is set by the kernel alone, to the current time.
    """
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _followed(signature: tuple[object, ...] | None) -> bool:
    """Whether :meth:`EtcMirror._signature` followed a link out of the system directories
    (the copy's source is elsewhere, where nothing watches it)."""
    return signature is not None and signature[0] not in ("", "link", "absent")


def _copyable(st: os.stat_result) -> bool:
    # Only what anyone may read: a copy no longer has the owner that limited readers.
    return stat.S_ISREG(st.st_mode) and st.st_size <= _MAX_COPY and bool(st.st_mode & stat.S_IROTH)


def _read(path: str, st: os.stat_result) -> bytes | None:
    """The content of the regular file ``path`` if it is still the file ``st`` describes."""
    same = stat_identity(st)
    data = read_head(
        path, _MAX_COPY + 1, follow_symlinks=False, check=lambda now: stat_identity(now) == same
    )
    return data if data is not None and len(data) == st.st_size else None


def _write(path: str, data: bytes, mode: int) -> None:
    """Create ``path`` (absent) holding ``data`` with permission bits ``mode``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    """Remove whatever is at ``path`` in the mirror (a file, a link or a tree)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _install(temp: str, dest: str) -> None:
    """Move ``temp`` to ``dest``: in one rename where it can (a file or link over one)."""
    try:
        os.replace(temp, dest)
    except OSError:  # a directory on either side
        _remove(dest)
        os.replace(temp, dest)


class _Entry(NamedTuple):
    """An entry as last copied into the mirror."""

    #: What it was copied from (see :meth:`EtcMirror._signature`); None: copy again.
    signature: tuple[object, ...] | None
    #: Names of the regular files copied into it (a copied directory).
    files: tuple[str, ...]
    #: bwrap's arguments binding the real entry over its placeholder, if any.
    bind: tuple[str, ...]


class _Mirror(NamedTuple):
    """One layout's directory: its path and identity when made, and its entries."""

    path: str
    #: Its :func:`stat_identity` when we last changed it.
    identity: tuple[int, ...]
    entries: dict[str, _Entry]
    #: The watch's number (:meth:`Watch.look`) when every entry was last looked at.
    seen: int = -1
    #: When that was (monotonic seconds).
    checked: float = 0.0
    #: The entries the watch covers: a change to them is a change it reports.
    covered: frozenset[str] = frozenset()


@final
class EtcMirror:
    """The ``/etc`` part of bwrap's command line, and the mirror it binds.

    Thread-safe; one per backend.

    Args:
        base: where to keep the mirrors (a directory no sandbox may write; made
            again when needed: :meth:`sandbox._mountpoints.MountPoints.base`).
        source: the host's ``/etc``.
        system: directories every sandbox sees: links into them stay links.
    """

    def __init__(
        self,
        base: Callable[[], str],
        source: str = "/etc",
        system: tuple[str, ...] = LINUX_SYSTEM_DIRS,
    ) -> None:
        self._base = base
        self._source = source
        self._system = system
        self._lock = threading.Lock()
        #: Change notices for the source's entries (see :meth:`_sync`); made when first
        #: needed (a descriptor of the process's: none at import).
        self._watch: Watch | None = None
        self._mirrors: dict[tuple[str, ...], _Mirror] = {}
        #: Each list of names has a directory of its own in ``base``: etc-0, etc-1...
        self._slots: dict[tuple[str, ...], int] = {}

    def args(
        self, network: bool, fds: list[int], *, by_fd: bool = True, under: Iterable[str] = ()
    ) -> list[str]:
        """bwrap's arguments for ``/etc`` (with network permission: the network entries too).

        ``under``: the plan's other mount points inside ``/etc`` (a grant of
        ``/etc/fonts``), which bwrap must be able to create. Descriptors (the
        mirror's, or its parts') are appended to ``fds``; the caller owns them and
        closes them, also when this raises.

        Raises:
            OSError: the mirror cannot be made.
        """
        names = ETC + (ETC_NETWORK if network else ())
        return self.place(names, fds, by_fd=by_fd, under=under)

    def place(
        self,
        names: tuple[str, ...],
        fds: list[int],
        *,
        by_fd: bool = True,
        under: Iterable[str] = (),
    ) -> list[str]:
        """bwrap's arguments showing the entries ``names`` of the source at ``/etc``."""
        under = [os.path.relpath(p, "/etc") for p in under if inside(p, "/etc") and p != "/etc"]
        with self._lock:
            for _ in range(2):
                mirror = self._sync(names)
                fd = os.open(mirror.path, _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
                if stat_identity(os.fstat(fd)) == mirror.identity:
                    break
                os.close(fd)  # replaced since it was made: make it again
                del self._mirrors[names]
            else:
                raise OSError(f"the /etc mirror {mirror.path} keeps changing")
            binds = [a for entry in mirror.entries.values() for a in entry.bind]
            if under:
                try:
                    return [*_spread(fd, mirror.path, "", under, fds, by_fd), *binds]
                finally:
                    os.close(fd)
        if by_fd:
            fds.append(fd)
            return ["--ro-bind-fd", str(fd), "/etc", *binds]
        os.close(fd)  # this bwrap binds by name: the directory just checked
        return ["--ro-bind", mirror.path, "/etc", *binds]

    def _sync(self, names: tuple[str, ...]) -> _Mirror:
        """The mirror of ``names``, each entry brought in step with the source."""
        slot = self._slots.setdefault(names, len(self._slots))
        path = os.path.join(self._base(), f"etc-{slot}")
        mirror = self._mirrors.get(names)
        if mirror is None or mirror.path != path or _identity(path) != mirror.identity:
            _remove(path)
            os.mkdir(path, 0o755)
            os.chmod(path, 0o755)  # whatever the umask
            ident = _identity(path)
            assert ident is not None
            mirror = self._mirrors[names] = _Mirror(path, ident, {})
        # While the watch reports no change, only the entries it does not cover are
        # looked at; every entry is, after a change and at least every _RECHECK.
        if self._watch is None:
            self._watch = Watch()
        now = time.monotonic()
        seen = self._watch.look()
        full = seen != mirror.seen or now - mirror.checked >= _RECHECK
        covered: set[str] = set()
        if full:
            covered = self._watch_entries(self._watch, names)  # a change after it is seen
            seen = self._watch.look()
        changed = False
        for name in names:
            if not full and name in mirror.covered:
                continue
            old = mirror.entries.get(name)
            signature = self._signature(name, old)
            if old is None or signature is None or signature != old.signature:
                mirror.entries[name] = self._copy(mirror.path, name, signature)
                changed = True
            if full and (mirror.entries[name].signature is None or _followed(signature)):
                covered.discard(name)  # copied from elsewhere, or to be copied again
        if changed:  # as we left it: what else changes it is seen (its change time)
            ident = _identity(path)
            assert ident is not None
            mirror = self._mirrors[names] = mirror._replace(identity=ident)
        if full:
            mirror = self._mirrors[names] = mirror._replace(
                seen=seen, checked=now, covered=frozenset(covered)
            )
        return mirror

    def _watch_entries(self, watch: Watch, names: tuple[str, ...]) -> set[str]:
        """Watch the source, each entry and the directories on its way; the entries
        whose every change the watch reports (a missing directory on the way is
        reported when it is made, by the one above it)."""
        done: dict[str, int] = {}

        def add(path: str, directory: bool) -> int:
            if path not in done:
                done[path] = watch.add(path, directory=directory)
            return done[path]

        covered: set[str] = set()
        for name in names:
            here = self._source
            why = add(here, True)
            for part in name.split("/")[:-1]:
                if why:
                    break
                here = os.path.join(here, part)
                why = add(here, True)
            else:
                if not why:
                    why = add(os.path.join(here, os.path.basename(name)), False)
            if why in (0, errno.ENOENT):
                covered.add(name)
        return covered

    def _signature(self, name: str, old: _Entry | None) -> tuple[object, ...] | None:
        """What the entry ``name`` is now: a link's text, else the identities of what
        a copy would be taken from (a directory's files included); None: unreadable.

        ``old``: the entry as last copied (a link's text that did not change needs
        no new look at where it leads: the sandbox resolves it, among its own
        directories)."""
        src = os.path.join(self._source, name)
        try:
            link = os.lstat(src)
            st = link
            target = ""
            if stat.S_ISLNK(link.st_mode):
                target = os.readlink(src)
                shown = ("link", target)
                if (old is not None and old.signature == shown) or self._shows(src):
                    return shown
                st = os.stat(src)
            parts: list[object] = [target, stat_identity(link), stat_identity(st)]
            if old is not None:
                parts += [stat_identity(os.lstat(f"{src}/{f}")) for f in old.files]
        except FileNotFoundError:
            return ("absent",)
        except OSError:
            return None
        return tuple(parts)

    def _shows(self, link: str) -> bool:
        """Whether the link ``link`` leads into the system directories (shown as is)."""
        real = os.path.realpath(link)
        return any(inside(real, d) for d in self._system)

    def _copy(self, mirror: str, name: str, signature: tuple[object, ...] | None) -> _Entry:
        """Make the mirror's ``name`` anew from the source; what it became."""
        src = os.path.join(self._source, name)
        dest = os.path.join(mirror, name)
        entry = _Entry(signature, (), ())
        if signature == ("absent",):
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                _remove(dest)
            return entry
        parent = os.path.dirname(dest)
        os.makedirs(parent, mode=0o755, exist_ok=True)
        temp = os.path.join(parent, f".new-{os.path.basename(dest)}")
        _remove(temp)
        try:
            if signature is not None and signature[0] == "link":
                os.symlink(str(signature[1]), temp)
            else:
                real = os.path.realpath(src)
                st = os.stat(real)
                if _copyable(st):
                    data = _read(real, st)
                    if data is None:
                        return self._placeholder(dest, temp, name, real, st, None)
                    _write(temp, data, stat.S_IMODE(st.st_mode))
                elif stat.S_ISDIR(st.st_mode):
                    copied = _copy_dir(real, temp, st)
                    if copied is None:
                        return self._placeholder(dest, temp, name, real, st, signature)
                    # What _signature will say of it while nothing changes: the
                    # directory's and, taken before each was read, its files'.
                    files = tuple(f for f, _ in copied)
                    if signature is not None:
                        signature = (*signature[:3], *(ident for _, ident in copied))
                    entry = _Entry(signature, files, ())
                else:
                    return self._placeholder(dest, temp, name, real, st, signature)
        except OSError:
            _remove(temp)
            _remove(dest)
            return _Entry(None, (), ())  # vanished or unreadable: nothing shown, tried again
        _install(temp, dest)
        return entry

    def _placeholder(
        self,
        dest: str,
        temp: str,
        name: str,
        real: str,
        st: os.stat_result,
        signature: tuple[object, ...] | None,
    ) -> _Entry:
        """An empty file or directory at ``dest``, the real entry bound over it."""
        _remove(temp)
        if stat.S_ISDIR(st.st_mode):
            os.mkdir(temp, 0o755)
        else:
            _write(temp, b"", 0o444)
        _install(temp, dest)
        return _Entry(signature, (), ("--ro-bind-try", real, f"/etc/{name}"))


def own_directory(path: str) -> os.stat_result | None:
    """``path``'s status if it is a directory (not a link) owned by our user, else None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() else None


def _identity(path: str) -> tuple[int, ...] | None:
    """``path``'s identity (:func:`stat_identity`) if it is a directory of ours."""
    st = own_directory(path)
    return stat_identity(st) if st is not None else None


def _copy_dir(real: str, temp: str, st: os.stat_result) -> list[tuple[str, tuple[int, ...]]] | None:
    """Copy the directory ``real`` (only links and copyable files) to ``temp``; the
    files copied, by name, each with its identity before it was read, or None (it
    holds more: bind it instead)."""
    with os.scandir(real) as it:
        entries = [(e.name, e.stat(follow_symlinks=False)) for e in it]
    if not all(stat.S_ISLNK(s.st_mode) or _copyable(s) for _, s in entries):
        return None
    os.mkdir(temp, 0o700)
    files: list[tuple[str, tuple[int, ...]]] = []
    try:
        for name, s in entries:
            path = os.path.join(real, name)
            if stat.S_ISLNK(s.st_mode):
                os.symlink(os.readlink(path), os.path.join(temp, name))
                continue
            data = _read(path, s)
            if data is None:
                raise FileNotFoundError(path)  # changed while copied: try again
            _write(os.path.join(temp, name), data, stat.S_IMODE(s.st_mode))
            files.append((name, stat_identity(s)))
        os.chmod(temp, stat.S_IMODE(st.st_mode))
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(temp)
        raise
    return sorted(files)


def _spread(
    top: int, path: str, rel: str, under: list[str], fds: list[int], by_fd: bool
) -> list[str]:
    """The mirror's directory ``rel`` shown entry by entry in the sandbox's root (where
    bwrap can create the mount points ``under``), each part holding none bound whole.

    Files are copies (``--file``), links links, directories without a mount point
    inside one bind each, the others spread further. ``top`` is the mirror's
    ``O_PATH`` descriptor, ``path`` its path.
    """
    args = ["--dir", f"/etc/{rel}".rstrip("/")] if rel else []
    for name in sorted(os.listdir(os.path.join(path, rel) if rel else path)):
        if name.startswith(".new-"):
            continue
        part = os.path.join(rel, name)
        dest = f"/etc/{part}"
        st = os.stat(part, dir_fd=top, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            args += ["--symlink", os.readlink(part, dir_fd=top), dest]
        elif stat.S_ISDIR(st.st_mode) and any(inside(u, part) for u in under):
            args += _spread(top, path, part, under, fds, by_fd)
        elif stat.S_ISDIR(st.st_mode):
            if not by_fd:
                args += ["--ro-bind", os.path.join(path, part), dest]
                continue
            flags = _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            fds.append(os.open(part, flags, dir_fd=top))
            args += ["--ro-bind-fd", str(fds[-1]), dest]
        else:
            fds.append(os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=top))
            args += ["--perms", f"{stat.S_IMODE(st.st_mode):04o}", "--file", str(fds[-1]), dest]
    return args
