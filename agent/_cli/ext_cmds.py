"""``corral ext …`` and ``corral sandbox check``: manage installed extensions.

These commands work on files (manifests, logs, quarantine records); they never
start an extension. Live status and stats of running extensions are in
``/ext`` (chat) and ``ext_list`` (RPC).
"""

from __future__ import annotations

import codecs
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import typing
from pathlib import Path
from typing import Any

import click
import msgspec

from sandbox import SandboxUnavailable, check_sandbox, format_report, select_sandbox
from supervisor import (
    MANIFEST_NAME,
    Discovery,
    ExtensionSpec,
    ManifestError,
    Source,
    TrustError,
    TrustState,
    TrustStore,
    TrustVerdict,
    choice_file,
    corral_home,
    data_dir,
    describe_permissions,
    discover,
    identity_of,
    load_manifest,
    log_file,
    quarantine_file,
)

from .helptext import epilog
from .safe_text import StreamSanitizer, visible_lines
from .trust import describe, shadowed_by, visible

__all__ = ["ext_group", "sandbox_group"]


class UserError(click.ClickException):
    """A mistake the user can fix; shown as one line, exit status 1."""

    def format_message(self) -> str:
        # Messages quote manifests, paths, logs and git: every line made terminal-safe.
        return "\n".join(visible_lines(self.message))


def _home() -> Path:
    return corral_home()


def _installed_dir() -> Path:
    return _home() / "extensions"


def _is_git_url(source: str) -> bool:
    if Path(source).exists():
        return False
    prefixes = ("http://", "https://", "git@", "ssh://", "git://", "file://")
    return source.startswith(prefixes) or source.endswith(".git")


def _found() -> Discovery:
    return discover([], project_dir=os.getcwd(), home=str(_home()))


def _source_of(path: Path) -> Source:
    """Where a directory named by path lives: installed, project-local, or neither."""
    parent = path.expanduser().absolute().parent
    if os.path.realpath(parent) == os.path.realpath(_installed_dir()):
        return "global"
    if parent.name == "extensions" and parent.parent.name == ".corral":
        return "project"
    return "cli"


def _resolve(target: str) -> tuple[ExtensionSpec, Discovery]:
    """The extension ``target`` names: a name as discovered here, or its directory."""
    found = _found()
    is_path = "/" in target or target in (".", "..") or target.startswith("~")
    spec = None if is_path else next((s for s in found.specs if s.name == target), None)
    if spec is not None:
        return spec, found
    if not is_path and not Path(target).is_dir():
        known = ", ".join(s.name for s in found.specs) or "none"
        shadowed = [s.dir for s, _ in found.duplicates if s.name == target]
        hint = f"; the one in {shadowed[0]} is shadowed: name it by its path" if shadowed else ""
        raise UserError(f"no extension named {target} here (known: {known}){hint}")
    path = Path(target).expanduser()
    try:
        return load_manifest(path, _source_of(path), home=str(_home())), found
    except ManifestError as exc:
        raise UserError(str(exc)) from None


def _verify(store: TrustStore, spec: ExtensionSpec) -> TrustVerdict:
    try:
        return store.verify(spec)
    except TrustError as exc:
        raise UserError(f"cannot check trust: {exc}") from None


#: ``ext list`` cuts descriptions to this many characters (``--json`` has them whole).
_DESCRIPTION_WIDTH = 40


def _cell(value: object) -> str:
    return visible(str(value))


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, with an ellipsis when cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


@click.group("ext")
def ext_group() -> None:
    """Manage extensions: list, install, trust, logs.

    Installed extensions live in $CORRAL_HOME/extensions, project-local ones in
    .corral/extensions. None of these commands starts an extension.
    """


