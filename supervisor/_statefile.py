"""Small private state files: read only if the user's own, replaced atomically under a lock.

The one way corral keeps a state file (the trust store's pins, the MCP trust store,
the dynamic tools' JSON catalog, a session file's rewrite). :class:`StateFile`:

* :meth:`~StateFile.locked` holds an exclusive ``flock`` on a lock file beside the
  data (``<file>.lock`` unless told otherwise; mode 0600, never followed through a
  link) for a read-modify-write; :meth:`~StateFile.hold` takes it without waiting,
  for as long as the caller keeps it (an open session). The lock file is never
  the data file: the rename of a replace would leave a lock on the data file's
  old inode. A lock file that was unlinked (or swapped) while we waited guards
  nothing, so the lock is taken again on the file the path names now.
* :meth:`~StateFile.replace` writes every byte to a temporary file in the same
  directory (``.<file>.<pid>``, created exclusively, mode 0600, never through a
  link), ``fsync``s it, renames it over the target and ``fsync``s the directory:
  a crash leaves the old content or the new one, never a mix, and a power loss
  after it returns loses nothing. A target that is a symbolic link is refused
  (the rename would replace the link, not what it points at).
* :meth:`~StateFile.read` reads a file that must be a regular file of this user
  that others may not write (whoever can write a trust store could trust
  anything), and at most ``limit`` bytes.

Two corral processes updating one file each hold the lock across their read and
their replace, so neither loses the other's change. Refusals are
:class:`StateFileRefused` (a :class:`PermissionError` whose ``reason`` says why);
other failures are the :class:`OSError` the system gave. Everything blocks: call
it from a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import typing
from collections.abc import Iterator
from pathlib import Path

from ._smallfile import FileRefused, read_small_file

__all__ = ["StateFile", "StateFileRefused"]

#: How often a lock is taken again when its file keeps being replaced under us.
_LOCK_TRIES = 5


class StateFileRefused(PermissionError):
    """A state file is not what it must be (not a regular file, not private, too large).

    Attributes:
        reason: why, without the path (e.g. ``"is not a regular file"``).
    """

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(errno.EPERM, reason, str(path))
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.filename}: {self.reason}"


@typing.final
class StateFile:
    """One state file (see the module docstring).

    Args:
        path: the data file.
        lock: the lock file; ``<path>.lock`` when None.
        limit: the largest content :meth:`read` accepts, in bytes.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lock: str | os.PathLike[str] | None = None,
        limit: int = 64 << 20,
    ) -> None:
        self.path = Path(path)
        self.lock_path = (
            Path(lock) if lock is not None else self.path.with_name(self.path.name + ".lock")
        )
        self.limit = limit

    def __repr__(self) -> str:
        return f"<StateFile {str(self.path)!r}>"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the exclusive lock, waiting for it.

        Raises:
            OSError: the lock file cannot be created or locked.
        """
        fd = self._take(fcntl.LOCK_EX)
        try:
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def hold(self) -> int:
        """Take the exclusive lock without waiting, for as long as the caller keeps the
        returned descriptor open (a session holds its file this way while it is open).

        Raises:
            BlockingIOError: another open file description holds it.
            OSError: the lock file cannot be created or locked.
        """
        return self._take(fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _take(self, how: int) -> int:
        self.lock_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        for _ in range(_LOCK_TRIES):
            fd = os.open(
                self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
            try:
                fcntl.flock(fd, how)
                same = os.stat(self.lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                return fd
            os.close(fd)  # unlinked or replaced while we waited: it guards nothing
        # EBUSY, not EAGAIN: that would read as BlockingIOError, "someone holds it".
        raise OSError(errno.EBUSY, "the lock file keeps being replaced", str(self.lock_path))

    def replace(self, data: bytes) -> None:
        """Make the file hold ``data`` (mode 0600), atomically and durably.

        Call it holding :meth:`locked` (or a lock of the caller's own that keeps
        other writers of this file out): the temporary file's name is per process.

        Raises:
            StateFileRefused: the target is a symbolic link.
            OSError: it cannot be written (the target is then unchanged).
        """
        path = self.path
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            tmp.unlink(missing_ok=True)  # left by a process of this pid that died mid-write
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISLNK(os.lstat(path).st_mode):
                    raise StateFileRefused(
                        path, "is a symbolic link; corral replaces only its own regular file"
                    )
            os.replace(tmp, path)
            dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise

    def read(self) -> bytes | None:
        """The content, or None when the file does not exist.

        Raises:
            StateFileRefused: it is not a regular file, not owned by this user,
                others may write it, or it is larger than ``limit``.
            OSError: it cannot be read (a symbolic link is never followed).
        """
        try:
            return read_small_file(self.path, self.limit, follow_symlinks=False, check=_private)
        except FileNotFoundError:
            return None
        except FileRefused as exc:
            raise StateFileRefused(self.path, exc.reason) from exc


def _private(st: os.stat_result) -> str | None:
    """Why a state file may not be trusted (whoever can write it could trust anything)."""
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return (
            f"others may write it (owner uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):o}); make it yours with mode 600"
        )
    return None
