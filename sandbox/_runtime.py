"""What an interpreter corral chose needs to run inside a sandbox.

Runtime binds come only from interpreters corral itself chose
(:attr:`LaunchRequest.interpreter <sandbox.LaunchRequest.interpreter>`: its
``python``, the real ``node``), never from a file the extension controls: not
from a ``pyvenv.cfg`` beside the extension's own executable, not from its
shebang. An extension executed directly sees the system directories only; if its
shebang names an interpreter outside them, :func:`program_note` says why it will
not start.

For a chosen interpreter, without running anything:

* the system directories (``/usr`` and the ``/lib*``, ``/bin`` links) are always
  visible, so an interpreter living there needs nothing more;
* a Python virtual environment needs its own directory (site-packages) *and* the
  base interpreter's prefix named by its ``pyvenv.cfg``; when the directory may not
  be bound whole (a pip-installed corral keeps its example extensions inside it),
  its ``bin`` and ``pyvenv.cfg`` are enough to start the interpreter;
* an interpreter elsewhere (pyenv, nvm, a tarball in /opt) needs its installation
  prefix: the parent of its ``bin`` directory, found through the real path, and,
  when it was named through a link in a ``bin`` directory (nvm's ``npx``), that
  directory's prefix too;
* package managers whose binaries link libraries from sibling packages (Homebrew,
  Linuxbrew, Nix) need their whole store.

Every runtime path passes the rules a read-only grant does
(:mod:`sandbox._forbidden`): it never contains the user's home, the project tree,
or the extension's own and data directories, and neither contains nor lies in
corral's home. A prefix that would is narrowed (``~/.local`` → ``~/.local/bin``)
or refused.

Version-manager shims (pyenv, rbenv, asdf, mise, volta) are refused: they are
scripts that run the version manager, which would need the user's whole dotfile
tree. The caller must pass the real interpreter (``realpath``, ``sys.executable``).
"""

from __future__ import annotations

import os
from typing import final

import msgspec

from ._exceptions import PlanError
from ._forbidden import never_problem, path_risk
from ._regular import read_head
from ._within import inside

__all__ = ["LINUX_SYSTEM_DIRS", "RuntimeNeeds", "find_runtime_paths", "program_note"]

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
    #: ``(path, real)``: a path the interpreter is named by, shown at that name
    #: because it reaches its real place through a symbolic link (a venv under a
    #: linked directory). Each ``real`` lies inside ``paths``: nothing more is seen.
    aliases: list[tuple[str, str]] = []


def _read_shebang(path: str) -> str | None:
    """The interpreter line of a script, or None for binaries and unreadable files."""
    head = read_head(path, 256)
    if head is None or not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    return line or None


def _venv_paths(interpreter: str) -> tuple[str, str] | None:
    """The venv directory and its base interpreter's prefix, if it is a venv's python."""
    venv = os.path.dirname(os.path.dirname(interpreter))
    data = read_head(os.path.join(venv, "pyvenv.cfg"), 64 * 1024)
    if data is None:
        return None
    lines = data.decode("utf-8", "replace").splitlines()
    base = ""
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home":
            home = os.path.realpath(value.strip())
            base = os.path.dirname(home) if os.path.basename(home) == "bin" else home
    return os.path.realpath(venv), base