@ext_group.command(
    "list",
    epilog=epilog(
        examples=[
            ("corral ext list", ""),
            ("corral ext list --json", "one JSON object per extension"),
        ],
        exit_codes=((0, "listed"),),
    ),
)
@click.option(
    "-e",
    "--ext",
    "ext_paths",
    multiple=True,
    type=click.Path(),
    help="Extra extension path (repeatable).",
)
@click.option(
    "--sandbox",
    "mode",
    type=click.Choice(["auto", "required", "off"]),
    default="auto",
    show_default=True,
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per extension.")
def ext_list(ext_paths: tuple[str, ...], mode: str, as_json: bool) -> None:
    """List extensions: state, trust, description, permissions, sandbox, problems.

    Every extension found: --ext paths, then project-local ones (.corral/extensions),
    then installed ones, in that order. Nothing is started.
    """
    home = _home()
    found = discover(list(ext_paths), project_dir=os.getcwd(), home=str(home))
    store = TrustStore(home)
    try:
        backend = select_sandbox(mode).backend  # type: ignore[arg-type]
        sandbox_note = backend if backend != "none" else "UNSANDBOXED"
    except SandboxUnavailable as exc:
        sandbox_note = f"REFUSED ({exc})"
    rows: list[dict[str, Any]] = []

    def row(spec: ExtensionSpec, state: str, trust: str, sandbox: str, problem: str) -> None:
        perms = spec.manifest.permissions
        rows.append(
            {
                "name": spec.name,
                "version": spec.manifest.version,
                "description": spec.manifest.description,
                "source": spec.source,
                "enabled": spec.manifest.enabled,
                "state": state,
                "trust": trust,
                "permissions": msgspec.to_builtins(perms),
                "permissions_summary": describe_permissions(perms),
                "sandbox": sandbox,
                "path": spec.dir,
                "identity": spec.identity,
                "problem": problem,
            }
        )

    for spec in found.specs:
        q = quarantine_file(home, spec.identity)
        problem = ""
        state = "enabled" if spec.manifest.enabled else "disabled"
        try:
            verdict = store.verify(spec)
            trust = verdict.state.value
        except TrustError as exc:
            verdict, trust = None, "unknown"
            problem = f"cannot check trust: {exc}"
        if q.exists():
            state = "quarantined"
            problem = q.read_text(errors="replace").strip()
        elif verdict is not None and not verdict.ok:
            problem = verdict.problem
        elif spec.unknown_fields:
            problem = "unknown fields: " + ", ".join(spec.unknown_fields)
        row(spec, state, trust, sandbox_note if spec.manifest.enabled else "-", problem)
    for shadowed, winner in found.duplicates:
        why = f"shadowed by {winner.dir} ({winner.source}); never started"
        row(shadowed, "duplicate", "-", "-", why)
    for err in found.problems:
        rows.append(
            {
                "name": err.extension,
                "version": "",
                "description": "",
                "source": "",
                "enabled": False,
                "state": "invalid",
                "trust": "-",
                "permissions": None,
                "permissions_summary": "-",
                "sandbox": "-",
                "path": err.path,
                "identity": "",
                "problem": f"{err.field}: {err.message}" if err.field else err.message,
            }
        )
    if as_json:
        for r in rows:
            click.echo(json.dumps(r))
        return
    if not rows:
        click.echo(f"no extensions (install one with `corral ext install PATH`; home: {home})")
        return
    cols = ["name", "version", "source", "state", "trust", "description"]
    cols += ["permissions_summary", "sandbox", "problem"]
    heads = {"permissions_summary": "PERMISSIONS"}
    cells = [{c: _cell(r[c]) for c in cols} for r in rows]
    for cell in cells:
        cell["description"] = clip(cell["description"], _DESCRIPTION_WIDTH)
    widths = {c: max(len(heads.get(c, c)), *(len(cell[c]) for cell in cells)) for c in cols[:-1]}
    click.echo("  ".join(heads.get(c, c.upper()).ljust(widths.get(c, 0)) for c in cols).rstrip())
    for cell in cells:
        click.echo("  ".join(cell[c].ljust(widths.get(c, 0)) for c in cols).rstrip())


#: Environment of ``git clone``: never ask for a password (fail instead).
_GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "",
    "SSH_ASKPASS": "",
    "GCM_INTERACTIVE": "never",
    "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
}


def _clone(source: str, dest: Path, timeout: float) -> None:
    """Shallow-clone ``source`` into ``dest``; errors name ``source`` and quote git whole."""
    if shutil.which("git") is None:
        raise UserError("installing from a git URL needs `git` on PATH")
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
        raise UserError(
            f"cannot clone {source}: git did not finish within {timeout:g} s "
            "(unreachable host? raise --timeout)"
        ) from None
    if proc.returncode != 0:
        said = proc.stderr.replace(str(dest), "<destination>").strip().splitlines()
        detail = "\n".join("  " + line for line in said) or "  (git said nothing)"
        raise UserError(f"cannot clone {source} (git exit {proc.returncode}):\n{detail}")


