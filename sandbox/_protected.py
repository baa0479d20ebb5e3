"""Protected paths: what inside a writable workspace later runs with more privilege.

The agent's ``bash`` may write its working directory, and ``write``/``edit`` may
write files in it. Some paths there are code that runs *later, as the user,
outside any sandbox*: a ``.pth`` file in the site-packages of corral's own
virtual environment runs at the next ``corral --version``; a git hook at the next
``git commit``; a project-local extension at the next trust prompt's "yes". One
rule object, :class:`ProtectedPaths`, lists them, and both the shell
(:mod:`sandbox._shell`: bound read-only over the writable workspace) and the file
tools (refused) use it:

* **corral's own installation** (:func:`installation_paths`): ``sys.prefix`` and
  the base prefix, the interpreter, every directory on corral's ``sys.path``
  (the site-packages and every directory a ``.pth`` file added, such as the
  source tree of an editable install, where a ``sitecustomize.py`` or a module
  corral imports could be planted; not the directory ``python -m``/``-c`` put
  first, which is where corral was started, not what it is), the user's site-packages, corral's own
  package directories, and the source trees of editable installs made with an
  import finder (setuptools' ``MAPPING``);
* **``.corral/``** of the workspace (project-local extensions, MCP servers);
* **git** (:mod:`sandbox._gitdirs`): each repository's ``hooks`` and ``config``
  (submodules and worktrees too) and the files that say where a repository is;
  the rest of ``.git`` stays writable, so ``git commit`` works;
* **the mount points of the sandboxes' private ``/tmp``** when the workspace holds
  the temporary directory (:mod:`sandbox._mountpoints`);
* **what the user adds** (``extra``: e.g. ``.envrc``, ``.vscode/``).

A path is protected *before it exists* (a missing ``.git/hooks`` is created empty
by the shell, so that nothing can be planted there), under every name that leads
to it (the file tools compare devices and inodes of directories too), and against
a rename of its parent (the shell mounts each directory on the way, which makes
``mv .git x`` fail with ``EBUSY``). What the list is computed from is read again
at every use, so a repository made during the session is protected from the next
command on.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import site
import stat
import sys
import time
import typing
import unicodedata
from collections.abc import Sequence
from typing import NamedTuple

from ._exceptions import PlanError
from ._gitdirs import ProtectKind, git_paths
from ._within import inside

__all__ = [
    "ProtectKind",
    "Protected",
    "ProtectedPaths",
    "ProtectedSnapshot",
    "installation_paths",
    "protect_args",
    "release_placeholders",
]

#: How long a plan waits for a protected directory another plan is removing.
_SHARE_WAIT = 2.0

#: The packages of corral, whose directories are protected wherever they live.
_PACKAGES = ("agent", "sandbox", "supervisor")
#: Inside a ``.git`` directory: names under which git finds code or directions.
_GIT_DIRS = frozenset({"hooks"})
_GIT_FILES = frozenset({"config", "config.worktree", "commondir", "gitdir"})


class Protected(NamedTuple):
    """One protected path."""

    #: Absolute; its directory is a real path, its last component as looked up.
    path: str
    kind: ProtectKind
    #: Why, for messages ("corral's installation (sys.prefix)").
    why: str


def _fold(name: str) -> str:
    """A name as a case-insensitive file system compares it."""
    return unicodedata.normalize("NFKC", name).casefold()


def _named(path: str) -> str:
    """``path`` absolute, its directory resolved, its last component kept."""
    path = os.path.abspath(path)
    if path == "/":
        return path
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _both(path: str, kind: ProtectKind, why: str) -> list[Protected]:
    """``path`` as named and as resolved (they differ when it is a symlink)."""
    named = _named(path)
    return [Protected(p, kind, why) for p in dict.fromkeys((named, os.path.realpath(path)))]


@functools.lru_cache(maxsize=4)
def _installation(key: tuple[str, ...]) -> tuple[Protected, ...]:
    del key  # only what the result depends on
    out: list[Protected] = []
    why = "corral's own installation"
    prefixes = (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)
    for prefix in dict.fromkeys(prefixes):
        out += _both(prefix, ProtectKind.DIR, f"{why} (the Python prefix)")
    executables = (sys.executable, getattr(sys, "_base_executable", ""))
    for exe in dict.fromkeys(e for e in executables if e):
        out += _both(exe, ProtectKind.FILE, f"{why} (the interpreter)")
    # Not the directory corral was started from (``python -m``/``-c`` put it first):
    # that is the project, not the installation (the ``corral`` command never does).
    cwd = os.path.realpath(os.getcwd())
    entries = [p for p in sys.path if p and os.path.realpath(p) != cwd]
    entries += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        entries.append(site.getusersitepackages())
    for entry in dict.fromkeys(entries):
        out += _both(entry, ProtectKind.DIR, f"{why} (on its import path)")
    code = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    for package in _PACKAGES:
        out += _both(os.path.join(code, package), ProtectKind.DIR, f"{why} (its package)")
    for name, module in list(sys.modules.items()):
        if name.startswith("__editable__") and isinstance(getattr(module, "MAPPING", None), dict):
            for source in module.MAPPING.values():
                if isinstance(source, str):
                    out += _both(source, ProtectKind.DIR, f"{why} (an editable install)")
        if name in ("sitecustomize", "usercustomize"):
            where = getattr(module, "__file__", None)
            if isinstance(where, str):
                out += _both(where, ProtectKind.FILE, f"{why} ({name})")
    return tuple(out)


def installation_paths() -> tuple[Protected, ...]:
    """corral's own installation: everything that runs when corral starts.

    Read again when ``sys.path`` or ``sys.prefix`` change (cached otherwise).
    """
    # Editable installs' finders are imported at start-up, before any call.
    return _installation((os.getcwd(), sys.prefix, sys.executable, *sys.path))


def _git_name_problem(parts: Sequence[str], final: bool) -> str | None:
    """Why the path ``parts`` (components) names git's code or directions, or None.

    ``final``: the path is what is written (not a directory on the way to it).
    """
    folded = [_fold(p) for p in parts]
    if ".git" not in folded:
        return None
    first = folded.index(".git")
    rest = folded[first + 1 :]
    if not rest:
        return "is a .git file, which tells git where a repository is" if final else None
    if any(name in _GIT_DIRS for name in rest[:-1]) or rest[-1] in _GIT_DIRS:
        return "is in git's hooks, which git runs as you"
    if rest[-1] in _GIT_FILES:
        return "is git's configuration, which names programs git runs as you"
    return None


@typing.final
class ProtectedSnapshot:
    """The protected paths at one moment, with lookups for the file tools."""

    def __init__(self, paths: Sequence[Protected]) -> None:
        self.paths = tuple(paths)
        self._dirs: dict[tuple[int, int], Protected] = {}
        for p in self.paths:
            if p.kind is ProtectKind.DIR:
                try:
                    st = os.stat(p.path)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    self._dirs.setdefault((st.st_dev, st.st_ino), p)

    def __repr__(self) -> str:
        return f"<ProtectedSnapshot paths={len(self.paths)}>"

    def covering(self, path: str) -> Protected | None:
        """The protected path ``path`` is, or lies in (``path``: absolute, as looked up)."""
        return next((p for p in self.paths if inside(path, p.path)), None)

    def problem(
        self, path: str, *, final: bool = True, st: os.stat_result | None = None
    ) -> str | None:
        """Why ``path`` may not be written (or walked through to write), or None.

        Args:
            path: absolute, as looked up (directories resolved so far).
            final: ``path`` is what is written, not a directory on the way.
            st: its ``stat`` when it is an open directory: a protected directory
                reached under another name (a bind mount, a case-insensitive file
                system) is recognised by device and inode.
        """
        hit = self.covering(path)
        if hit is None and st is not None and stat.S_ISDIR(st.st_mode):
            hit = self._dirs.get((st.st_dev, st.st_ino))
        if hit is not None:
            return f"{hit.path} is protected: {hit.why}"
        why = _git_name_problem([p for p in path.split("/") if p], final)
        return f"{path} {why}" if why else None


@typing.final
class ProtectedPaths:
    """The protected paths of one workspace (see the module docstring).

    Args:
        workspace: the working directory (made real).
        extra: paths the user protects too: relative to the workspace, absolute,
            or ``~/...``; a trailing ``/`` marks a directory (created empty when
            missing, like a missing file is).
        installation: corral's installation (default :func:`installation_paths`);
            a seam for tests.
        own_corral: ``workspace/.corral`` is protected even while missing (the
            agent's workspace); False: only when it exists (a directory granted to an
            extension, where trust already covers a change and a placeholder would
            be litter).
    """

    def __init__(
        self,
        workspace: str,
        *,
        extra: Sequence[str] = (),
        installation: Sequence[Protected] | None = None,
        own_corral: bool = True,
    ) -> None:
        self.workspace = os.path.realpath(workspace)
        self._installation = None if installation is None else tuple(installation)
        self._corral_kind = ProtectKind.DIR if own_corral else ProtectKind.EXISTING
        self.extra: list[Protected] = []
        for raw in extra:
            if not raw.strip():
                continue
            kind = ProtectKind.DIR if raw.endswith("/") else ProtectKind.FILE
            where = os.path.join(self.workspace, os.path.expanduser(raw.rstrip("/") or "/"))
            self.extra.append(Protected(_named(where), kind, f"you protected it ({raw})"))

    def __repr__(self) -> str:
        return f"<ProtectedPaths workspace={self.workspace!r} extra={len(self.extra)}>"

    def paths(self) -> list[Protected]:
        """Every protected path now (read from the disk again at each call)."""
        out = list(installation_paths() if self._installation is None else self._installation)
        corral = os.path.join(self.workspace, ".corral")
        out.append(Protected(corral, self._corral_kind, "corral's project-local extensions"))
        out += [Protected(g.path, g.kind, g.why) for g in git_paths(self.workspace)]
        from ._mountpoints import protected_base  # it imports _etc, which imports us

        if (mounts := protected_base(self.workspace)) is not None:
            out.append(Protected(mounts, ProtectKind.DIR, "the mount points of corral's /tmp"))
        out += self.extra
        return list({p.path: p for p in reversed(out)}.values())[::-1]

    def snapshot(self) -> ProtectedSnapshot:
        """:meth:`paths` with the lookups of the file tools."""
        return ProtectedSnapshot(self.paths())

    def covering_workspace(self) -> Protected | None:
        """A protected path that is the workspace or contains it (then nothing in it
        may be written), or None."""
        return next((p for p in self.paths() if inside(self.workspace, p.path)), None)


def protect_args(
    root: str,
    root_fd: int,
    protected: Sequence[Protected],
    fds: list[int],
    *,
    who: str,
    placeholders: list[tuple[int, int, str, bool]] | None = None,
) -> list[str]:
    """bwrap arguments binding the protected paths inside ``root`` read-only.

    ``root`` is a writable directory of the sandbox (the agent's workspace, an
    extension's ``read_write`` grant) and ``root_fd`` a descriptor of it; the
    descriptors opened are appended to ``fds`` (the caller passes and closes them);
    ``who`` names the launch in a :class:`~sandbox.PlanError`.

    Each directory on the way to one is bound (read-write) onto itself too: a mount
    point cannot be renamed or removed, so ``mv .git x && mkdir .git`` fails with
    ``EBUSY`` instead of moving the read-only hooks out of git's way. A missing
    protected path is created first (empty), so nothing can be planted there.
    Everything is opened from ``root_fd`` without following a symlink; a symlink on
    the way, or as the protected path itself (it could be retargeted), refuses the
    plan.

    With ``placeholders``, every protected *directory* is held with a shared
    ``flock`` while the plan lives, and the held ones are appended (with whether
    this plan created them): :func:`release_placeholders` then removes a directory
    the plan created if it is still empty and no other plan holds it, so the first
    ``bash`` call does not leave an empty ``.corral/`` behind. Removal needs the
    lock: deleting a directory that is a mount point in another sandbox's
    namespace would silently detach that sandbox's read-only bind.
    """
    wanted = sorted(
        (p for p in protected if p.path != root and inside(p.path, root)), key=lambda p: p.path
    )
    kept: list[Protected] = []
    for p in wanted:
        if not any(inside(p.path, k.path) for k in kept):
            kept.append(p)
    binds: dict[str, tuple[str, int]] = {}
    for p in kept:
        parts = os.path.relpath(p.path, root).split("/")
        at, where = root_fd, root
        for name in parts[:-1]:
            where = os.path.join(where, name)
            if where not in binds:
                fd = _open_protected(at, name, where, ProtectKind.DIR, p, who)
                if fd is None:
                    break
                fds.append(fd)
                binds[where] = ("--bind-fd", fd)
            at = binds[where][1]
        else:
            opened = _held(at, parts[-1], p, who, placeholders)
            if opened is not None:
                fds.append(opened)
                binds[p.path] = ("--ro-bind-fd", opened)
    args: list[str] = []
    # Parents before children: a later mount on a parent would hide the child's.
    for where in sorted(binds, key=lambda w: (w.count("/"), w)):
        option, fd = binds[where]
        args += [option, str(fd), where]
    return args


def _held(
    dir_fd: int,
    name: str,
    p: Protected,
    who: str,
    placeholders: list[tuple[int, int, str, bool]] | None,
) -> int | None:
    """:func:`_open_protected` of a final protected path; a directory is also held
    with a shared lock (see :func:`protect_args`) when ``placeholders`` is given."""
    deadline = time.monotonic() + _SHARE_WAIT
    made: list[bool] = []  # across tries: a directory this plan made is its to remove
    while True:
        fd = _open_protected(dir_fd, name, p.path, p.kind, p, who, made)
        if fd is None or placeholders is None or not stat.S_ISDIR(os.fstat(fd).st_mode):
            return fd
        try:
            lock = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                           dir_fd=dir_fd)  # fmt: skip
        except OSError:
            return fd  # unreadable (or gone): not ours to remove, held by no one
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            now, bound = os.fstat(lock), os.fstat(fd)
            if (now.st_dev, now.st_ino) == (bound.st_dev, bound.st_ino) and now.st_nlink:
                placeholders.append((lock, os.dup(dir_fd), name, bool(made)))
                return fd
        except BlockingIOError:
            pass  # another plan is removing it: open it again (created anew) when done
        os.close(lock)
        os.close(fd)
        if time.monotonic() > deadline:
            raise PlanError(who, f"{p.path} is locked by another process; try again")
        time.sleep(0.01)


def release_placeholders(placeholders: Sequence[tuple[int, int, str, bool]]) -> None:
    """Remove each directory a plan created as a mount point, if still empty and held
    by no other plan; close the descriptors. Never raises."""
    for lock, parent, name, created in placeholders:
        try:
            if created:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    pass  # another plan binds it: it stays (its creator was us; harmless)
                else:
                    # Not empty (something was put there on purpose), or gone: it stays.
                    with contextlib.suppress(OSError):
                        os.rmdir(name, dir_fd=parent)
        finally:
            os.close(lock)
            os.close(parent)


def _open_protected(
    dir_fd: int,
    name: str,
    where: str,
    kind: ProtectKind,
    p: Protected,
    who: str,
    created: list[bool] | None = None,
) -> int | None:
    """An ``O_PATH`` descriptor of ``name`` in ``dir_fd``, created empty when missing.

    None when it is missing and may stay so (nothing to protect yet, or nobody can
    create it here: the shell runs as the same user with fewer privileges).
    """
    flags = getattr(os, "O_PATH", os.O_RDONLY) | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(2):
        try:
            fd = os.open(name, flags, dir_fd=dir_fd)
        except FileNotFoundError:
            if kind is ProtectKind.EXISTING:
                return None
            try:
                if kind is ProtectKind.DIR:
                    os.mkdir(name, 0o755, dir_fd=dir_fd)
                    if created is not None:
                        created.append(True)
                else:
                    made = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                                   | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)  # fmt: skip
                    os.close(made)
            except FileExistsError:
                continue  # raced with someone else: open what is there now
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                    return None
                raise PlanError(who, f"cannot create {where}: {exc.strerror}") from exc
            continue
        except OSError as exc:
            raise PlanError(who, f"cannot open {where}: {exc.strerror}") from exc
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            os.close(fd)
            raise PlanError(
                who,
                f"{where} is a symbolic link, and it is protected ({p.why}): a command "
                "could point it elsewhere. Replace it by what it points to"
                + (" (or a `gitdir:` file)" if name == ".git" else ""),
            )
        if kind is ProtectKind.DIR and not stat.S_ISDIR(os.fstat(fd).st_mode) and where != p.path:
            os.close(fd)
            raise PlanError(who, f"{where} must be a plain directory")
        return fd
    raise PlanError(who, f"{where} keeps changing; try again")