class _Finder:
    """Collects the paths one interpreter needs; one instance per call."""

    def __init__(
        self,
        name: str,
        system: tuple[str, ...],
        home: str,
        hidden: tuple[str, ...],
        private: tuple[str, ...],
    ) -> None:
        self.name = name
        self.system = system
        self.home = home
        self.hidden = hidden
        self.private = private
        self.paths: list[str] = []
        self.notes: list[str] = []

    def visible(self, path: str) -> bool:
        return any(inside(path, root) for root in (*self.system, *self.paths))

    def problem(self, path: str) -> str | None:
        """Why ``path`` may not be bound (the rules of a read-only grant), or None."""
        for keep in self.private:
            if inside(path, keep):
                return f"is inside {keep}, which must stay hidden"
        hidden = (*self.hidden, *self.private)
        return never_problem(path, home=self.home, hidden=hidden) or path_risk(
            path, writable=False, home=self.home, ext_dir=""
        )

    def add(self, path: str) -> None:
        if not self.visible(path):
            self.paths.append(path)

    def add_prefix(self, real: str) -> None:
        """Make the installation holding the real file ``real`` visible."""
        for store in _STORES:
            if inside(real, store) and os.path.isdir(store) and not self.problem(store):
                self.add(store)
                return
        bin_dir = os.path.dirname(real)
        prefix = os.path.dirname(bin_dir) if os.path.basename(bin_dir) == "bin" else bin_dir
        # Narrow down until the candidate hides what must stay hidden: an interpreter
        # in ~/.local/bin must not expose ~/.local (corral's home lives there).
        why = ""
        for candidate in (prefix, bin_dir, real):
            why = self.problem(candidate) or ""
            if not why:
                if candidate != prefix:
                    self.notes.append(
                        f"{real}: exposing only {candidate}, because its prefix {prefix} "
                        "holds private data; libraries outside it will not be found"
                    )
                self.add(candidate)
                return
        raise PlanError(self.name, f"the interpreter {real} cannot be made visible: it {why}")

    def add_link_prefix(self, link: str) -> None:
        """Make the installation a link lives in visible too, when it is one
        (``<prefix>/bin/npx -> ../lib/node_modules/npm/bin/npx-cli.js``: the real
        file's prefix is npm's, the link's holds the ``node`` its ``env`` shebang
        finds on PATH). Best effort: a prefix that may not be bound is skipped."""
        bin_dir = os.path.dirname(link)
        if os.path.basename(bin_dir) != "bin":
            return
        for candidate in (os.path.dirname(bin_dir), bin_dir):
            if self.visible(candidate):
                return
            if not self.problem(candidate):
                # It holds the real file's prefix, usually: one bind, not two.
                self.paths = [p for p in self.paths if not inside(p, candidate)]
                self.add(candidate)
                return

    def add_venv(self, venv: str, base: str) -> None:
        """A virtual environment: its directory, else its ``bin`` and ``pyvenv.cfg``.

        corral installed with pip ships its example extensions inside the venv's
        site-packages, so the venv contains an extension's directory and may not be
        bound whole. The interpreter only needs its own path (``bin``, whose links
        lead to the base prefix) and ``pyvenv.cfg``; the extension's imports come
        from the runtime paths its caller names (the SDK), never from the venv.
        """
        parts = [venv] if not self.problem(venv) else [f"{venv}/bin", f"{venv}/pyvenv.cfg"]
        for path in (*parts, base):
            if path and not self.problem(path):
                self.add(path)

    def walk(self, interpreter: str, depth: int) -> None:
        if not os.path.isabs(interpreter):
            raise PlanError(self.name, f"the interpreter {interpreter!r} must be an absolute path")
        parts = interpreter.split("/")
        real = os.path.realpath(interpreter)
        if "shims" in parts or os.path.basename(real) in _SHIM_BINARIES:
            raise PlanError(
                self.name,
                f"{interpreter} is a version-manager shim, which cannot run in a sandbox; "
                "use the real interpreter (e.g. `pyenv which python`, `realpath $(which node)`)",
            )
        if not os.path.exists(real):
            raise PlanError(self.name, f"the interpreter {interpreter!r} does not exist")
        venv = _venv_paths(interpreter)
        if venv is not None:
            self.add_venv(*venv)
        if not self.visible(real):
            self.add_prefix(real)
        if depth == 0 and real != os.path.normpath(interpreter):
            self.add_link_prefix(interpreter)
        shebang = _read_shebang(real)
        if shebang is None or depth > 0:
            return
        program = shebang.split()[0]
        if os.path.basename(program) == "env":
            self.notes.append(
                f"{interpreter} starts with `#!{shebang}`: the program is looked up on the "
                "sandbox's PATH, which only has the system directories and the interpreter's"
            )
        else:
            self.walk(program, depth + 1)


def find_runtime_paths(
    name: str,
    interpreter: str,
    *,
    system: tuple[str, ...] = LINUX_SYSTEM_DIRS,
    home: str = "",
    hidden: tuple[str, ...] = (),
    private: tuple[str, ...] = (),
) -> RuntimeNeeds:
    """Work out which read-only paths the interpreter corral chose needs beyond ``system``.

    Args:
        name: the extension's name (for errors).
        interpreter: absolute path of an interpreter corral chose; never the
            extension's own program.
        system: directories already visible in the sandbox.
        home: the user's home: never bound, nor any parent of it.
        hidden: further paths no runtime path may contain (the project tree, the
            extension's and data directories).
        private: paths no runtime path may contain or lie inside (corral's home).

    Returns:
        The extra paths and notes.

    Raises:
        PlanError: the interpreter is relative, missing, a version-manager shim,
            or only reachable through a path that may not be bound.
    """
    real = [tuple(os.path.realpath(p) for p in paths if p) for paths in (hidden, private)]
    finder = _Finder(name, system, os.path.realpath(home) if home else "", real[0], real[1])
    finder.walk(interpreter, 0)
    return RuntimeNeeds(
        paths=finder.paths, notes=finder.notes, aliases=_aliases(interpreter, finder)
    )


def _aliases(interpreter: str, finder: _Finder) -> list[tuple[str, str]]:
    """The interpreter's directory and ``pyvenv.cfg`` at the names it is run by.

    The sandbox shows runtime paths at their real place; an interpreter named
    through a linked directory (``~/link/venv/bin/python``) would not be found. A
    name inside the system directories needs none (``/bin/sh`` on a merged-``/usr``
    system): the sandbox shows those with their own links, and a bind over a link
    is refused by bwrap.
    """
    spelled = os.path.dirname(os.path.abspath(interpreter))
    out: list[tuple[str, str]] = []
    for path in (spelled, os.path.join(os.path.dirname(spelled), "pyvenv.cfg")):
        real = os.path.realpath(path)
        if any(inside(path, root) for root in finder.system):
            continue
        if real != path and os.path.exists(real) and finder.visible(real):
            out.append((path, real))
    return out


def program_note(program: str, visible: list[str]) -> str | None:
    """Why the extension's own ``program`` will not start in the sandbox, if it can tell.

    Its shebang is read for this note only: nothing it names is ever bound.
    """
    shebang = _read_shebang(program)
    if shebang is None:
        return None
    interpreter = shebang.split()[0]
    if os.path.basename(interpreter) == "env" or any(inside(interpreter, v) for v in visible):
        return None
    return (
        f"{program} starts with `#!{interpreter}`, which the sandbox does not show (only "
        "the system directories are visible to a program run directly); use an "
        "interpreter under /usr, or declare the manifest's language so corral runs it"
    )