@ext_group.command(
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
    home = _home()
    target_root = _installed_dir()
    target_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target_root, prefix=".install-"))
    try:
        src = staging / "src"
        if _is_git_url(source):
            _clone(source, src, timeout)
        else:
            path = Path(source)
            if path.is_file() and path.name == MANIFEST_NAME:
                path = path.parent
            if not path.is_dir():
                raise UserError(f"{source}: no such directory")
            shutil.copytree(
                path, src, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__")
            )
        store = TrustStore(home)
        try:
            spec = load_manifest(src, "global", home=str(home))
            tree = store.digest(spec)  # the content does not depend on where it lies
        except (ManifestError, TrustError) as exc:
            # Name the user's source, not the staging directory it was copied to.
            raise UserError(f"not installed: {str(exc).replace(str(src), source)}") from None
        dest = target_root / spec.name
        if dest.exists():
            if not force:
                raise UserError(
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
            raise UserError(f"not installed: {exc}") from None
        quarantine_file(home, spec.identity).unlink(missing_ok=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    click.echo(_cell(f"installed {spec.name} {spec.manifest.version} → {dest}"))
    verdict = TrustVerdict(spec=spec, state=TrustState.TRUSTED, tree=tree, pin=pin)
    for line in describe(verdict)[1:]:
        click.echo(line)


def _installed_names() -> list[str]:
    root = _installed_dir()
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
        raise UserError(f"removed, but its pin could not be dropped: {exc}") from None


def _confirm(question: str, yes: bool) -> None:
    """Ask ``question`` on a terminal; without one, only ``-y`` goes ahead."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise UserError("not asking without a terminal: add -y to go ahead")
    if not click.confirm(question, default=False):
        raise UserError("nothing removed")


@ext_group.command(
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
    home = _home()
    dest = _installed_dir() / name
    if "/" in name or name.startswith(".") or not dest.is_dir():
        known = ", ".join(_installed_names()) or "none"
        raise UserError(f"{name} is not installed (installed: {known})")
    try:
        identity = load_manifest(dest, "global", home=str(home)).identity
    except ManifestError:
        identity = identity_of(name, str(dest))  # installed under its name
    data = data_dir(home, identity)
    keeps = " and its data" if purge and data.exists() else ""
    _confirm(f"Remove {name} ({dest}){keeps}?", yes)
    shutil.rmtree(dest)
    _forget(home, identity, purge=purge)
    if data.exists():
        click.echo(_cell(f"removed {name}; its data stays in {data} (--purge deletes it)"))
    else:
        click.echo(f"removed {name}")


def _choose(target: str, enabled: bool) -> ExtensionSpec:
    """Record the user's enable/disable choice under corral's home (never in the manifest)."""
    spec, _ = _resolve(target)
    if spec.source == "cli":
        raise UserError(
            f"{spec.dir} is neither installed nor project-local; an extension named with "
            "--ext runs because you name it: leave it out instead"
        )
    path = choice_file(_home(), spec.identity)
    try:
        manifest = load_manifest(spec.dir, spec.source).manifest.enabled  # without a choice
    except ManifestError as exc:
        raise UserError(str(exc)) from None
    try:
        if manifest == enabled:
            path.unlink(missing_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("true\n" if enabled else "false\n")
    except OSError as exc:
        raise UserError(f"cannot record the choice in {path}: {exc.strerror}") from None
    return spec


@ext_group.command(
    "enable",
    epilog=epilog(
        examples=[("corral ext enable weather", "")],
        exit_codes=((0, "enabled"), (1, "no such extension")),
    ),
)
@click.argument("target", metavar="NAME|PATH")
def ext_enable(target: str) -> None:
    """Enable an extension and lift its crash-loop quarantine.

    The choice is recorded under $CORRAL_HOME; the extension's files are not touched.
    """
    spec = _choose(target, True)
    q = quarantine_file(_home(), spec.identity)
    lifted = q.exists()
    q.unlink(missing_ok=True)
    click.echo(f"enabled {spec.name}" + (" (quarantine lifted)" if lifted else ""))


@ext_group.command(
    "disable",
    epilog=epilog(
        examples=[("corral ext disable weather", "")],
        exit_codes=((0, "disabled"), (1, "no such extension")),
    ),
)
@click.argument("target", metavar="NAME|PATH")
def ext_disable(target: str) -> None:
    """Keep an extension from starting, without removing it.

    The choice is recorded under $CORRAL_HOME (never in a project's repository);
    `corral ext enable` undoes it.
    """
    spec = _choose(target, False)
    click.echo(f"disabled {spec.name}")


@ext_group.command(
    "trust",
    epilog=epilog(
        examples=[
            ("corral ext trust .corral/extensions/notes", "review, then answer y"),
            ("corral ext trust -y notes", ""),
        ],
        exit_codes=((0, "trusted"), (1, "not trusted")),
    ),
)
@click.argument("target", metavar="NAME|PATH")
@click.option("-y", "--yes", is_flag=True, help="Trust without asking, as shown.")
def ext_trust(target: str, yes: bool) -> None:
    """Show what an extension is and may do, and pin it: it starts only while unchanged."""
    spec, found = _resolve(target)
    if spec.source == "cli":
        raise UserError(
            f"{spec.dir} is neither installed nor project-local (.corral/extensions/NAME); "
            "an extension named with --ext needs no trust"
        )
    store = TrustStore(_home())
    verdict = _verify(store, spec)
    for line in describe(verdict, shadowed_by(found, spec)):
        click.echo(line)
    if verdict.state is TrustState.TRUSTED:
        click.echo(f"{spec.name} is trusted as it is; nothing to do")
        return
    if verdict.tree is None:
        raise UserError(verdict.problem)
    if not yes:
        if not sys.stdin.isatty():
            raise UserError("not asking without a terminal: add -y to trust it as shown above")
        if not click.confirm(f"Trust {spec.name}?", default=False):
            raise UserError(f"{spec.name} not trusted")
    try:
        store.pin(spec, verdict.tree)
    except TrustError as exc:
        raise UserError(f"not trusted: {exc}") from None
    click.echo(f"trusted {spec.name}")


@ext_group.command(
    "untrust",
    epilog=epilog(
        examples=[("corral ext untrust notes", "")],
        exit_codes=((0, "done"), (1, "no such extension")),
    ),
)
@click.argument("target", metavar="NAME|PATH")
def ext_untrust(target: str) -> None:
    """Forget an extension's pin: it will not start until trusted again."""
    spec, _ = _resolve(target)
    try:
        found = TrustStore(_home()).unpin(spec.identity)
    except TrustError as exc:
        raise UserError(str(exc)) from None
    if found:
        click.echo(f"untrusted {spec.name}: it will not start until trusted again")
    else:
        click.echo(f"{spec.name} was not trusted")


@typing.final
class _LogPrinter:
    """Writes log bytes as terminal-safe UTF-8 text; chunks may split characters."""

    def __init__(self, out: typing.BinaryIO) -> None:
        self._out = out
        self._decoder = codecs.getincrementaldecoder("utf-8")("backslashreplace")
        self._text = StreamSanitizer()

    def write(self, chunk: bytes, *, final: bool = False) -> None:
        shown = self._text.feed(self._decoder.decode(chunk, final))
        if final:
            shown += self._text.flush()
        self._out.write(shown.encode())
        self._out.flush()


@ext_group.command(
    "logs",
    epilog=epilog(
        examples=[
            ("corral ext logs weather", ""),
            ("corral ext logs -f weather", "follow; Ctrl-C stops"),
        ],
        exit_codes=((0, "printed"), (1, "no such extension or no log yet")),
    ),
)
@click.argument("target", metavar="NAME|PATH")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines (Ctrl-C to stop).")
def ext_logs(target: str, follow: bool) -> None:
    """Print an extension's stderr log, control characters made visible."""
    spec, _ = _resolve(target)
    path = log_file(_home(), spec.identity)
    if not path.exists():
        raise UserError(f"no log for {spec.name} yet (looked for {path})")
    # The file keeps the bytes as written; only what reaches the terminal is escaped.
    out = _LogPrinter(sys.stdout.buffer)
    with path.open("rb") as fh:
        out.write(fh.read(), final=not follow)
        if not follow:
            return
        try:
            while True:
                chunk = fh.read()
                if chunk:
                    out.write(chunk)
                elif path.stat().st_size < fh.tell():  # rotated: start over
                    fh.seek(0)
                else:
                    # A log file has no portable "new data" event; tail -f polls too.
                    time.sleep(0.25)
        except KeyboardInterrupt:
            return


@click.group("sandbox")
def sandbox_group() -> None:
    """Check which sandbox backend works here."""


@sandbox_group.command(
    "check",
    epilog=epilog(
        examples=[("corral sandbox check", ""), ("corral sandbox check --json", "")],
        exit_codes=(
            (0, "a sandbox backend works"),
            (1, "none works: extensions would run unsandboxed"),
        ),
    ),
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def sandbox_check(as_json: bool) -> None:
    """Probe the machine once and report which backend works, or why not."""
    report = check_sandbox()
    if as_json:
        click.echo(msgspec.json.encode(report).decode())
    else:
        click.echo(format_report(report))
    if report.chosen == "none":
        sys.exit(1)
