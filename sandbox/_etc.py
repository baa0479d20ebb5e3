"""The sandbox's ``/etc``: a short list of host entries, small files copied, not mounted.

Every bind mount costs bwrap a mount, a remount and a fresh read of the whole
mount table (which grows with each mount), about 0.15 ms a mount here. ``/etc``
would be a dozen of them, so a small regular file is instead handed to bwrap as a
copy (``--perms MODE --file FD DEST``): bwrap writes it into the sandbox's root
tmpfs, which the plan then remounts read-only. The extension reads the same bytes
with the same permission bits and can write none of them, as with a read-only
bind; the copy is taken at each start, so an edit of ``/etc/hosts`` reaches a
running extension at its next start. Directories (``ld.so.conf.d``,
``alternatives``, ``ssl/certs``), large or unusual files stay read-only binds; a
link into the system directories stays a link.

Each copy is a descriptor of an anonymous memory file the plan passes (and holds
until its cleanup), so directories are not copied file by file. The copies are
cached by the file's identity (device, inode, mode, size, and the modification
and change times, the latter set only by the kernel): a file rewritten or
replaced after a spawn is read again at the next one. The content is written
once into a sealed memory file (:func:`sandbox._seccomp.filter_fd`) that each
spawn opens anew, rather than copied into a new one at every spawn.
"""

from __future__ import annotations

import functools
import os
import stat
import threading
from typing import NamedTuple, final

from ._runtime import LINUX_SYSTEM_DIRS
from ._seccomp import filter_fd
from ._within import inside

__all__ = ["EtcCopies", "stat_identity"]

#: /etc entries every sandbox sees (when present). Deliberately not: passwd, group,
#: shadow, gshadow, sudoers, ssh/, ssl/private/, pki/tls/private/, machine-id.
_ETC = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf",
    "hosts", "alternatives", "os-release", "locale.alias", "default/locale", "mime.types",
)  # fmt: skip

#: /etc entries only an extension with network permission needs (name resolution,
#: TLS trust stores).
_ETC_NETWORK = (
    "resolv.conf", "host.conf", "gai.conf", "services", "protocols", "ssl/certs",
    "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf", "pki/tls/certs",
    "pki/tls/cert.pem", "pki/tls/openssl.cnf", "pki/ca-trust", "crypto-policies",
)  # fmt: skip

#: Larger files are bound rather than copied into the sandbox's memory.
_MAX_COPY = 1024 * 1024


class _Layout(NamedTuple):
    """What each present entry becomes: fixed arguments, and entries to copy."""

    #: ``--symlink`` arguments.
    args: tuple[str, ...]
    #: ``(real source, destination)`` of the others: copied if a small file, else bound.
    copies: tuple[tuple[str, str], ...]


@functools.cache
def _layout(network: bool) -> _Layout:
    args: list[str] = []
    copies: list[tuple[str, str]] = []
    for name in _ETC + (_ETC_NETWORK if network else ()):
        path = f"/etc/{name}"
        if not os.path.lexists(path):
            continue
        real = os.path.realpath(path)
        if os.path.islink(path) and any(inside(real, d) for d in LINUX_SYSTEM_DIRS):
            # e.g. /etc/localtime -> /usr/share/zoneinfo/...: the target is visible.
            args += ["--symlink", os.readlink(path), path]
        else:
            # e.g. /etc/resolv.conf -> /run/systemd/resolve/...: the content.
            copies.append((real, path))
    return _Layout(tuple(args), tuple(copies))


class _Copy(NamedTuple):
    """A file's permission bits and content."""

    mode: int
    data: bytes


def stat_identity(st: os.stat_result) -> tuple[int, ...]:
    """Which file, and which version of it: a rewrite, a chmod or a rename changes it.

    The change time is set by the kernel alone, to the current time.
    """
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _copy(real: str, key: tuple[int, ...]) -> _Copy | None:
    """The content of ``real`` (with identity ``key``); None: bind it instead."""
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        # Only what anyone may read: a copy belongs to the sandbox's user, while a
        # bind keeps the owner, and so who may read it.
        if stat_identity(st) != key or not st.st_mode & stat.S_IROTH:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_COPY:
            return None
        data = os.read(fd, _MAX_COPY + 1)
        return _Copy(stat.S_IMODE(st.st_mode), data) if len(data) == st.st_size else None
    finally:
        os.close(fd)


@final
class EtcCopies:
    """The ``/etc`` part of bwrap's command line, with a cache of the copies.

    Thread-safe; one per backend.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Real path: its identity when read, and its copy (None: bind it).
        self._seen: dict[str, tuple[tuple[int, ...], _Copy | None]] = {}

    def _look(self, real: str) -> _Copy | None:
        """The copy of ``real``, from the cache while its identity is unchanged."""
        try:
            key = stat_identity(os.stat(real))
        except OSError:
            return None
        with self._lock:
            seen = self._seen.get(real)
        if seen is not None and seen[0] == key:
            return seen[1]
        copy = _copy(real, key)
        with self._lock:
            self._seen[real] = (key, copy)
        return copy

    def args(self, network: bool, fds: list[int]) -> list[str]:
        """bwrap's arguments for ``/etc``; the copies' descriptors are appended to ``fds``.

        The caller owns the descriptors (each serves one spawn: bwrap reads it to
        its end) and closes them, also when this raises.
        """
        layout = _layout(network)
        args = list(layout.args)
        for real, dest in layout.copies:
            args += self.place(real, dest, fds)
        return args

    def place(self, real: str, dest: str, fds: list[int]) -> list[str]:
        """bwrap's arguments showing ``real`` (a real path) read-only at ``dest``.

        A copy when it is a file of at most 1 MiB anyone may read, else (a
        directory, large, odd, gone) a read-only bind, if it exists. Descriptors
        of copies are appended to ``fds``.
        """
        copy = self._look(real)
        if copy is None:
            return ["--ro-bind-try", real, dest]
        fds.append(filter_fd(copy.data))  # a rewound memory file, like the filter's
        return ["--perms", f"{copy.mode:04o}", "--file", str(fds[-1]), dest]
