"""The audit log: every block and rewrite by an extension, kept under ``$CORRAL_HOME``.

``$CORRAL_HOME/audit.jsonl`` holds one JSON object per line: an
:class:`~agent._messages.InterventionRecord` (who blocked or rewrote which event,
and whether corral applied it or ignored it for want of ``intercept_builtin``)
plus when, in which session and which working directory::

    {"extension":"guard","event":"tool_call","kind":"rewrite","tool_id":"c1","tool":"bash",
     "args":{"command":"echo GUARDED: ls"},"time":"2026-01-01T10:00:00Z","session":"work",
     "cwd":"/src","model_args":{"command":"ls"}}

(one line in the file; wrapped here). Changes to the tool set that the agent or a
configuration made (``new_tool``, a dynamic tool removed, an MCP server connected
or disconnected) are recorded too, as :class:`ToolAuditRecord` lines, with the
code of a new tool in full::

    {"action":"new_tool","tool":"word_count","source":"dynamic","digest":"sha256:…",
     "code":"return len(args['text'].split())","time":"…","session":"work","cwd":"/src"}

Connections a child's egress proxy refused (a destination outside its network
list, a name resolving to a local address) are recorded too, as
:class:`EgressAuditRecord` lines, at the bounded rate the proxy reports them
(``unreported`` counts those in between)::

    {"action":"egress_refused","extension":"weather","destination":"evil.example:443",
     "reason":"not in permissions.network in weather's extension.json","via":"connect",
     "time":"…","session":"work","cwd":"/src"}

The file is append-only: corral never rewrites or truncates it. It is created with
mode 0600 (and put back to 0600 if it was widened), opened with ``O_APPEND`` and
``O_NOFOLLOW`` for each batch, and each record is one ``write``, so records of
concurrent corral processes never interleave and a crash loses at most the record
being written. Reading skips lines that do not decode (a torn last line, or a line
someone else wrote) and counts them.

The transcript carries the same records on its messages; the audit log outlives
``clear``, compaction and deleted sessions, and covers unsaved sessions too.
"""

from __future__ import annotations

import enum
import os
import stat
import typing
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import msgspec
import trio

from sandbox.log import get_logger
from supervisor import EgressRefused

from ._messages import InterventionRecord, now_iso

__all__ = [
    "AnyRecord",
    "AuditLog",
    "AuditRecord",
    "EgressAuditRecord",
    "ToolAction",
    "ToolAuditRecord",
    "audit_path",
    "read_audit",
    "select_records",
]

log = get_logger(__name__)

_encoder = msgspec.json.Encoder()
_FILE_NAME = "audit.jsonl"


class AuditRecord(InterventionRecord, frozen=True, kw_only=True, omit_defaults=True):
    """One line of the audit log.

    Attributes:
        time: when corral saw the intervention (UTC, RFC 3339).
        session: the session name, or ``""`` for an unsaved session.
        cwd: the agent's working directory.
        model_args: a tool call's arguments as the model wrote them (``tool_call``).
    """

    time: str
    session: str = ""
    cwd: str = ""
    model_args: dict[str, Any] | None = None


class ToolAction(enum.Enum):
    """A change to the tool set."""

    #: ``new_tool`` created a dynamic tool (``replace: true`` replaced one).
    NEW_TOOL = "new_tool"
    #: A dynamic tool was removed (``corral tools rm``, ``tools_clear``).
    REMOVE_TOOL = "remove_tool"
    #: An MCP server was connected and its tools registered.
    MCP_CONNECT = "mcp_connect"
    #: An MCP server was disconnected.
    MCP_DISCONNECT = "mcp_disconnect"


class ToolAuditRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One line of the audit log about the tool set.

    Attributes:
        action: what changed.
        tool: the tool's (or the MCP server's) name.
        source: ``dynamic`` or ``mcp:<server>``.
        digest: ``sha256:<hex>`` of a dynamic tool's code.
        code: a new dynamic tool's code, in full.
        detail: more, in words (the MCP server's command or URL, the tools it gave).
        time: when (UTC, RFC 3339).
        session: the session name, or ``""``.
        cwd: the agent's working directory.
    """

    action: ToolAction
    tool: str
    source: str
    digest: str = ""
    code: str | None = None
    detail: str = ""
    time: str
    session: str = ""
    cwd: str = ""


class EgressAuditRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One line of the audit log about a connection a child's egress proxy refused.

    Attributes:
        action: always ``egress_refused``.
        extension: the child (an extension, tool host or MCP server's name; ``bash``;
            ``dyn-<tool>`` for a dynamic tool).
        destination: ``host:port`` as the child asked for it.
        reason: why it was refused.
        via: ``connect``, ``http`` or ``socks``.
        unreported: refusals of that child just before this one that were counted
            but not recorded one by one (a flood is recorded at a bounded rate).
        time: when (UTC, RFC 3339).
        session: the session name, or ``""``.
        cwd: the agent's working directory.
    """

    action: Literal["egress_refused"]
    extension: str
    destination: str
    reason: str
    via: str
    unreported: int = 0
    time: str
    session: str = ""
    cwd: str = ""


#: Any line of the audit log.
AnyRecord = AuditRecord | ToolAuditRecord | EgressAuditRecord

_decoder = msgspec.json.Decoder(AuditRecord)
_tool_decoder = msgspec.json.Decoder(ToolAuditRecord)
_egress_decoder = msgspec.json.Decoder(EgressAuditRecord)


def audit_path(home: Path) -> Path:
    """Where the audit log of corral home ``home`` lives."""
    return home / _FILE_NAME


@typing.final
class AuditLog:
    """Appends the interventions of one agent session to the audit log."""

    def __init__(self, path: Path, *, session: str, cwd: str) -> None:
        self.path = path
        self.session = session
        self.cwd = cwd

    def __repr__(self) -> str:
        return f"<AuditLog {str(self.path)!r} session={self.session!r}>"

    async def record(
        self, records: list[InterventionRecord], *, model_args: dict[str, Any] | None = None
    ) -> None:
        """Append ``records`` (``model_args``: the tool call's original arguments).

        A failed write is logged (``audit_write_failed``) and never raised: the
        transcript still has the records, and the agent goes on.

        Cancellation: shielded; the write runs to its end, so no record is half
        written or silently lost because a prompt was aborted.
        """
        if not records:
            return
        time = now_iso()
        lines = [
            _encoder.encode(
                AuditRecord(
                    **msgspec.structs.asdict(r),
                    time=time,
                    session=self.session,
                    cwd=self.cwd,
                    model_args=model_args if r.event == "tool_call" else None,
                )
            )
            + b"\n"
            for r in records
        ]
        await self._append(lines)

    async def record_tool(
        self,
        action: ToolAction,
        tool: str,
        source: str,
        *,
        digest: str = "",
        code: str | None = None,
        detail: str = "",
    ) -> None:
        """Append a change to the tool set (see :class:`ToolAuditRecord`).

        Cancellation: shielded, as :meth:`record`.
        """
        record = ToolAuditRecord(
            action=action,
            tool=tool,
            source=source,
            digest=digest,
            code=code,
            detail=detail,
            time=now_iso(),
            session=self.session,
            cwd=self.cwd,
        )
        await self._append([_encoder.encode(record) + b"\n"])

    async def record_egress(self, event: EgressRefused) -> None:
        """Append a refused connection (see :class:`EgressAuditRecord`).

        Cancellation: shielded, as :meth:`record`.
        """
        record = EgressAuditRecord(
            action="egress_refused",
            extension=event.extension,
            destination=event.destination,
            reason=event.reason,
            via=event.via,
            unreported=event.unreported,
            time=now_iso(),
            session=self.session,
            cwd=self.cwd,
        )
        await self._append([_encoder.encode(record) + b"\n"])

    async def _append(self, lines: list[bytes]) -> None:
        with trio.CancelScope(shield=True):
            try:
                await trio.to_thread.run_sync(self._write, lines)
            except OSError as exc:
                log.error("audit_write_failed", path=str(self.path), error=exc.strerror)

    def _write(self, lines: list[bytes]) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.path, flags, 0o600)
        try:
            if stat.S_IMODE(os.fstat(fd).st_mode) != 0o600:
                os.fchmod(fd, 0o600)
            for line in lines:
                written = os.write(fd, line)
                if written != len(line):  # a full disk: finish the line, don't tear it
                    os.write(fd, line[written:])
        finally:
            os.close(fd)


def read_audit(path: Path) -> tuple[list[AnyRecord], int]:
    """The records of the audit log at ``path``, oldest first, and how many lines failed.

    A missing file is an empty log.

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    records: list[AnyRecord] = []
    bad = 0
    decoders: tuple[msgspec.json.Decoder[Any], ...] = (_decoder, _tool_decoder, _egress_decoder)
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        for decoder in decoders:
            try:
                records.append(decoder.decode(raw))
                break
            except msgspec.DecodeError:
                continue
        else:
            bad += 1
    return records, bad


def _when(stamp: str) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp)
    except ValueError:
        return None


def select_records(
    records: list[AnyRecord],
    *,
    session: str | None = None,
    extension: str | None = None,
    since: datetime | None = None,
    last: int | None = None,
) -> list[AnyRecord]:
    """The records matching every filter given, oldest first; ``last`` keeps the newest N.

    ``since`` must be timezone-aware; records whose time does not parse are kept out
    of a ``since`` selection.
    """
    chosen = [
        r
        for r in records
        if (session is None or r.session == session)
        and (extension is None or getattr(r, "extension", None) == extension)
    ]
    if since is not None:
        chosen = [r for r in chosen if (t := _when(r.time)) is not None and t >= since]
    if last is not None:
        chosen = chosen[-last:] if last > 0 else []
    return chosen
