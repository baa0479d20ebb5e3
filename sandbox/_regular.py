"""Opening a file for reading only once it is known to be a regular file.

A path someone else controls (a cloned repository's manifest, a project's
``pyvenv.cfg``) may lead to a FIFO, whose ``open`` for reading waits for a writer
(or releases one that waits for a reader), or to a device, whose driver an
``open`` calls (``/dev/watchdog`` arms on open). :func:`open_regular` finds the
file with ``O_PATH`` (Linux), which opens nothing, checks its ``fstat``, and only
then opens that very inode for reading through ``/proc/self/fd`` (no second
lookup of the path). Without ``O_PATH`` (macOS) or ``/proc``, the path itself is
opened non-blocking and what was opened is checked the same way.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

__all__ = ["open_regular", "read_head"]

_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
#: Linux's "find, do not open" (0 where there is none: the path is opened directly).
_O_PATH: int = getattr(os, "O_PATH", 0)


def open_regular(
    path: str | os.PathLike[str], *, follow_symlinks: bool = True
) -> tuple[int, os.stat_result]:
    """A descriptor open for reading on the regular file at ``path``, and its status;
    ``(-1, status)`` for anything else (a directory, FIFO, socket, device, or with
    ``follow_symlinks`` false a link), which is never opened for reading.

    The caller closes the descriptor. Never blocks on what the path is.

    Raises:
        OSError: it cannot be found or opened (``FileNotFoundError`` when missing;
            ``EAGAIN`` when, without ``/proc``, it was replaced while being opened).
    """
    nofollow = 0 if follow_symlinks else os.O_NOFOLLOW
    found_st = None
    if _O_PATH:
        found = os.open(path, _O_PATH | os.O_CLOEXEC | nofollow)
        try:
            found_st = os.fstat(found)
            if not stat.S_ISREG(found_st.st_mode):
                return -1, found_st
            try:
                return os.open(f"/proc/self/fd/{found}", _READ), found_st
            except FileNotFoundError:  # no /proc: the path again, then the same checks
                pass
        finally:
            os.close(found)
    try:
        fd = os.open(path, _READ | nofollow)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket (or a device without a driver)
            return -1, os.stat(path, follow_symlinks=follow_symlinks)
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return -1, st
    if found_st is not None and (st.st_dev, st.st_ino) != (found_st.st_dev, found_st.st_ino):
        os.close(fd)
        raise OSError(errno.EAGAIN, "changed while it was being opened", os.fspath(path))
    return fd, st


def read_head(
    path: str,
    limit: int,
    *,
    follow_symlinks: bool = True,
    check: Callable[[os.stat_result], bool] | None = None,
) -> bytes | None:
    """The first ``limit`` bytes of the regular file at ``path``; None for anything
    else (never opened for reading: see :func:`open_regular`), when unreadable, or
    when ``check`` refuses the status of what was opened."""
    try:
        fd, st = open_regular(path, follow_symlinks=follow_symlinks)
    except OSError:
        return None
    if fd < 0:
        return None
    try:
        if check is not None and not check(st):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)
