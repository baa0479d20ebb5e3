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

from sandbox import SandboxMode, SandboxUnavailable, check_sandbox, format_report, select_sandbox
from supervisor import (
    MANIFEST_NAME,
    Discovery,
    ExtensionSpec,
    ManifestError,
    Source,
    TreeDigest,
    TrustError,
    TrustState,
    TrustStore,
    TrustVerdict,
    corral_home,
    data_dir,
    describe_permissions,
    discover,
    file_sha256,
    identity_of,
    load_manifest,
    log_file,
    quarantine_file,
)

from .safe_text import StreamSanitizer
from .trust import describe, shadowed_by, visible

__all__ = ["ext_group", "sandbox_group"]


class UserError(click.ClickException):
    """A mistake the user can fix; shown as one line, exit status 1."""

    def format_message(self) -> str:
        # Messages quote manifests, paths and logs: the extension's text.
        return visible(self.message)


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


def _cell(value: object) -> str:
    return visible(str(value))


@click.group("ext")
def ext_group() -> None:
    """Manage extensions (installed under $CORRAL_HOME/extensions)."""


@ext_group.command("list")
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
    type=click.Choice([m.value for m in SandboxMode]),
    default="auto",
    show_default=True,
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per extension.")
def ext_list(ext_paths: tuple[str, ...], mode: str, as_json: bool) -> None:
    """List extensions: name, version, source, state, trust, permissions, sandbox, problems."""
    home = _home()
    found = discover(list(ext_paths), project_dir=os.getcwd(), home=str(home))
    store = TrustStore(home)
    try:
        backend = select_sandbox(mode).backend
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
    cols = ["name", "version", "source", "state", "trust", "permissions_summary", "sandbox"]
    cols.append("problem")
    heads = {"permissions_summary": "PERMISSIONS"}
    widths = {c: max(len(heads.get(c, c)), *(len(_cell(r[c])) for r in rows)) for c in cols[:-1]}
    click.echo("  ".join(heads.get(c, c.upper()).ljust(widths.get(c, 0)) for c in cols).rstrip())
    for r in rows:
        click.echo("  ".join(_cell(r[c]).ljust(widths.get(c, 0)) for c in cols).rstrip())


@ext_group.command("install")
@click.argument("source")
@click.option("--force", is_flag=True, help="Replace an installed extension of the same name.")
def ext_install(source: str, force: bool) -> None:
    """Copy a directory (or shallow-clone a git URL) into $CORRAL_HOME/extensions and pin it."""
    home = _home()
    target_root = _installed_dir()
    target_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target_root, prefix=".install-"))
    try:
        src = staging / "src"
        if _is_git_url(source):
            if shutil.which("git") is None:
                raise UserError("installing from a git URL needs `git` on PATH")
            proc = subprocess.run(
                ["git", "clone", "--quiet", "--depth", "1", source, str(src)],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                detail = proc.stderr.strip().splitlines()[-1:] or ["git clone failed"]
                raise UserError(f"cannot clone {source}: {detail[0]}")
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
            raise UserError(f"not installed: {exc}") from None
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


def _forget(home: Path, identity: str) -> None:
    """Delete an extension's state: data, logs, quarantine record, trust pin."""
    shutil.rmtree(data_dir(home, identity), ignore_errors=True)
    log = log_file(home, identity)
    for path in (log, log.with_name(log.name + ".1"), quarantine_file(home, identity)):
        path.unlink(missing_ok=True)
    try:
        TrustStore(home).unpin(identity)
    except TrustError as exc:
        raise UserError(f"removed, but its pin could not be dropped: {exc}") from None


@ext_group.command("remove")
@click.argument("name")
def ext_remove(name: str) -> None:
    """Delete an installed extension with its data, logs, quarantine record and pin."""
    home = _home()
    dest = _installed_dir() / name
    if "/" in name or name.startswith(".") or not dest.is_dir():
        known = ", ".join(_installed_names()) or "none"
        raise UserError(f"{name} is not installed (installed: {known})")
    try:
        identity = load_manifest(dest, "global", home=str(home)).identity
    except ManifestError:
        identity = identity_of(name, str(dest))  # installed under its name
    shutil.rmtree(dest)
    _forget(home, identity)
    click.echo(f"removed {name} and its state")


def _repin(store: TrustStore, spec: ExtensionSpec, before: TreeDigest, new: bytes) -> bool:
    """Pin ``spec`` again after corral itself rewrote its manifest to ``new``.

    Only when nothing else changed: the directory must digest exactly as before,
    but for the manifest, which must hold ``new``.
    """
    name = os.path.basename(spec.manifest_path)
    digest = file_sha256(new)
    expected = tuple(
        e._replace(payload=digest, size=len(new)) if e.path == name else e for e in before.entries
    )
    try:
        after = load_manifest(spec.dir, spec.source, home=str(_home()))
        tree = store.digest(after)
        if (
            tree.entries != expected
            or after.manifest_sha256 != digest
            or after.manifest.permissions != spec.manifest.permissions
        ):
            return False
        store.pin(after, tree)
    except (ManifestError, TrustError):
        return False
    return True


def _set_enabled(target: str, enabled: bool) -> ExtensionSpec:
    spec, _ = _resolve(target)
    store = TrustStore(_home())
    before = _verify(store, spec)
    path = Path(spec.manifest_path)
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot rewrite: {exc}") from None
    if file_sha256(raw) != spec.manifest_sha256 or not isinstance(data, dict):
        raise UserError(f"{path}: changed while being read; try again")
    data["enabled"] = enabled
    new = (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()
    path.write_bytes(new)
    trusted = before.state is TrustState.TRUSTED and before.tree is not None
    if trusted and before.tree is not None and not _repin(store, spec, before.tree, new):
        click.echo(f"warning: {spec.name} changed meanwhile; review it: corral ext trust", err=True)
    return spec


@ext_group.command("enable")
@click.argument("target", metavar="NAME|PATH")
def ext_enable(target: str) -> None:
    """Enable an extension and lift its crash-loop quarantine."""
    spec = _set_enabled(target, True)
    q = quarantine_file(_home(), spec.identity)
    lifted = q.exists()
    q.unlink(missing_ok=True)
    click.echo(f"enabled {spec.name}" + (" (quarantine lifted)" if lifted else ""))


@ext_group.command("disable")
@click.argument("target", metavar="NAME|PATH")
def ext_disable(target: str) -> None:
    """Disable an extension without removing it."""
    spec = _set_enabled(target, False)
    click.echo(f"disabled {spec.name}")


@ext_group.command("trust")
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


@ext_group.command("untrust")
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


@ext_group.command("logs")
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
    """Inspect the sandbox backends."""


@sandbox_group.command("check")
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
