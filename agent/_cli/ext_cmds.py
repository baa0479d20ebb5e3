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
    ManifestError,
    corral_home,
    discover,
    load_manifest,
    quarantine_file,
)

from .safe_text import StreamSanitizer, visible

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
    type=click.Choice(["auto", "required", "off"]),
    default="auto",
    show_default=True,
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per extension.")
def ext_list(ext_paths: tuple[str, ...], mode: str, as_json: bool) -> None:
    """List extensions: name, version, source, enabled, problems, quarantine, sandbox."""
    home = _home()
    found = discover(list(ext_paths), project_dir=os.getcwd(), home=str(home))
    try:
        backend = select_sandbox(mode).backend  # type: ignore[arg-type]
        sandbox_note = backend if backend != "none" else "UNSANDBOXED"
    except SandboxUnavailable as exc:
        sandbox_note = f"REFUSED ({exc})"
    rows: list[dict[str, Any]] = []
    for spec in found.specs:
        q = quarantine_file(home, spec.name)
        problem = ""
        state = "enabled" if spec.manifest.enabled else "disabled"
        if q.exists():
            state = "quarantined"
            problem = q.read_text(errors="replace").strip()
        elif spec.unknown_fields:
            problem = "unknown fields: " + ", ".join(spec.unknown_fields)
        rows.append(
            {
                "name": spec.name,
                "version": spec.manifest.version,
                "source": spec.source,
                "enabled": spec.manifest.enabled,
                "state": state,
                "sandbox": sandbox_note if spec.manifest.enabled else "-",
                "path": spec.dir,
                "problem": problem,
            }
        )
    for shadowed, winner in found.duplicates:
        rows.append(
            {
                "name": shadowed.name,
                "version": shadowed.manifest.version,
                "source": shadowed.source,
                "enabled": shadowed.manifest.enabled,
                "state": "duplicate",
                "sandbox": "-",
                "path": shadowed.dir,
                "problem": f"shadowed by {winner.dir} ({winner.source}); never started",
            }
        )
    for err in found.problems:
        rows.append(
            {
                "name": err.extension,
                "version": "",
                "source": "",
                "enabled": False,
                "state": "invalid",
                "sandbox": "-",
                "path": err.path,
                "problem": f"{err.field}: {err.message}" if err.field else err.message,
            }
        )
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    if not rows:
        click.echo(f"no extensions (install one with `corral ext install PATH`; home: {home})")
        return
    cols = ["name", "version", "source", "state", "sandbox", "problem"]
    # Every cell may come from a manifest or a quarantine record: made terminal-safe.
    cells = [{c: visible(str(r[c])) for c in cols} for r in rows]
    widths = {c: max(len(c), *(len(r[c]) for r in cells)) for c in cols[:-1]}
    click.echo("  ".join(c.upper().ljust(widths.get(c, 0)) for c in cols).rstrip())
    for r in cells:
        click.echo("  ".join(r[c].ljust(widths.get(c, 0)) for c in cols).rstrip())


@ext_group.command("install")
@click.argument("source")
@click.option("--force", is_flag=True, help="Replace an installed extension of the same name.")
def ext_install(source: str, force: bool) -> None:
    """Copy a directory (or shallow-clone a git URL) into $CORRAL_HOME/extensions."""
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
            if path.is_file() and path.name == "extension.json":
                path = path.parent
            if not path.is_dir():
                raise UserError(f"{source}: no such directory")
            shutil.copytree(
                path, src, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__")
            )
        try:
            spec = load_manifest(src, "global", home=str(_home()))
        except ManifestError as exc:
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
        quarantine_file(_home(), spec.name).unlink(missing_ok=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    click.echo(visible(f"installed {spec.name} {spec.manifest.version} → {dest}".rstrip()))


def _installed_names() -> list[str]:
    root = _installed_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


@ext_group.command("remove")
@click.argument("name")
def ext_remove(name: str) -> None:
    """Delete an installed extension's directory."""
    dest = _installed_dir() / name
    if "/" in name or name.startswith(".") or not dest.is_dir():
        known = ", ".join(_installed_names()) or "none"
        raise UserError(f"{name} is not installed (installed: {known})")
    shutil.rmtree(dest)
    quarantine_file(_home(), name).unlink(missing_ok=True)
    click.echo(f"removed {name}")


def _manifest_path(name: str) -> Path:
    found = discover([], project_dir=os.getcwd(), home=str(_home()))
    for spec in found.specs:
        if spec.name == name:
            return Path(spec.manifest_path)
    known = ", ".join(s.name for s in found.specs) or "none"
    raise UserError(f"no extension named {name} (known: {known})")


def _set_enabled(name: str, enabled: bool) -> Path:
    path = _manifest_path(name)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot rewrite: {exc}") from None
    data["enabled"] = enabled
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return path


@ext_group.command("enable")
@click.argument("name")
def ext_enable(name: str) -> None:
    """Enable an extension and lift its crash-loop quarantine."""
    q = quarantine_file(_home(), name)
    lifted = q.exists()
    _set_enabled(name, True)
    q.unlink(missing_ok=True)
    click.echo(f"enabled {name}" + (" (quarantine lifted)" if lifted else ""))


@ext_group.command("disable")
@click.argument("name")
def ext_disable(name: str) -> None:
    """Disable an extension without removing it."""
    _set_enabled(name, False)
    click.echo(f"disabled {name}")


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
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines (Ctrl-C to stop).")
def ext_logs(name: str, follow: bool) -> None:
    """Print an extension's stderr log, control characters made visible."""
    path = _home() / "logs" / f"ext-{name}.log"
    if not path.exists():
        raise UserError(f"no log for {name} yet (looked for {path})")
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
