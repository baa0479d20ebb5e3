"""``corral audit``: who blocked or rewrote what, from the audit log under ``$CORRAL_HOME``.

Changes to the tool set (a dynamic tool created or removed, an MCP server
connected) are listed too, with their source in the EXTENSION column, and so are
connections a child's egress proxy refused (event ``network``, action ``refused``).

The table shows one record per line, oldest first; ``--json`` prints the records
exactly as stored (one JSON object per line), for ``jq`` and scripts. Everything an
extension wrote (reasons, arguments, text) is shown with control characters made
visible, so a record cannot drive the terminal.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import msgspec

from supervisor import InterventionKind, corral_home

from .._audit import (
    AnyRecord,
    AuditRecord,
    EgressAuditRecord,
    ToolAuditRecord,
    audit_path,
    read_audit,
    select_records,
)
from .errors import CLIError
from .helptext import epilog
from .render import clip
from .safe_text import visible

__all__ = ["audit_cmd"]

_AGE = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_encoder = msgspec.json.Encoder()


def parse_since(value: str, now: datetime) -> datetime:
    """``--since``: an age (``30m``, ``2h``, ``7d``) or an ISO date/time (local if naive).

    Raises:
        click.BadParameter: neither: a usage error (exit status 2), as click's own.
    """
    age = _AGE.match(value.strip())
    if age:
        return now - timedelta(**{_UNITS[age.group(2)]: int(age.group(1))})
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: use an age like 30m, 2h or 7d, or a date like 2026-01-31 "
            "or 2026-01-31T09:00:00Z",
            param_hint="'--since'",
        ) from None
    return when if when.tzinfo is not None else when.astimezone()


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _action(record: AuditRecord) -> str:
    """``block`` or ``rewrite``; ``ignored …`` when corral did not apply it."""
    return record.kind.value if record.applied else f"ignored {record.kind.value}"


def _detail(record: AuditRecord) -> str:
    if record.event == "tool_call":
        head = f"{record.tool} {record.tool_id}"
        if record.kind is InterventionKind.BLOCK:
            return f"{head}: {record.reason}"
        return f"{head}: {_json(record.model_args)} -> {_json(record.args)}"
    if record.event == "turn_start":
        return f"step {record.step}: {record.reason}"
    if record.kind is InterventionKind.BLOCK:
        return f"text hidden: {record.reason}"
    return f"text shown: {_json(record.text)}"


def _row(r: AnyRecord) -> list[str]:
    if isinstance(r, EgressAuditRecord):
        detail = f"{r.destination} ({r.via}): {r.reason}"
        if r.unreported:
            detail += f"; {r.unreported} more before it not recorded one by one"
        return [r.time, r.session or "-", r.extension, "network", "refused", clip(detail, 160)]
    if isinstance(r, ToolAuditRecord):
        detail = " ".join(part for part in (r.tool, r.digest[:19], r.detail) if part)
        return [r.time, r.session or "-", r.source, r.action.value, "-", clip(detail, 120)]
    return [r.time, r.session or "-", r.extension, r.event, _action(r), clip(_detail(r), 120)]


def _table(records: list[AnyRecord]) -> list[str]:
    head = ["TIME", "SESSION", "EXTENSION", "EVENT", "ACTION", "DETAIL"]
    rows = [head] + [_row(r) for r in records]
    rows = [[visible(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return lines


@click.command(
    "audit",
    epilog=epilog(
        examples=[
            ("corral audit", "every block and rewrite, newest last"),
            ("corral audit --extension guard --since 2h", "one extension, the last two hours"),
            ("corral audit --json -n 20", "the last 20 records as JSON lines"),
            ("corral audit --extension weather", "what it blocked, and what it was refused"),
        ]
    ),
)
@click.option("--session", help='Only this session (`""`: unsaved sessions).')
@click.option("--extension", help="Only records of this extension (or tool host, MCP server).")
@click.option("--since", help="Only newer records: an age (30m, 2h, 7d) or a date/time.")
@click.option("-n", "--last", type=click.IntRange(min=0), help="Only the newest N records.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record, as stored.")
def audit_cmd(
    session: str | None, extension: str | None, since: str | None, last: int | None, as_json: bool
) -> None:
    """Show the blocks, rewrites and refused connections of extensions.

    The records come from $CORRAL_HOME/audit.jsonl, oldest first. Tool set changes
    (new_tool, MCP servers) and connections a network list refused are listed with them.
    """
    path = audit_path(corral_home())
    when = parse_since(since, datetime.now(UTC)) if since is not None else None
    try:
        records, bad = read_audit(path)
    except OSError as exc:
        raise CLIError(f"cannot read the audit log {path}: {exc.strerror}") from exc
    chosen = select_records(records, session=session, extension=extension, since=when, last=last)
    if bad:
        click.echo(f"warning: skipped {bad} unreadable line(s) in {path}", err=True)
    if as_json:
        for record in chosen:
            click.echo(_encoder.encode(record).decode())
        return
    if not chosen:
        what = "no interventions recorded" if not records else "no record matches"
        click.echo(f"{what} (audit log: {path})")
        return
    for line in _table(chosen):
        click.echo(line)
