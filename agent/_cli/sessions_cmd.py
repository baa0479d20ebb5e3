"""``corral sessions list | show | rm``: the saved sessions under ``$CORRAL_HOME/sessions``.

These commands read session files without locking them (a session open in another
process can be listed and shown); ``rm`` takes the session's lock first, so it
never deletes a session that is in use.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import msgspec

from supervisor import corral_home

from .._exceptions import SessionError
from .._messages import (
    ImageContent,
    TextContent,
    ToolCallContent,
    ToolResultContent,
    wire_message,
)
from .._sessions import (
    SessionHeader,
    SessionLocked,
    SessionStore,
    list_sessions,
    remove_session,
    sessions_dir,
)
from .confirm import confirm
from .errors import CLIError
from .helptext import epilog
from .safe_text import visible

__all__ = ["sessions_group"]

_encoder = msgspec.json.Encoder()


def _home() -> Path:
    return corral_home()


@click.group("sessions")
def sessions_group() -> None:
    """List, show and remove saved sessions.

    Sessions are saved with --session NAME and resumed with it, or with --continue.
    """


@sessions_group.command(
    "list",
    epilog=epilog(
        examples=[("corral sessions list", ""), ("corral sessions list --json", "for programs")]
    ),
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per session.")
def sessions_list(as_json: bool) -> None:
    """List saved sessions, most recently used first."""
    infos = list_sessions(_home())
    if as_json:
        for info in infos:
            click.echo(_encoder.encode(info).decode())
        return
    if not infos:
        click.echo(f"no saved sessions (start one with --session NAME; in {sessions_dir(_home())})")
        return
    rows = [
        (
            info.name,
            str(info.messages),
            info.modified,
            f"{info.provider}/{info.model}",
            f"in use (pid {info.locked_by})" if info.locked_by is not None else "",
            info.cwd,
        )
        for info in infos
    ]
    heads = ("NAME", "MESSAGES", "MODIFIED", "MODEL", "STATE", "CWD")
    widths = [max(len(h), *(len(visible(r[i])) for r in rows)) for i, h in enumerate(heads)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip())
    for row in rows:
        cells = (visible(c).ljust(w) for c, w in zip(row, widths, strict=True))
        click.echo("  ".join(cells).rstrip())


def _load(name: str) -> SessionStore:
    try:
        store = SessionStore.for_name(_home(), name, SessionHeader(name=name))
    except SessionError as exc:
        raise CLIError(str(exc)) from None
    if not store.path.exists():
        known = ", ".join(i.name for i in list_sessions(_home())) or "none"
        raise CLIError(f"no session named {name} (saved sessions: {known})")
    return store


def _block_lines(block: object) -> list[str]:
    if isinstance(block, TextContent):
        return block.text.splitlines() or [""]
    if isinstance(block, ImageContent):
        return [f"[image {block.mime_type}, {block.bytes} bytes]"]
    if isinstance(block, ToolCallContent):
        return [f"→ {block.name} {json.dumps(block.args, ensure_ascii=False)}"]
    if isinstance(block, ToolResultContent):
        mark = "✗" if block.is_error else "←"
        inner = [line for b in block.content for line in _block_lines(b)]
        return [f"{mark} {inner[0] if inner else ''}", *inner[1:]]
    return []


@sessions_group.command(
    "show",
    epilog=epilog(
        examples=[("corral sessions show work", ""), ("corral sessions show work --json", "")],
        exit_codes=((0, "shown"), (1, "no such session, or it cannot be read")),
    ),
)
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="The header, then one message per line.")
def sessions_show(name: str, as_json: bool) -> None:
    """Print a saved session's messages (images as byte counts)."""
    store = _load(name)
    try:
        messages = [wire_message(m) for m in store.load()]
    except SessionError as exc:
        raise CLIError(str(exc)) from None
    if as_json:
        click.echo(_encoder.encode(store.header).decode())
        for message in messages:
            click.echo(_encoder.encode(message).decode())
        return
    h = store.header
    click.echo(visible(f"session {h.name}: {h.provider}/{h.model} in {h.cwd}, created {h.created}"))
    for message in messages:
        lines = [line for b in message.content for line in _block_lines(b)]
        click.echo(visible(f"{message.time} {message.role}:"))
        for line in lines:
            click.echo("  " + visible(line))


@sessions_group.command(
    "rm",
    epilog=epilog(
        examples=[
            ("corral sessions rm work old", "asks, then deletes two sessions"),
            ("corral sessions rm -y work", "no question (needed without a terminal)"),
        ],
        exit_codes=(
            (0, "deleted"),
            (1, "no such session, one is open elsewhere, or not confirmed"),
        ),
    ),
)
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@click.option("-y", "--yes", is_flag=True, help="Do not ask (needed without a terminal).")
def sessions_rm(names: tuple[str, ...], yes: bool) -> None:
    """Delete saved sessions (refused for one open in another process).

    Asks first on a terminal; without one, only -y deletes.
    """
    for name in names:
        _load(name)  # every name exists before anything is asked or deleted
    in_use = {i.name: i.locked_by for i in list_sessions(_home()) if i.locked_by is not None}
    for name in names:
        if name in in_use:  # said before asking (remove_session checks again, locked)
            raise CLIError(str(SessionLocked(name, in_use[name])))
    listed = ", ".join(names)
    confirm(
        f"Delete the session{'s' if len(names) > 1 else ''} {listed}?",
        yes,
        declined="nothing deleted",
        what="delete them",
    )
    for name in names:
        try:
            remove_session(_home(), name)
        except SessionError as exc:
            raise CLIError(str(exc)) from None
        click.echo(visible(f"removed session {name}"))
