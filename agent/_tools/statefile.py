"""Small private state files under ``$CORRAL_HOME``: locked, replaced atomically.

:func:`locked` holds an exclusive ``flock`` on ``<file>.lock`` for a
read-modify-write; :func:`replace_file` writes a temporary file, ``fsync``s it,
renames it over the target and ``fsync``s the directory, so a crash leaves the old
content or the new one, never a mix. :func:`read_private` reads a file that must be
the user's own and not writable by others. All blocking: call them from a worker
thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

__all__ = ["locked", "read_private", "replace_file"]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock for ``path`` (on ``<path>.lock``, mode 0600).

    Raises:
        OSError: the lock file cannot be created.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def replace_file(path: Path, data: bytes) -> None:
    """Make ``path`` hold ``data`` (mode 0600), atomically and durably.

    Raises:
        OSError: it cannot be written (the target is then unchanged).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def read_private(path: Path, limit: int) -> bytes | None:
    """The content of ``path``, or None when it does not exist.

    Raises:
        OSError: it cannot be read.
        PermissionError: it is not a regular file owned by this user, others may
            write it, or it is larger than ``limit`` bytes (the message says which).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise PermissionError(f"{path} is not a regular file")
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise PermissionError(
                f"{path}: others may write it (owner uid {st.st_uid}, mode "
                f"{stat.S_IMODE(st.st_mode):o}); make it yours and not group/world-writable"
            )
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise PermissionError(f"{path} is larger than {limit} bytes")
    return data
