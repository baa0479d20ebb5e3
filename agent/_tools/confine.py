"""Where the built-in file tools may read and write: the workspace and its rules.

A path is resolved *while it is opened*, one component at a time from a
descriptor of the working directory (``openat`` with ``O_NOFOLLOW``): each
directory is opened relative to the one before, each symlink is read and its target
walked the same way, and the file itself is opened relative to its directory's
descriptor. What is checked is exactly what is used; a directory or symlink swapped
in between the check and the open cannot redirect the call (the kernel's
``openat2(RESOLVE_BENEATH)`` does the same, but is Linux-only).

The rules, applied to every component of the path as resolved:

* **Confinement** (unless ``confine=False``): resolution never leaves the working
  directory: not by ``..``, an absolute path, or a symlink (relative or absolute)
  pointing out, even if a later component would come back in.
* **No writes into ``.corral``.** Any directory (or file) named ``.corral`` in any
  letter case or Unicode compatibility form: project-local extensions live in
  ``./.corral/extensions``, and a planted one would start with the user's trust.
* **No writes into protected paths** (:class:`sandbox.ProtectedPaths`, the rule the
  ``bash`` sandbox follows too): corral's own installation (a ``.pth`` file in its
  site-packages runs at the next ``corral`` command), git's hooks and
  configuration (of every repository around the workspace, and by name in any
  ``.git`` directory), and the paths the user protects. Checked on every
  component as resolved, and for directories by device and inode as well.
* **Corral's home** (``$CORRAL_HOME``: sessions, extension data, the audit log) is
  neither read nor written, compared by device and inode as well as by name.
* **Credential stores** (:func:`sandbox.credential_paths`, the list the ``bash``
  sandbox hides and the grant rules refuse) are neither read nor written, unless
  one holds the working directory.
* **The home directory is never a writable workspace.** When the working directory
  is the user's home (or contains it, e.g. ``/``), every write is refused with a
  hint to start corral in a project directory.
* **Only regular files**, opened non-blocking (a FIFO cannot hang a read), and
  never written through a second hard link (it may be a file outside the workspace).
"""

from __future__ import annotations

import collections
import errno
import os
import stat
import typing
import unicodedata
from collections.abc import Sequence

from sandbox import ProtectedPaths, ProtectedSnapshot, existing, stores_around

from .._exceptions import ToolError

__all__ = ["Workspace"]

_MAX_LINKS = 40
_DIR_FLAGS = (
    getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
)  # fmt: skip


def _parts(path: str) -> list[str]:
    """Components of an absolute, normalised path (``/`` is ``[]``)."""
    return [p for p in path.split("/") if p]


def _is_corral(name: str) -> bool:
    return unicodedata.normalize("NFKC", name).casefold() == ".corral"


def _inside(parts: list[str], root: list[str]) -> bool:
    return parts[: len(root)] == root


def _join(parts: list[str]) -> str:
    return "/" + "/".join(parts)


def _corral_refusal(path: str, where: str) -> ToolError:
    return ToolError(
        f"{path}: refused: built-in tools never write into a .corral directory ({where}); "
        "project-local extensions live there. Add extensions with `corral ext install`"
    )


class _Rules(typing.NamedTuple):
    """What one :meth:`Workspace.open` checks every component against."""

    #: The protected paths when writing; None when reading.
    guard: ProtectedSnapshot | None
    #: Credential stores (components), by name and, when they exist, as resolved.
    secrets: list[list[str]]


def _replace(old: int, new: int) -> int:
    """Close the directory the walk leaves; returns the one it enters."""
    os.close(old)
    return new


