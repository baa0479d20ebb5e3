"""Binding exactly what was validated: paths opened without following symlinks.

Validating a path as a string and handing the same string to bwrap later leaves
a gap: whoever can write a directory on the way (the extension itself, through a
writable grant, between a crash and its restart) can swap a component for a
symlink, and the next spawn binds something else, up to the host's ``/``. So:

* validation records the identity (device, inode, kind) of each path's real
  target as a :class:`Pin`;
* at every plan, each source is opened again from ``/``, one component at a
  time with ``O_PATH | O_NOFOLLOW`` relative to the previous directory: a symlink
  anywhere on the way is refused, never followed; the descriptor's identity must
  equal the pin's;
* bwrap gets that descriptor (``--bind-fd``/``--ro-bind-fd``), not the path, and
  checks after mounting that the mount is that very inode.

Without ``O_PATH`` (macOS) the same walk is done with ``lstat``; it detects the
change but cannot hand over a descriptor.
"""

from __future__ import annotations

import ctypes
import enum
import errno
import os
import stat
import sys
from typing import Any, final

import msgspec

from ._exceptions import GrantChanged

__all__ = [
    "PathKind",
    "Pin",
    "Walked",
    "carry_pins",
    "changed_pins",
    "check_pins",
    "real_path",
    "walk",
]

_O_PATH = getattr(os, "O_PATH", 0)

#: openat2(2) (Linux 5.6; the same number on every architecture) and its
#: RESOLVE_NO_SYMLINKS: the walk below in one call, for a caller that needs no
#: ancestors. None where it is missing.
_OPENAT2 = 437
_RESOLVE_NO_SYMLINKS = 0x04


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _libc_syscall() -> Any:
    if not sys.platform.startswith("linux") or not _O_PATH:
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    call.restype = ctypes.c_long
    return call


_syscall = _libc_syscall()
_HOW = _OpenHow(flags=_O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, mode=0, resolve=_RESOLVE_NO_SYMLINKS)


class PathKind(enum.Enum):
    """What a pinned path is."""

    #: A directory (bound as a directory).
    DIR = "dir"
    #: Anything else that is not a symlink: a regular file, a socket, a device.
    FILE = "file"


@final
class Pin(msgspec.Struct, frozen=True, kw_only=True):
    """The identity a path had when it was validated (or first bound)."""

    #: Where the sandbox sees it (the bind destination), e.g. the extension's dir.
    path: str
    #: Its real path on the host when it was pinned (no symlinks).
    real: str
    dev: int
    ino: int
    kind: PathKind
    #: For a grant, the manifest's entry as written (e.g. ``"~/notes"``); else "".
    declared: str = ""

    @property
    def key(self) -> str:
        """What the pin stands for across validations: the grant as declared, or the path."""
        return f"declared:{self.declared}" if self.declared else self.path

    def describe(self) -> str:
        """``path`` (and ``real`` when different), for messages."""
        return self.path if self.path == self.real else f"{self.path} (= {self.real})"


@final
class Walked(msgspec.Struct, frozen=True, kw_only=True):
    """The result of :func:`walk`."""

    #: An ``O_PATH`` descriptor to the target (the caller closes it), or -1 without O_PATH.
    fd: int
    dev: int
    ino: int
    kind: PathKind
    #: ``(dev, ino)`` of every directory on the way, ``/`` first.
    ancestors: tuple[tuple[int, int], ...]

    def pin(self, path: str, real: str) -> Pin:
        """The identity found, as a :class:`Pin` for ``path``."""
        return Pin(path=path, real=real, dev=self.dev, ino=self.ino, kind=self.kind)

    def matches(self, pin: Pin) -> bool:
        """True when this is the very file ``pin`` recorded."""
        return (self.dev, self.ino, self.kind) == (pin.dev, pin.ino, pin.kind)


def _kind(mode: int) -> PathKind:
    return PathKind.DIR if stat.S_ISDIR(mode) else PathKind.FILE


def _open_exact(real: str) -> Walked | None:
    """:func:`walk` in one ``openat2`` call, without ancestors; None: walk instead
    (no ``openat2``, or it failed: the walk finds which component, and why)."""
    if _syscall is None:
        return None
    fd = int(_syscall(_OPENAT2, -100, os.fsencode(real), ctypes.byref(_HOW), 24))
    if fd < 0:
        return None
    st = os.fstat(fd)
    if stat.S_ISLNK(st.st_mode):
        os.close(fd)
        return None
    return Walked(fd=fd, dev=st.st_dev, ino=st.st_ino, kind=_kind(st.st_mode), ancestors=())


