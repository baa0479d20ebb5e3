"""What an extension's interpreter needs to run inside a sandbox.

The supervisor hands us ``argv[0]`` already resolved (``sys.executable``, the real
``node``, or the extension's own executable). Here we work out, without running
anything, which directories must be visible read-only for that program to start:

* the system directories (``/usr`` and the ``/lib*``, ``/bin`` links) are always
  visible, so an interpreter living there needs nothing more;
* a Python virtual environment needs its own directory (site-packages) *and* the
  base interpreter's prefix named by ``pyvenv.cfg`` (the venv's ``bin/python`` is
  only a symlink to it);
* an interpreter elsewhere (pyenv, nvm, a tarball in /opt) needs its installation
  prefix: the parent of its ``bin`` directory, found through the real path;
* package managers whose binaries link libraries from sibling packages (Homebrew,
  Linuxbrew, Nix) need their whole store.

Version-manager shims (pyenv, rbenv, asdf, mise, volta) are refused: they are
scripts that run the version manager, which would need the user's whole dotfile
tree. The caller must pass the real interpreter (``realpath``, ``sys.executable``).

Nothing here executes ``argv[0]``: for an extension's own executable that would be
running untrusted code outside the sandbox.
"""

from __future__ import annotations

import os
from typing import final

import msgspec

from ._exceptions import PlanError

__all__ = ["LINUX_SYSTEM_DIRS", "RuntimeNeeds", "find_runtime_paths"]

#: Directories every Linux sandbox sees read-only (when they exist on the host).
LINUX_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

#: Stores whose binaries load libraries from elsewhere in the store.
_STORES = ("/opt/homebrew", "/home/linuxbrew/.linuxbrew", "/usr/local/Cellar", "/nix/store")

#: Real-file names of binary shims (they re-exec whatever the version manager picks).
_SHIM_BINARIES = frozenset({"volta-shim", "proto-shim"})


@final
class RuntimeNeeds(msgspec.Struct, frozen=True, kw_only=True):
    """Read-only paths a program needs beyond the system directories."""

    #: Absolute real paths to make visible read-only, outermost first.
    paths: list[str]
    #: Things worth telling the user (an ``env`` shebang, a narrowed prefix).
    notes: list[str]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _read_shebang(path: str) -> str | None:
    """The interpreter line of a script, or None for binaries and unreadable files."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    return line or None


def _venv_paths(argv0: str) -> list[str]:
    """The venv directory and its base interpreter's prefix, if ``argv0`` is in a venv."""
    bin_dir = os.path.dirname(argv0)
    venv = os.path.dirname(bin_dir)
    cfg = os.path.join(venv, "pyvenv.cfg")
    try:
        with open(cfg, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = [os.path.realpath(venv)]
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home":
            home = os.path.realpath(value.strip())
            out.append(os.path.dirname(home) if os.path.basename(home) == "bin" else home)
    return out


class _Finder:
    """Collects the paths one request needs; one instance per call."""

    def __init__(self, name: str, system: tuple[str, ...], avoid: tuple[str, ...]) -> None:
        self.name = name
        self.system = system
        self.avoid = avoid
        self.paths: list[str] = []
        self.notes: list[str] = []

    def visible(self, path: str) -> bool:
        return any(_inside(path, root) for root in (*self.system, *self.paths))

    def safe(self, path: str) -> bool:
        """A path we may bind: not / and not a parent of anything we must keep hidden."""
        if path in ("/", ""):
            return False
        return not any(_inside(hidden, path) for hidden in self.avoid)

    def add(self, path: str) -> None:
        if not self.visible(path):
            self.paths.append(path)

    def add_prefix(self, real: str) -> None:
        """Make the installation holding the real file ``real`` visible."""
        for store in _STORES:
            if _inside(real, store) and os.path.isdir(store):
                self.add(store)
                return
        bin_dir = os.path.dirname(real)
        prefix = os.path.dirname(bin_dir) if os.path.basename(bin_dir) == "bin" else bin_dir
        # Narrow down until the candidate hides what must stay hidden: an interpreter
        # in ~/.local/bin must not expose ~/.local (corral's home lives there).
        for candidate in (prefix, bin_dir, real):
            if self.safe(candidate):
                if candidate != prefix:
                    self.notes.append(
                        f"{real}: exposing only {candidate}, because its prefix {prefix} "
                        "holds private data; libraries outside it will not be found"
                    )
                self.add(candidate)
                return

    def walk(self, argv0: str, depth: int) -> None:
        if not os.path.isabs(argv0):
            raise PlanError(self.name, f"argv[0] {argv0!r} must be an absolute path")
        parts = argv0.split("/")
        real = os.path.realpath(argv0)
        if "shims" in parts or os.path.basename(real) in _SHIM_BINARIES:
            raise PlanError(
                self.name,
                f"{argv0} is a version-manager shim, which cannot run in a sandbox; "
                "use the real interpreter (e.g. `pyenv which python`, `realpath $(which node)`)",
            )
        if not os.path.exists(real):
            raise PlanError(self.name, f"argv[0] {argv0!r} does not exist")
        for path in _venv_paths(argv0):
            if self.safe(path):
                self.add(path)
        if not self.visible(real):
            self.add_prefix(real)
        shebang = _read_shebang(real)
        if shebang is None or depth > 0:
            return
        interpreter = shebang.split()[0]
        if os.path.basename(interpreter) == "env":
            self.notes.append(
                f"{argv0} starts with `#!{shebang}`: the program is looked up on the "
                "sandbox's PATH, which only has the system directories and the interpreter's"
            )
        else:
            self.walk(interpreter, depth + 1)


def find_runtime_paths(
    name: str,
    argv0: str,
    *,
    system: tuple[str, ...] = LINUX_SYSTEM_DIRS,
    avoid: tuple[str, ...] = (),
) -> RuntimeNeeds:
    """Work out which read-only paths ``argv0`` needs beyond ``system``.

    Args:
        name: the extension's name (for errors).
        argv0: absolute path of the program (an interpreter or the extension's own
            executable).
        system: directories already visible in the sandbox.
        avoid: paths that must stay hidden; no ancestor of them is ever returned
            (the home directory, corral's home, the extension and data directories).

    Returns:
        The extra paths and notes.

    Raises:
        PlanError: ``argv0`` is relative, missing, or a version-manager shim.
    """
    finder = _Finder(name, system, tuple(os.path.realpath(p) for p in avoid if p))
    finder.walk(argv0, 0)
    return RuntimeNeeds(paths=finder.paths, notes=finder.notes)