@typing.final
class Workspace:
    """The directory built-in tools work in, and the rules of :meth:`open`.

    Args:
        root: the working directory.
        confine: refuse paths that resolve outside ``root`` (off only for trusted setups).
        corral_home: corral's home, never read or written; None when unknown.
        home: the user's home directory (default: ``~``); when ``root`` is it, or
            contains it, the workspace is read-only.
        protect: further paths never written (see :class:`sandbox.ProtectedPaths`).
    """

    def __init__(
        self,
        root: str,
        *,
        confine: bool = True,
        corral_home: str | None = None,
        home: str | None = None,
        protect: Sequence[str] = (),
    ) -> None:
        self.root = os.path.realpath(root)
        self.confine = confine
        self.corral_home = os.path.realpath(corral_home) if corral_home else None
        self.home = os.path.realpath(home if home is not None else os.path.expanduser("~"))
        self._root_parts = _parts(self.root)
        self._corral_parts = _parts(self.corral_home) if self.corral_home else None
        #: What must stay read-only inside (and around) the workspace.
        self.protected = ProtectedPaths(self.root, extra=protect)
        covering = self.protected.covering_workspace()
        #: Why nothing in the workspace is written ("" when it is writable).
        self.read_only_reason = ""
        if _inside(_parts(self.home), self._root_parts):
            self.read_only_reason = (
                f"the working directory is your home directory ({self.home}), which "
                "corral's built-in tools never write to. Start corral in a project directory "
                "instead (cd ~/myproject, or pass --cwd ~/myproject)"
            )
        elif covering is not None:
            self.read_only_reason = (
                f"the working directory is protected: {covering.path} is {covering.why}, "
                "and what is written there runs when corral starts. Install corral "
                "outside the project (e.g. pipx install corral) to let the agent write here"
            )
        #: False when the root is the home directory or contains it, or is protected.
        self.writable = not self.read_only_reason

    def __repr__(self) -> str:
        return f"<Workspace root={self.root!r} confine={self.confine} writable={self.writable}>"

    def show(self, real: str) -> str:
        """``real`` relative to the root when inside it, for messages."""
        if real == self.root:
            return "."
        if real.startswith(self.root + os.sep):
            return real[len(self.root) + 1 :]
        return real

    def resolve(self, path: str) -> str:
        """The real absolute path ``path`` names now, by the rules of :meth:`open`.

        For messages and tests only: tools use :meth:`open`, never a path string.

        Raises:
            ToolError: as :meth:`open`.
        """
        fd, real = self.open(path, os.O_RDONLY, write=False, any_kind=True)
        os.close(fd)
        return real

    def open(
        self, path: str, flags: int, *, write: bool, mode: int = 0o644, any_kind: bool = False
    ) -> tuple[int, str]:
        """Open ``path`` (relative to the root) with ``flags``; returns the fd and real path.

        Args:
            path: as the model wrote it (``~`` is expanded).
            flags: ``os.open`` flags for the file itself (``O_NOFOLLOW``,
                ``O_NONBLOCK`` and ``O_CLOEXEC`` are added; ``O_TRUNC`` is applied
                after the checks).
            write: the call writes: the write rules apply and missing parent
                directories are created.
            mode: permission bits of a created file.
            any_kind: accept any file type (for :meth:`resolve`).

        Raises:
            ToolError: the path breaks a rule, or the file cannot be opened; the
                message names the path and why.
        """
        if not path or "\x00" in path:
            raise ToolError("path must be a non-empty string without NUL characters")
        if write and not self.writable:
            raise ToolError(f"{path}: refused: {self.read_only_reason}")
        expanded = os.path.expanduser(path)
        if write and any(_is_corral(name) for name in expanded.split("/")):
            raise _corral_refusal(path, expanded)  # before the walk creates any directory
        start, todo = self._start(path, expanded)
        # Read at each call: a repository made since the last one is protected too.
        rules = _Rules(self.protected.snapshot() if write else None, self._secrets())
        return self._walk(path, start, collections.deque(todo), flags, rules, mode, any_kind)

    def _secrets(self) -> list[list[str]]:
        """The credential stores around the root (the list the ``bash`` sandbox
        hides), by name and, for those that exist, as resolved."""
        stores = stores_around(self.home, self.root)
        names = [*stores, *(real for real, _ in existing(stores))]
        return [_parts(n) for n in dict.fromkeys(names) if not _inside(self._root_parts, _parts(n))]

    def _start(self, path: str, expanded: str) -> tuple[list[str], list[str]]:
        """Where the walk starts (components) and what it still has to walk."""
        if not os.path.isabs(expanded):
            return list(self._root_parts), expanded.split("/")
        wanted = [p for p in expanded.split("/") if p not in ("", ".")]
        if not self.confine:
            return [], wanted
        if _inside(wanted, self._root_parts):
            return list(self._root_parts), wanted[len(self._root_parts) :]
        raise self._outside(path, expanded)

    def _outside(self, path: str, where: str) -> ToolError:
        return ToolError(
            f"path {path!r} resolves to {where}, outside the working directory "
            f"{self.root}; built-in tools only touch files inside it"
        )

    def _check(
        self, path: str, parts: list[str], fd: int | None, rules: _Rules, final: bool = False
    ) -> None:
        """The rules for the last component of ``parts`` (``fd``: its descriptor).

        ``final``: ``parts`` is the file itself, not a directory on the way.
        """
        for store in rules.secrets:
            if _inside(parts, store):
                raise ToolError(
                    f"{path}: refused: {_join(parts)} is in {_join(store)}, which holds "
                    "credentials; built-in tools never read or write credential stores"
                )
        guard = rules.guard
        if guard is not None and parts:
            if _is_corral(parts[-1]):
                raise _corral_refusal(path, _join(parts))
            why = guard.problem(_join(parts), final=final, st=None if fd is None else os.fstat(fd))
            if why is not None:
                raise ToolError(
                    f"{path}: refused: {why}; what is written there runs later as you, "
                    "outside the sandbox. Ask the user to change it"
                )
        if self.corral_home is None or self._corral_parts is None:
            return
        hit = _inside(parts, self._corral_parts)
        if not hit and fd is not None:
            try:
                home = os.stat(self.corral_home)
            except FileNotFoundError:
                return
            here = os.fstat(fd)
            hit = (here.st_dev, here.st_ino) == (home.st_dev, home.st_ino)
        if hit:
            raise ToolError(
                f"{path}: refused: {_join(parts)} is inside corral's home "
                f"({self.corral_home}), which holds sessions, extension data and the audit log"
            )

    def _walk(
        self,
        path: str,
        start: list[str],
        todo: collections.deque[str],
        flags: int,
        rules: _Rules,
        mode: int,
        any_kind: bool,
    ) -> tuple[int, str]:
        """Resolve ``todo`` from the directory ``start``, one ``openat`` at a time."""
        write = rules.guard is not None
        for depth in range(len(start) + 1):  # every ancestor of the start, by name
            self._check(path, start[:depth], None, rules)
        parts = start
        fd = os.open(_join(parts), _DIR_FLAGS)
        links = 0
        try:
            self._check(path, parts, fd, rules)
            while todo:
                name = todo.popleft()
                if name in ("", "."):
                    continue
                if name == "..":
                    if self.confine and parts == self._root_parts:
                        raise self._outside(path, _join(parts[:-1]))
                    if parts:
                        fd = _replace(fd, os.open("..", _DIR_FLAGS, dir_fd=fd))
                        parts = parts[:-1]
                    continue
                here = [*parts, name]
                self._check(path, here, None, rules, final=not todo)
                if todo:  # a directory on the way
                    opened = self._open_dir(path, fd, name, write)
                    if opened is not None:
                        fd, parts = _replace(fd, opened), here
                        self._check(path, parts, fd, rules)
                        continue
                else:
                    opened = self._open_file(path, fd, name, flags, mode)
                    if opened is not None:
                        return self._accept(opened, here, flags, write, any_kind)
                # ``name`` is a symlink: walk its target instead.
                links += 1
                if links > _MAX_LINKS:
                    raise ToolError(f"{path}: too many levels of symbolic links")
                if self._follow(path, fd, name, here, todo):
                    parts = list(self._root_parts) if self.confine else []
                    fd = _replace(fd, os.open(_join(parts), _DIR_FLAGS))
            if any_kind:
                return os.dup(fd), _join(parts)
            raise ToolError(f"{self.show(_join(parts))} is a directory")
        finally:
            os.close(fd)

    @staticmethod
    def _open_dir(path: str, fd: int, name: str, write: bool) -> int | None:
        """The directory ``name`` in ``fd`` (created when writing), or None: a symlink."""
        for _ in range(2):
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not write:
                    raise ToolError(f"{path}: No such file or directory") from None
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass  # raced with someone else: open what is there now
                except OSError as exc:
                    raise ToolError(f"{path}: cannot create {name}: {exc.strerror}") from exc
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    return None
                raise ToolError(f"{path}: {exc.strerror}") from exc
        raise ToolError(f"{path}: its directory {name} keeps changing; try again")

    @staticmethod
    def _open_file(path: str, fd: int, name: str, flags: int, mode: int) -> int | None:
        """The file ``name`` in ``fd``, or None: a symlink."""
        safe = (flags & ~os.O_TRUNC) | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            return os.open(name, safe, mode, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None
            if exc.errno == errno.ENOENT:
                raise ToolError(f"{path}: No such file or directory") from None
            raise ToolError(f"{path}: {exc.strerror}") from exc

    def _follow(
        self, path: str, fd: int, name: str, here: list[str], todo: collections.deque[str]
    ) -> bool:
        """Put the target of symlink ``name`` in front of ``todo``.

        Returns:
            True when the target is absolute: the walk restarts at the root
            (confined: only a target inside the root is accepted) or at ``/``.
        """
        try:
            target = os.readlink(name, dir_fd=fd)
        except OSError as exc:
            raise ToolError(f"{path}: {_join(here)} is not a directory") from exc
        if not target.startswith("/"):
            todo.extendleft(reversed(target.split("/")))
            return False
        wanted = [p for p in target.split("/") if p not in ("", ".")]
        if self.confine:
            if not _inside(wanted, self._root_parts):
                raise self._outside(path, target)
            wanted = wanted[len(self._root_parts) :]
        todo.extendleft(reversed(wanted))
        return True

    def _accept(
        self, fd: int, here: list[str], flags: int, write: bool, any_kind: bool
    ) -> tuple[int, str]:
        real = _join(here)
        try:
            info = os.fstat(fd)
            if not any_kind:
                if stat.S_ISDIR(info.st_mode):
                    raise ToolError(f"{self.show(real)} is a directory; list it with bash `ls`")
                if not stat.S_ISREG(info.st_mode):
                    raise ToolError(f"{self.show(real)} is not a regular file")
                if write and info.st_nlink > 1:
                    raise ToolError(
                        f"{self.show(real)} has {info.st_nlink} hard links; built-in tools "
                        "do not write through a hard link (another name of the file may be "
                        "outside the working directory)"
                    )
                if flags & os.O_TRUNC:
                    os.ftruncate(fd, 0)
                os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd, real
