"""Where git takes code from, for the repositories around a workspace.

git runs programs named by its configuration (``core.hooksPath``,
``core.fsmonitor``, ``core.sshCommand``, aliases, filters, credential helpers)
and the hooks in its ``hooks`` directory, on ``git commit`` and often on ``git
status`` (a shell prompt runs that). So a repository's ``config`` and ``hooks``
are code that runs as the user, outside any sandbox, and so are the files that
tell git *where* a repository's directory is: a worktree's or submodule's ``.git``
file (``gitdir: ...``) and a linked worktree's ``commondir``. Everything else in
a git directory is data (objects, refs, the index), which ``git commit`` must be
able to write.

:func:`git_paths` finds them for:

* the repository the workspace is in (found upward from the workspace, as git
  finds it), and the repositories directly inside the workspace (``ws/*/.git``,
  a folder of clones);
* for each, its common directory (a linked worktree's ``commondir``), every
  linked worktree (``worktrees/<name>``) and every submodule's git directory
  (``modules/...``, nested), and the ``.git`` files of their checkouts.

What it returns are paths *as git looks them up* (their directories resolved,
their last component not): a symlink there is the caller's to refuse, since it
could be retargeted. The walk is bounded (:data:`_MAX_GITDIRS` git directories,
:data:`_MAX_READ` bytes per file read) and never follows a symlink to decide
what a file is.
"""

from __future__ import annotations

import enum
import os
import stat
from typing import NamedTuple

from ._regular import read_head

__all__ = ["GitPath", "ProtectKind", "git_paths"]

#: Git directories looked at, at most, per call (submodules and worktrees included).
_MAX_GITDIRS = 64
#: Bytes read at most from a ``.git`` file, ``commondir`` or ``config``.
_MAX_READ = 64 * 1024
#: Nesting of ``modules/`` looked into (a submodule's name may contain ``/``).
_MAX_MODULE_DEPTH = 6


class ProtectKind(enum.Enum):
    """What a protected path is, or is created as when missing."""

    #: A directory (created empty when missing).
    DIR = "dir"
    #: A file (created empty when missing).
    FILE = "file"
    #: A file that is protected only if it exists (it names another place).
    EXISTING = "link-file"


class GitPath(NamedTuple):
    """One path git takes code or directions from."""

    path: str
    kind: ProtectKind
    #: Why, for messages: ``git hooks of /p/.git``.
    why: str


def _read(path: str) -> str:
    """The start of the regular file ``path`` ("" if missing, a link, or unreadable)."""
    head = read_head(path, _MAX_READ, follow_symlinks=False)
    return "" if head is None else head.decode("utf-8", "replace")


def _pointer(path: str, key: str = "gitdir:") -> str | None:
    """The directory a ``.git`` file (``gitdir: X``) or ``commondir`` names, absolute."""
    text = _read(path).strip()
    if key:
        if not text.startswith(key):
            return None
        text = text[len(key) :].strip()
    if not text:
        return None
    base = os.path.dirname(path)
    return os.path.normpath(os.path.join(base, text))


def _config_value(config: str, section: str, name: str) -> str | None:
    """``section.name`` of a git ``config`` file (the last one), or None.

    Enough of git's syntax for the keys read here (no includes, no quoting): it only
    decides what *more* to protect, from a file that is itself protected.
    """
    current, found = "", None
    for raw in _read(config).splitlines():
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if line.startswith("["):
            current = line.strip("[]").strip().lower()
        elif current == section and "=" in line:
            key, _, value = line.partition("=")
            if key.strip().lower() == name:
                found = value.strip()
    return found


def _core_worktree(config: str) -> str | None:
    """``core.worktree`` of a git ``config`` file (a submodule's checkout), or None."""
    value = _config_value(config, "core", "worktree")
    if not value:
        return None
    return os.path.normpath(os.path.join(os.path.dirname(config), value))


def _worktree_config(common: str) -> bool:
    """Whether git reads ``config.worktree`` files (``extensions.worktreeConfig``)."""
    value = _config_value(os.path.join(common, "config"), "extensions", "worktreeconfig")
    return (value or "").lower() in ("true", "yes", "on", "1")


def _real_dir(path: str) -> str:
    """``path``'s directory resolved, its last component kept (how git looks it up)."""
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


