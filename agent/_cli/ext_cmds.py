"""``corral ext …`` and ``corral sandbox check``: manage installed extensions.

These commands work on files (manifests, logs, quarantine records); they never
start an extension. Live status and stats of running extensions are in
``/ext`` (chat) and ``ext_list`` (RPC).
"""

from __future__ import annotations

import codecs
import json
import os
import sys
import time
import typing
from pathlib import Path
from typing import Any

import click
import msgspec

from sandbox import SandboxMode, SandboxUnavailable, check_sandbox, format_report, select_sandbox
from supervisor import (
    Discovery,
    ExtensionSpec,
    ManifestError,
    Source,
    TrustError,
    TrustState,
    TrustStore,
    TrustVerdict,
    corral_home,
    describe_permissions,
    describe_program,
    discover,
    load_manifest,
    log_file,
    quarantine_file,
)
from supervisor.lowlevel import choice_file, ui_file

from .confirm import confirm
from .errors import CLIError
from .ext_files import cell, ext_dirs, installed_dir
from .ext_install import ext_install, ext_remove
from .helptext import epilog
from .safe_text import StreamSanitizer
from .trust import describe, shadowed_by

__all__ = ["ext_group", "sandbox_group"]


def _found() -> Discovery:
    return discover([], project_dir=os.getcwd(), home=str(corral_home()))


def _source_of(path: Path) -> Source:
    """Where a directory named by path lives: installed, project-local, or neither."""
    parent = path.expanduser().absolute().parent
    if os.path.realpath(parent) == os.path.realpath(installed_dir()):
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
        raise CLIError(f"no extension named {target} here (known: {known}){hint}")
    path = Path(target).expanduser()
    try:
        return load_manifest(path, _source_of(path), home=str(corral_home())), found
    except ManifestError as exc:
        raise CLIError(str(exc)) from None


def _verify(store: TrustStore, spec: ExtensionSpec) -> TrustVerdict:
    try:
        return store.verify(spec)
    except TrustError as exc:
        raise CLIError(f"cannot check trust: {exc}") from None


#: ``ext list`` cuts descriptions to this many characters (``--json`` has them whole).
_DESCRIPTION_WIDTH = 40


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, with an ellipsis when cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


@click.group("ext")
def ext_group() -> None:
    """Manage extensions: list, install, trust, logs.

    Installed extensions live in $CORRAL_HOME/extensions, project-local ones in
    .corral/extensions. None of these commands starts an extension.
    """


ext_group.add_command(ext_install)
ext_group.add_command(ext_remove)


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
    callback=ext_dirs,
    help="Extra extension: its directory or its extension.json (repeatable).",
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
    """List extensions and tool hosts: kind, state, trust, permissions, sandbox, problems.

    Every one found: --ext paths, then project-local ones (.corral/extensions),
    then installed ones, in that order. Nothing is started: a tool host's UI elements
    (--json) are what it answered when it last ran.
    """
    home = corral_home()
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
        runtime = spec.manifest.runtime
        rows.append(
            {
                "name": spec.name,
                "kind": spec.kind.value,
                "runtime": runtime.value if runtime is not None else "",
                "version": spec.manifest.version,
                "description": spec.manifest.description,
                "source": spec.source,
                "enabled": spec.manifest.enabled,
                "state": state,
                "trust": trust,
                "permissions": msgspec.to_builtins(perms),
                "permissions_summary": describe_permissions(perms),
                "runs": describe_program(spec),
                "sandbox": sandbox,
                "path": spec.dir,
                "identity": spec.identity,
                "problem": problem,
                "ui_elements": _last_ui(home, spec.identity),
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
        elif spec.exec_note:
            problem = spec.exec_note
        row(spec, state, trust, sandbox_note if spec.manifest.enabled else "-", problem)
    for shadowed, winner in found.duplicates:
        why = f"shadowed by {winner.dir} ({winner.source}); never started"
        row(shadowed, "duplicate", "-", "-", why)
    for err in found.problems:
        rows.append(
            {
                "name": err.extension,
                "kind": "",
                "runtime": "",
                "version": "",
                "description": "",
                "source": "",
                "enabled": False,
                "state": "invalid",
                "trust": "-",
                "permissions": None,
                "permissions_summary": "-",
                "runs": "-",
                "sandbox": "-",
                "path": err.path,
                "identity": "",
                "problem": f"{err.field}: {err.message}" if err.field else err.message,
                "ui_elements": [],
            }
        )
    if as_json:
        for r in rows:
            click.echo(json.dumps(r))
        return
    if not rows:
        click.echo(f"no extensions (install one with `corral ext install PATH`; home: {home})")
        return
    cols = ["name", "kind", "version", "source", "state", "trust", "description"]
    cols += ["permissions_summary", "runs", "sandbox", "problem"]
    heads = {"permissions_summary": "PERMISSIONS"}
    cells = [{c: cell(r[c]) for c in cols} for r in rows]
    for shown in cells:
        shown["description"] = clip(shown["description"], _DESCRIPTION_WIDTH)
    widths = {c: max(len(heads.get(c, c)), *(len(row[c]) for row in cells)) for c in cols[:-1]}
    click.echo("  ".join(heads.get(c, c.upper()).ljust(widths.get(c, 0)) for c in cols).rstrip())
    for shown in cells:
        click.echo("  ".join(shown[c].ljust(widths.get(c, 0)) for c in cols).rstrip())


def _last_ui(home: Path, identity: str) -> list[Any]:
    """A tool host's UI elements as it last reported them ([] if it never did)."""
    try:
        value = json.loads(ui_file(home, identity).read_bytes())
    except (OSError, ValueError):
        return []
    return value if isinstance(value, list) else []


def _choose(target: str, enabled: bool) -> ExtensionSpec:
    """Record the user's enable/disable choice under corral's home (never in the manifest)."""
    spec, _ = _resolve(target)
    if spec.source == "cli":
        raise CLIError(
            f"{spec.dir} is neither installed nor project-local; an extension named with "
            "--ext runs because you name it: leave it out instead"
        )
    path = choice_file(corral_home(), spec.identity)
    try:
        manifest = load_manifest(spec.dir, spec.source).manifest.enabled  # without a choice
    except ManifestError as exc:
        raise CLIError(str(exc)) from None
    try:
        if manifest == enabled:
            path.unlink(missing_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("true\n" if enabled else "false\n")
    except OSError as exc:
        raise CLIError(f"cannot record the choice in {path}: {exc.strerror}") from None
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
    q = quarantine_file(corral_home(), spec.identity)
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
        raise CLIError(
            f"{spec.dir} is neither installed nor project-local (.corral/extensions/NAME); "
            "an extension named with --ext needs no trust"
        )
    store = TrustStore(corral_home())
    verdict = _verify(store, spec)
    for line in describe(verdict, shadowed_by(found, spec)):
        click.echo(line)
    if verdict.state is TrustState.TRUSTED:
        click.echo(f"{spec.name} is trusted as it is; nothing to do")
        return
    if verdict.tree is None:
        raise CLIError(verdict.problem)
    declined = f"{spec.name} not trusted"
    confirm(f"Trust {spec.name}?", yes, declined=declined, what="trust it as shown above")
    try:
        store.pin(spec, verdict.tree)
    except TrustError as exc:
        raise CLIError(f"not trusted: {exc}") from None
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
        found = TrustStore(corral_home()).unpin(spec.identity)
    except TrustError as exc:
        raise CLIError(str(exc)) from None
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
    path = log_file(corral_home(), spec.identity)
    if not path.exists():
        raise CLIError(f"no log for {spec.name} yet (looked for {path})")
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