def walk(real: str, *, keep_fd: bool = True, ancestors: bool = True) -> Walked:
    """Open ``real`` (absolute, normalised) without following any symlink.

    Args:
        real: the path; each of its components must be a real directory or, for
            the last one, a real non-symlink file.
        keep_fd: return an open ``O_PATH`` descriptor (where the platform has one).
        ancestors: record the identities of the directories on the way; without,
            ``ancestors`` is empty and (with ``keep_fd``, on Linux 5.6 and later) the
            path is opened in one ``openat2`` call refusing every symlink, the
            same check as the walk.

    Returns:
        The identity of the target, its ancestors' identities and, if asked, a
        close-on-exec descriptor the caller owns.

    Raises:
        OSError: ``ELOOP`` with ``filename`` set to the component that is a
            symlink; ``ENOENT``, ``ENOTDIR``, ``EACCES`` as the walk met them.
    """
    if not os.path.isabs(real) or os.path.normpath(real) != real:
        raise OSError(errno.EINVAL, "not an absolute, normalised path", real)
    if keep_fd and not ancestors:
        exact = _open_exact(real)
        if exact is not None:
            return exact
    parts = [p for p in real.split("/") if p]
    if not _O_PATH:
        return _walk_lstat(parts)
    dirs: list[tuple[int, int]] = []
    fd = os.open("/", _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        here = ""
        for name in parts:
            dirs.append((st.st_dev, st.st_ino))
            if not stat.S_ISDIR(st.st_mode):
                raise OSError(errno.ENOTDIR, "not a directory", here)
            here += "/" + name
            child = os.open(name, _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = child
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                raise OSError(errno.ELOOP, "is a symlink", here)
        walked = Walked(
            fd=fd if keep_fd else -1,
            dev=st.st_dev,
            ino=st.st_ino,
            kind=_kind(st.st_mode),
            ancestors=tuple(dirs),
        )
    except BaseException:
        os.close(fd)
        raise
    if not keep_fd:
        os.close(fd)
    return walked


def _walk_lstat(parts: list[str]) -> Walked:
    ancestors: list[tuple[int, int]] = []
    here = ""
    st = os.lstat("/")
    for name in parts:
        ancestors.append((st.st_dev, st.st_ino))
        here += "/" + name
        st = os.lstat(here)
        if stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ELOOP, "is a symlink", here)
    return Walked(
        fd=-1, dev=st.st_dev, ino=st.st_ino, kind=_kind(st.st_mode), ancestors=tuple(ancestors)
    )


def real_path(path: str) -> str:
    """``os.path.realpath(path)``, for an existing path in three calls (open it, read
    its name back from ``/proc``) instead of an ``lstat`` per component.

    A name to find a file by, never a check: what is bound is opened again by
    :func:`walk`, which refuses any symlink on the way.
    """
    if _O_PATH and sys.platform.startswith("linux"):
        try:
            fd = os.open(path, _O_PATH | os.O_CLOEXEC)
        except OSError:
            return os.path.realpath(path)
        try:
            found = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            found = ""
        finally:
            os.close(fd)
        if found.startswith("/") and not found.endswith(" (deleted)"):
            return found
    return os.path.realpath(path)


def check_pins(name: str, pins: list[Pin]) -> None:
    """Check that every pinned path still is the file it was, without binding anything.

    Raises:
        GrantChanged: naming the first path that changed.
    """
    for pin in pins:
        try:
            walked = walk(pin.real, keep_fd=False)
        except OSError as exc:
            raise GrantChanged(name, pin.path, f"{exc.strerror}: {exc.filename}") from None
        if not walked.matches(pin):
            raise GrantChanged(name, pin.path, f"now another {walked.kind.value}")


def changed_pins(old: list[Pin], new: list[Pin]) -> list[str]:
    """What both lists pin (same grant as declared, or same path) but differently.

    A grant that now resolves to another path counts: the manifest says the same,
    the disk does not.
    """
    before = {p.key: p for p in old}
    out = []
    for pin in new:
        was = before.get(pin.key)
        if was is None or (was.real, was.dev, was.ino, was.kind) == (
            pin.real, pin.dev, pin.ino, pin.kind
        ):  # fmt: skip
            continue
        where = f"{pin.declared!r} ({was.real} -> {pin.real})" if pin.declared else pin.path
        out.append(f"{where} is no longer the {was.kind.value} it was")
    return out


def carry_pins(old: list[Pin], new: list[Pin]) -> list[Pin]:
    """``new`` plus the pins of ``old`` for paths ``new`` does not pin."""
    have = {p.path for p in new}
    return [*new, *(p for p in old if p.path not in have)]
