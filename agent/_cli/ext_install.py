"""``corral ext install`` and ``corral ext remove``: put an extension under corral's
home (copied or shallow-cloned, then pinned), and take it away with its state.

Cancellation: synchronous click commands; Ctrl-C during a clone kills git (its
timeout bounds it) and leaves nothing installed.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import click

from supervisor import (
    MANIFEST_NAME,
    ManifestError,
    TrustError,
    TrustState,
    TrustStore,
    TrustVerdict,
    corral_home,
    data_dir,
    identity_of,
    load_manifest,
    log_file,
    quarantine_file,
)
from supervisor.lowlevel import choice_file, read_small_file

from .confirm import confirm
from .errors import CLIError
from .ext_files import cell, installed_dir, is_git_url
from .helptext import epilog
from .trust import describe

__all__ = ["ext_install", "ext_remove"]


#: Environment of ``git clone``: never ask for a password (fail instead).
_GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "",
    "SSH_ASKPASS": "",
    "GCM_INTERACTIVE": "never",
    "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
}


def _copy_tree(path: Path, dest: Path, limit: int, source: str) -> None:
    """Copy the directory ``path`` to ``dest`` (links as links): regular files only, of
    at most ``limit`` bytes in all (what a pin may digest), each read as it is checked.

    A FIFO, socket or device is refused, never opened to wait on or read without end
    (``copytree``'s own copy would read ``/dev/zero`` until the disk is full).

    Raises:
        CLIError: something is not a regular file, past the bound, or unreadable.
    """
    left = limit

    def copy(src: str, dst: str) -> str:
        nonlocal left
        seen: list[os.stat_result] = []

        def within(st: os.stat_result) -> str | None:
            seen.append(st)
            return None if st.st_size <= left else f"makes more than {limit >> 20} MiB in all"

        data = read_small_file(src, left, follow_symlinks=False, check=within)
        left -= len(data)
        mode = stat.S_IMODE(seen[0].st_mode)
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        with open(fd, "wb") as fh:
            fh.write(data)
        os.chmod(dst, mode)  # past the umask
        os.utime(dst, ns=(seen[0].st_atime_ns, seen[0].st_mtime_ns), follow_symlinks=False)
        return dst

    try:
        shutil.copytree(
            path,
            dest,
            symlinks=True,
            ignore=shutil.ignore_patterns(".git", "__pycache__"),
            copy_function=copy,
        )
    except shutil.Error as exc:
        failed = [f"{s}: {why.removeprefix(f'{s}: ')}" for s, _, why in exc.args[0]]
        more = f" (and {len(failed) - 3} more)" if len(failed) > 3 else ""
        raise CLIError(f"not installed: in {source}: " + "; ".join(failed[:3]) + more) from None
    except OSError as exc:
        raise CLIError(f"not installed: {source}: cannot copy: {exc}") from None


def _clone(source: str, dest: Path, timeout: float) -> None:
    """Shallow-clone ``source`` into ``dest``; errors name ``source`` and quote git whole."""
    if shutil.which("git") is None:
        raise CLIError("installing from a git URL needs `git` on PATH")
    try:
        proc = subprocess.run(
            ["git", "clone", "--quiet", "--depth", "1", "--", source, str(dest)],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env={**os.environ, **_GIT_ENV},
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CLIError(
            f"cannot clone {source}: git did not finish within {timeout:g} s "
            "(unreachable host? raise --timeout)"
        ) from None
    if proc.returncode != 0:
        said = proc.stderr.replace(str(dest), "<destination>").strip().splitlines()
        detail = "\n".join("  " + line for line in said) or "  (git said nothing)"
        raise CLIError(f"cannot clone {source} (git exit {proc.returncode}):\n{detail}")


@click.command(
    "install",
    epilog=epilog(
        examples=[
            ("corral ext install ./examples/extensions/weather", ""),
            ("corral ext install https://example.org/ext.git", "a git URL"),
        ],
        exit_codes=((0, "installed and pinned"), (1, "not installed; nothing left behind")),
    ),
)
@click.argument("source")
@click.option("--force", is_flag=True, help="Replace an installed extension of the same name.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=120.0,
    show_default=True,
    help="Seconds a git clone may take.",
)
def ext_install(source: str, force: bool, timeout: float) -> None:
    """Copy a directory (or shallow-clone a git URL) into $CORRAL_HOME/extensions and pin it."""
    home = corral_home()
    target_root = installed_dir()
    target_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target_root, prefix=".install-"))
    try:
        src = staging / "src"
        if is_git_url(source):
            _clone(source, src, timeout)
        else:
            path = Path(source)
            if path.is_file() and path.name == MANIFEST_NAME:
                path = path.parent
            if not path.is_dir():
                raise CLIError(f"{source}: no such directory")
            _copy_tree(path, src, TrustStore(home).limits.max_bytes, source)
        store = TrustStore(home)
        try:
            spec = load_manifest(src, "global", home=str(home))
            tree = store.digest(spec)  # the content does not depend on where it lies
        except (ManifestError, TrustError) as exc:
            # Name the user's source, not the staging directory it was copied to.
            raise CLIError(f"not installed: {str(exc).replace(str(src), source)}") from None
        dest = target_root / spec.name
        if dest.exists():
            if not force:
                raise CLIError(
                    f"{spec.name} is already installed at {dest}; "
                    "use --force to replace it or `corral ext remove` first"
                )
            shutil.rmtree(dest)
        src.rename(dest)
        try:
            # Pinned as installed, with its permissions resolved where it now lives.
            spec = load_manifest(dest, "global", home=str(home))
            pin = store.pin(spec, tree)
        except (ManifestError, TrustError) as exc:
            shutil.rmtree(dest, ignore_errors=True)
            raise CLIError(f"not installed: {exc}") from None
        quarantine_file(home, spec.identity).unlink(missing_ok=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    click.echo(cell(f"installed {spec.name} {spec.manifest.version} → {dest}"))
    verdict = TrustVerdict(spec=spec, state=TrustState.TRUSTED, tree=tree, pin=pin)
    for line in describe(verdict)[1:]:
        click.echo(line)


def _installed_names() -> list[str]:
    root = installed_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def _forget(home: Path, identity: str, *, purge: bool) -> None:
    """Delete an extension's state: logs, quarantine record, choice, pin; data if ``purge``."""
    if purge:
        shutil.rmtree(data_dir(home, identity), ignore_errors=True)
    log = log_file(home, identity)
    for path in (log, log.with_name(log.name + ".1"), quarantine_file(home, identity)):
        path.unlink(missing_ok=True)
    choice_file(home, identity).unlink(missing_ok=True)
    try:
        TrustStore(home).unpin(identity)
    except TrustError as exc:
        raise CLIError(f"removed, but its pin could not be dropped: {exc}") from None


@click.command(
    "remove",
    epilog=epilog(
        examples=[
            ("corral ext remove weather", "asks first"),
            ("corral ext remove -y --purge weather", "data too, no question"),
        ],
        exit_codes=((0, "removed"), (1, "not installed, or not confirmed")),
    ),
)
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask (needed without a terminal).")
@click.option("--purge", is_flag=True, help="Delete its data directory too.")
def ext_remove(name: str, yes: bool, purge: bool) -> None:
    """Uninstall an extension; its data stays unless --purge.

    Deletes the installed copy, its logs, quarantine record, enable/disable choice
    and trust pin. Its data directory (under $CORRAL_HOME/data) is kept for a
    reinstall, unless --purge. Asks first on a terminal.
    """
    home = corral_home()
    dest = installed_dir() / name
    if "/" in name or name.startswith(".") or not dest.is_dir():
        known = ", ".join(_installed_names()) or "none"
        raise CLIError(f"{name} is not installed (installed: {known})")
    try:
        identity = load_manifest(dest, "global", home=str(home)).identity
    except ManifestError:
        identity = identity_of(name, str(dest))  # installed under its name
    data = data_dir(home, identity)
    keeps = " and its data" if purge and data.exists() else ""
    confirm(f"Remove {name} ({dest}){keeps}?", yes, declined="nothing removed", what="remove it")
    shutil.rmtree(dest)
    _forget(home, identity, purge=purge)
    if data.exists():
        click.echo(cell(f"removed {name}; its data stays in {data} (--purge deletes it)"))
    else:
        click.echo(f"removed {name}")
