"""Whether anything changed in a few files and directories: Linux's inotify.

A :class:`Watch` is told which paths to watch; :meth:`Watch.look` then says, in
one non-blocking read, whether the kernel reported any change to them since the
last look. The kernel queues a notice inside the system call that made the
change, so a change that was complete before a look is seen by that look.

Only changes made through the file system are reported: not writes through a
shared memory mapping, nor changes on another machine (a network file system).
Callers that must see those look for themselves now and then.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import weakref
from typing import Any, final

__all__ = ["Watch"]

# linux/inotify.h
_IN_MODIFY = 0x2
_IN_ATTRIB = 0x4
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000

#: Every change of content, metadata or name, of the path or (a directory) an entry.
_CHANGES = (
    _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO
    | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF
)  # fmt: skip


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1  # noqa: B018 (present?)
    except (OSError, AttributeError):
        return None
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    return libc


@final
class Watch:
    """Change notices for the paths :meth:`add` was given (not thread-safe: its owner
    locks). Without inotify (another system, or the user's limit of instances
    reached), every :meth:`look` reports a change."""

    def __init__(self) -> None:
        libc = _libc()
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC) if libc is not None else -1
        self._libc = libc if fd >= 0 else None
        self._fd = fd
        #: How many looks found a change (see :meth:`look`).
        self._changes = 0
        if fd >= 0:
            weakref.finalize(self, os.close, fd)

    def add(self, path: str, *, directory: bool = False) -> int:
        """Watch ``path`` itself, never what a link there leads to (``directory``:
        only if it is a directory); 0, or why it cannot be watched (an errno:
        ``ENOENT`` missing, ``ENOTDIR`` not a directory, ``ENOSPC`` the limit of
        watches; ``ENOSYS`` without inotify)."""
        if self._libc is None:
            return errno.ENOSYS
        mask = _CHANGES | _IN_DONT_FOLLOW | (_IN_ONLYDIR if directory else 0)
        if self._libc.inotify_add_watch(self._fd, os.fsencode(path), mask) >= 0:
            return 0
        return ctypes.get_errno() or errno.EIO

    def look(self) -> int:
        """A number that changes when anything watched changed since the last look
        (reading every notice queued); a new number every time without inotify."""
        if self._libc is None:
            self._changes += 1
            return self._changes
        changed = False
        while True:
            try:
                if not os.read(self._fd, 65536):
                    break
            except BlockingIOError:
                break
            changed = True
        if changed:
            self._changes += 1
        return self._changes
