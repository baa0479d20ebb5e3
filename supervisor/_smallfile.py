"""Reading a small file that someone else may control, without hanging or filling memory.

Whatever a cloned repository or an extension's directory holds is hostile: an
``extension.json`` or ``.corral/config.toml`` may be a FIFO (an ``open`` for reading
waits for a writer forever), a link to ``/dev/zero`` (a read never ends) or a sparse
file of gigabytes. :func:`read_small_file` reads such a file in steps:

* the file is opened for reading only once its ``fstat`` says it is a regular file
  (:func:`sandbox.open_regular`: found with ``O_PATH``, then that very inode
  opened), so a FIFO is never waited on and a device's driver never called
  (opening ``/dev/watchdog`` arms it); anything else is refused, and so is a file
  larger than the cap, before a byte is read;
* ``read`` to the end, never past the cap (a file may grow after the ``fstat``, and
  a pseudo-file says size 0), and ``close``.

Whether a link at the path is followed is the caller's rule; what it leads to is
held to the same checks. Refusals are :class:`FileRefused`, an :class:`OSError`
whose ``strerror`` (and ``reason``) says why in words, so an ``except OSError``
that reports ``strerror`` names it too.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

from sandbox import open_regular

__all__ = ["SMALL_FILE_MAX", "FileRefused", "describe_size", "read_small_file"]

#: The cap for a manifest or a configuration file (1 MiB): a thousand times a real one.
SMALL_FILE_MAX = 1 << 20

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class FileRefused(OSError):
    """A file corral will not read: not a regular file, or larger than it accepts.

    Attributes:
        reason: why, without the path (``"is a FIFO (named pipe), not a regular file"``);
            also the ``strerror``.
    """

    def __init__(self, path: str | os.PathLike[str], reason: str, code: int = errno.EINVAL):
        super().__init__(code, reason, os.fspath(path))
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.filename}: {self.reason}"


def describe_size(limit: int) -> str:
    """``limit`` bytes in words: ``"1 MiB"``, or ``"1000 bytes"`` when not whole MiB."""
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and not limit % (1 << 20) else f"{limit} bytes"


def _not_regular(mode: int) -> str:
    for test, kind in _KINDS:
        if test(mode):
            return f"is {kind}, not a regular file"
    return "is not a regular file"


def read_small_file(
    path: str | os.PathLike[str],
    limit: int = SMALL_FILE_MAX,
    *,
    follow_symlinks: bool = True,
    check: Callable[[os.stat_result], str | None] | None = None,
) -> bytes:
    """The content of the regular file at ``path``, at most ``limit`` bytes.

    Never blocks on what the path is (see the module docstring); blocking file-system
    work all the same: run it in a worker thread from async code.

    Args:
        path: the file.
        limit: the largest content accepted, in bytes.
        follow_symlinks: when false, a link at ``path`` fails with ``ELOOP``.
        check: a further rule on the opened file's ``fstat`` (owner, mode): the reason
            it is refused, or None.

    Raises:
        FileRefused: not a regular file, larger than ``limit``, or ``check`` refused it.
        OSError: it cannot be opened or read (``FileNotFoundError`` when missing).
    """
    fd, st = open_regular(path, follow_symlinks=follow_symlinks)
    try:
        if fd < 0:
            if stat.S_ISLNK(st.st_mode):  # not followed, as asked
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), os.fspath(path))
            raise FileRefused(path, _not_regular(st.st_mode))
        refused = check(st) if check is not None else None
        if refused is not None:
            raise FileRefused(path, refused, errno.EPERM)
        size = st.st_size
        if size > limit:
            raise FileRefused(path, f"is larger than {describe_size(limit)} ({size} bytes)")
        data = os.read(fd, size + 1)
        if len(data) != size or not size:
            # It grew or shrank since the fstat, or it is a pseudo-file that says size
            # 0 (/proc): read on to the end, or to just past the cap.
            parts = [data]
            total = len(data)
            while total <= limit and (chunk := os.read(fd, min(limit + 1 - total, 1 << 16))):
                parts.append(chunk)
                total += len(chunk)
            data = b"".join(parts)
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise FileRefused(path, f"is larger than {describe_size(limit)}")
    return data