class _Finder:
    def __init__(self) -> None:
        self.out: list[GitPath] = []
        self.seen: set[str] = set()

    def add(self, path: str, kind: ProtectKind, why: str, *, resolved: bool = True) -> None:
        """``path``; ``resolved``: its directory is already a real path."""
        self.out.append(GitPath(path if resolved else _real_dir(path), kind, why))

    def dot_git(self, entry: str) -> None:
        """A ``.git`` entry: a git directory, or a file naming one."""
        try:
            mode = os.lstat(entry).st_mode
        except OSError:
            return
        if stat.S_ISDIR(mode):
            self.gitdir(os.path.realpath(entry))
            return
        # A link or a ``gitdir:`` file: either one tells git where to go, and
        # whoever can write it can send git to hooks of their own.
        self.add(entry, ProtectKind.EXISTING, "where git finds this repository")
        target = os.path.realpath(entry) if stat.S_ISLNK(mode) else _pointer(entry)
        if target is not None:
            self.gitdir(os.path.realpath(target))

    def gitdir(self, gitdir: str) -> None:
        """A git directory: its own control files, then its common directory's."""
        if gitdir in self.seen or len(self.seen) >= _MAX_GITDIRS or not os.path.isdir(gitdir):
            return
        self.seen.add(gitdir)
        why = f"git configuration of {gitdir}"
        common_file = os.path.join(gitdir, "commondir")
        common = _pointer(common_file, key="")
        if common is not None:  # a linked worktree's own directory
            where = f"where git finds the repository of {gitdir}"
            self.add(common_file, ProtectKind.EXISTING, where)
            if _worktree_config(common):
                self.add(os.path.join(gitdir, "config.worktree"), ProtectKind.FILE, why)
            self.gitdir(os.path.realpath(common))
            return
        self.add(os.path.join(gitdir, "hooks"), ProtectKind.DIR, f"git hooks of {gitdir}")
        self.add(os.path.join(gitdir, "config"), ProtectKind.FILE, why)
        # Read only with extensions.worktreeConfig, which is in ``config`` (protected).
        if _worktree_config(gitdir):
            self.add(os.path.join(gitdir, "config.worktree"), ProtectKind.FILE, why)
        self.worktrees(gitdir)
        self.modules(os.path.join(gitdir, "modules"), 0)

    def worktrees(self, common: str) -> None:
        base = os.path.join(common, "worktrees")
        for name in _subdirs(base):
            own = os.path.join(base, name)
            self.gitdir(own)
            checkout = _pointer(os.path.join(own, "gitdir"), key="")
            if checkout is not None and os.path.basename(checkout) == ".git":
                where = "where git finds a linked worktree"
                self.add(checkout, ProtectKind.EXISTING, where, resolved=False)

    def modules(self, base: str, depth: int) -> None:
        if depth > _MAX_MODULE_DEPTH:
            return
        for name in _subdirs(base):
            sub = os.path.join(base, name)
            if os.path.isfile(os.path.join(sub, "HEAD")):
                self.gitdir(sub)
                checkout = _core_worktree(os.path.join(sub, "config"))
                if checkout is not None:
                    self.add(
                        os.path.join(checkout, ".git"),
                        ProtectKind.EXISTING,
                        "where git finds a submodule",
                        resolved=False,
                    )
            else:  # a submodule named ``a/b`` lives in modules/a/b
                self.modules(sub, depth + 1)


def _subdirs(path: str) -> list[str]:
    try:
        with os.scandir(path) as it:
            return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def git_paths(workspace: str) -> list[GitPath]:
    """What git takes code or directions from, around ``workspace`` (its real path).

    See the module docstring. Missing ``hooks`` and ``config`` are listed too (git
    would use them once created), and ``config.worktree`` when the repository's
    configuration says git reads it; ``.git`` files and ``commondir`` only when they
    exist.
    """
    finder = _Finder()
    here = workspace
    while True:
        entry = os.path.join(here, ".git")
        if os.path.lexists(entry):
            finder.dot_git(entry)
            break
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    for name in _subdirs(workspace):
        if name != ".git":
            entry = os.path.join(workspace, name, ".git")
            if os.path.lexists(entry):
                finder.dot_git(entry)
    return list(dict.fromkeys(finder.out))
