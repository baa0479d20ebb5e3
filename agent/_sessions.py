"""Session files under ``$CORRAL_HOME/sessions/``: locked, repaired, appended record by record.

A saved session is one JSON object per line::

    {"type":"session","version":1,"name":"work","provider":"offline","model":"offline","cwd":"/src","created":"2026-01-01T00:00:00Z"}
    {"type":"message","message":{"role":"user","content":[{"type":"text","text":"hi"}],"time":"..."}}

What holds, and how:

* **One writer.** :meth:`SessionStore.open` takes an exclusive ``flock`` on
  ``NAME.jsonl.lock`` (which records the holder's pid) for as long as the store is
  open. A second process gets :class:`SessionLocked` naming that pid. The kernel
  drops the lock when its holder dies, so a lock left by a dead process is simply
  taken over. The lock file is never the data file: compaction replaces the data
  file by ``rename``, which would leave a lock on the data file's old inode.
* **Record-level atomic appends.** Each record is one ``write`` on an ``O_APPEND``
  descriptor. A failed or short write is cut back off (``ftruncate``), so the file
  never keeps half a record written by a live process.
* **Repair on open.** A crash mid-write can still leave a torn last line. Opening
  moves those bytes to ``NAME.jsonl.torn`` (appended, never lost), truncates the
  file to its last complete record and says so once (:attr:`SessionStore.repaired`
  and a ``session_repaired`` warning). A tool call without its result (a file
  written by an older corral, or by hand) gets an explicit "aborted"
  error result, and a result without its call is dropped
  (:func:`~agent._exchanges.repair_tool_calls`): opening rewrites the file so
  repaired (``session_tool_calls_repaired`` warning), :meth:`SessionStore.load`
  repairs what it returns. A model API never sees a broken pairing.
* **fsync policy.** Appends are not synced one by one; the file is ``fsync``-ed
  when a record ends a turn (an assistant message that calls no tool), after every
  rewrite (with its directory), and when the store closes. A process crash loses
  nothing that was written; a power loss loses at most the turn in progress.
* **Private.** The directory is ``0700``, every file ``0600``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import typing
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from sandbox.log import get_logger
from supervisor.lowlevel import StateFile

from ._exceptions import SessionError
from ._exchanges import repair_tool_calls
from ._messages import InterventionRecord, Message, ToolCallContent, annotated, now_iso

__all__ = [
    "SessionHeader",
    "SessionInfo",
    "SessionLocked",
    "SessionStore",
    "latest_session",
    "list_sessions",
    "remove_session",
    "sessions_dir",
]

log = get_logger()

_SESSION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SUFFIX = ".jsonl"


class SessionLocked(SessionError):
    """The session is open in another process.

    Attributes:
        name: the session.
        pid: the holder's pid (0 when it could not be read).
    """

    def __init__(self, name: str, pid: int) -> None:
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"session {name} is in use by {who}; close it there first")
        self.name = name
        self.pid = pid


class SessionHeader(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="session"):
    """First line of a session file."""

    version: int = 1
    name: str
    provider: str = ""
    model: str = ""
    cwd: str = ""
    #: When the file was created (RFC 3339, UTC).
    created: str = ""


class _MessageLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="message"):
    message: Message


class _InterventionsLine(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="interventions"
):
    """Provenance records for the message before it (see ``Transcript.annotate``)."""

    records: list[InterventionRecord]


_Line = SessionHeader | _MessageLine | _InterventionsLine
_line_decoder = msgspec.json.Decoder(_Line)
_header_decoder = msgspec.json.Decoder(SessionHeader)
_encoder = msgspec.json.Encoder()


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One saved session, as ``corral sessions list`` shows it."""

    name: str
    path: str
    created: str
    #: Last write (RFC 3339, UTC).
    modified: str
    messages: int
    size: int
    provider: str = ""
    model: str = ""
    cwd: str = ""
    #: Pid of the process that has it open, if one does.
    locked_by: int | None = None


def sessions_dir(home: Path) -> Path:
    """Where the sessions of ``home`` live."""
    return home / "sessions"


def _check_name(name: str) -> None:
    if not _SESSION_NAME.match(name):
        raise SessionError(
            f"invalid session name {name!r}: use letters, digits, '.', '_' or '-' "
            "(at most 128, not starting with '.' or '-')"
        )


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)  # made by an older corral, or by hand


def _ends_turn(message: Message) -> bool:
    return message.role == "assistant" and not any(
        isinstance(b, ToolCallContent) for b in message.content
    )


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read_pid(fd: int) -> int:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).split()[0])
    return 0


def _lock(file: StateFile, name: str) -> int:
    """Take the session's lock without waiting; returns its descriptor.

    Raises:
        SessionLocked: another process holds it.
        OSError: the lock file cannot be opened, or keeps being replaced.
    """
    try:
        return file.hold()  # `sessions rm` unlinks lock files: it locks what the path names
    except BlockingIOError:
        pid = 0
        with contextlib.suppress(OSError):
            fd = os.open(file.lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                pid = _read_pid(fd)
            finally:
                os.close(fd)
        raise SessionLocked(name, pid) from None


@typing.final
class SessionStore:
    """One session file: open (lock and repair), append, rewrite, close.

    Methods are synchronous (small local writes); the async
    :class:`~agent._transcript.Transcript` runs them in a worker thread. A store
    that is written to without :meth:`open` opens itself first.
    """

    def __init__(self, path: Path, header: SessionHeader) -> None:
        self.path = path
        self.header = header
        self.lock_path = path.with_name(path.name + ".lock")
        self.torn_path = path.with_name(path.name + ".torn")
        self._file = StateFile(path, lock=self.lock_path)
        #: Set by :meth:`open` when it repaired the file (a torn last line, a tool call
        #: without its result): what it did.
        self.repaired: str | None = None
        self._lock_fd = -1
        self._fd = -1
        self._size = 0

    def __repr__(self) -> str:
        return f"<SessionStore {str(self.path)!r} open={self._fd >= 0}>"

    @classmethod
    def for_name(cls, home: Path, name: str, header: SessionHeader) -> SessionStore:
        """The store of session ``name`` under ``home/sessions``.

        Raises:
            SessionError: ``name`` is not a plain file name (letters, digits, ``._-``).
        """
        _check_name(name)
        return cls(sessions_dir(home) / f"{name}{_SUFFIX}", header)

    @property
    def name(self) -> str:
        """The session's name."""
        return self.path.name.removesuffix(_SUFFIX)

    # --- open and close ----------------------------------------------------------

    def open(self) -> list[Message]:
        """Lock the session, repair a torn last line, and return the saved messages.

        Raises:
            SessionLocked: another process has the session open.
            SessionError: the file cannot be read or written, or a line (other than
                a torn last one) is not a session record; the message names file
                and line.
        """
        if self._fd >= 0:
            return self.load()
        try:
            _private_dir(self.path.parent)
            self._lock_fd = _lock(self._file, self.name)
            os.ftruncate(self._lock_fd, 0)
            os.pwrite(self._lock_fd, f"{os.getpid()}\n".encode(), 0)
            self._fd = os.open(
                self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
            )
            os.fchmod(self._fd, 0o600)
            self._repair()
            messages = self._parse(os.pread(self._fd, self._size, 0), repair=False)
            fixed, notes = repair_tool_calls(messages)
            if notes:
                self.rewrite(fixed)
                self._note_repair(notes)
                messages = fixed
        except SessionError:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise SessionError(f"{self.path}: cannot open session: {exc.strerror}") from exc
        return messages

    def _repair(self) -> None:
        size = os.fstat(self._fd).st_size
        data = os.pread(self._fd, size, 0) if size else b""
        end = data.rfind(b"\n") + 1
        self._size = size
        if end == size:
            return
        torn = data[end:]
        with open(
            os.open(self.torn_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600),
            "ab",
        ) as side:
            side.write(torn + b"\n")
            side.flush()
            os.fsync(side.fileno())
        os.ftruncate(self._fd, end)
        os.fsync(self._fd)
        self._size = end
        self.repaired = (
            f"session {self.name}: a torn last record ({len(torn)} bytes) was moved to "
            f"{self.torn_path}"
        )
        log.warning(
            "session_repaired", path=str(self.path), torn_bytes=len(torn), kept=str(self.torn_path)
        )

    def _note_repair(self, notes: list[str]) -> None:
        log.warning("session_tool_calls_repaired", path=str(self.path), repairs=notes)
        said = f"session {self.name}: {len(notes)} tool call pairing repair(s): {'; '.join(notes)}"
        self.repaired = f"{self.repaired}; {said}" if self.repaired else said

    def close(self) -> None:
        """Sync and close the file and release the lock (idempotent)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    # --- read ----------------------------------------------------------------------

    def load(self) -> list[Message]:
        """The saved messages, read without locking or writing (``[]`` if none).

        A torn last line is left out; a broken tool call pairing is repaired in what
        is returned (logged as ``session_tool_calls_repaired``), not in the file.

        Raises:
            SessionError: the file cannot be read, or a line (other than a torn last
                line) is not a valid session record; the message names file and line.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise SessionError(f"{self.path}: cannot read session: {exc.strerror}") from exc
        messages, notes = repair_tool_calls(self._parse(data, repair=True))
        if notes:
            log.warning("session_tool_calls_repaired", path=str(self.path), repairs=notes)
        return messages

    def _parse(self, data: bytes, *, repair: bool) -> list[Message]:
        lines = data.split(b"\n")
        torn = repair and lines[-1] != b""
        messages: list[Message] = []
        for index, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                record = _line_decoder.decode(raw)
            except msgspec.DecodeError as exc:
                if torn and index == len(lines):
                    break
                raise SessionError(
                    f"{self.path}:{index}: not a session record: {exc}; move the file aside "
                    f"or remove the session (corral sessions rm {self.name})"
                ) from exc
            if isinstance(record, _MessageLine):
                messages.append(record.message)
            elif isinstance(record, _InterventionsLine):
                if not messages:
                    raise SessionError(f"{self.path}:{index}: interventions before any message")
                messages[-1] = annotated(messages[-1], record.records)
            elif index != 1:
                raise SessionError(f"{self.path}:{index}: session header after line 1")
            else:
                self.header = record
        return messages

    # --- write -----------------------------------------------------------------------

    def _write_record(self, record: bytes) -> None:
        before = self._size
        try:
            written = os.write(self._fd, record)
        except OSError as exc:
            self._cut_back(before)
            raise SessionError(f"{self.path}: cannot write session: {exc.strerror}") from exc
        if written != len(record):
            self._cut_back(before)
            raise SessionError(f"{self.path}: cannot write session: short write (disk full?)")
        self._size = before + written

    def _cut_back(self, size: int) -> None:
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, size)

    def _ensure_open(self) -> None:
        if self._fd < 0:
            self.open()

    def append(self, message: Message) -> None:
        """Append one message as one record (the header first when the file is new).

        Raises:
            SessionError: the write failed; the file is left as it was.
        """
        self.append_many([message])

    def append_many(self, messages: list[Message]) -> None:
        """Append ``messages`` as one write (the header first when the file is new).

        One ``write`` on the ``O_APPEND`` descriptor: a crash leaves all of them or
        none (a torn tail is repaired on open), so a tool call and its results are
        never separated.

        Raises:
            SessionError: the write failed; the file is left as it was.
        """
        self._ensure_open()
        records = [_encoder.encode(_MessageLine(message=m)) + b"\n" for m in messages]
        if self._size == 0:
            self.header = msgspec.structs.replace(self.header, created=now_iso())
            records.insert(0, _encoder.encode(self.header) + b"\n")
        self._write_record(b"".join(records))
        if messages and _ends_turn(messages[-1]):
            self.sync()

    def annotate(self, records: list[InterventionRecord]) -> None:
        """Append provenance records for the last message, as one record.

        Raises:
            SessionError: the write failed; the file is left as it was.
        """
        self._ensure_open()
        self._write_record(_encoder.encode(_InterventionsLine(records=records)) + b"\n")

    def sync(self) -> None:
        """``fsync`` the file (the store's policy calls this; see the module docstring).

        Raises:
            SessionError: the sync failed.
        """
        if self._fd < 0:
            return
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise SessionError(f"{self.path}: cannot sync session: {exc.strerror}") from exc

    def rewrite(self, messages: list[Message]) -> None:
        """Replace the file with ``messages`` atomically (temporary file, fsync, rename).

        Raises:
            SessionError: the write failed (the old file is left as it was).
        """
        self._ensure_open()
        header = self.header
        if not header.created:
            header = self.header = msgspec.structs.replace(header, created=now_iso())
        lines = [_encoder.encode(header) + b"\n"]
        lines += [_encoder.encode(_MessageLine(message=m)) + b"\n" for m in messages]
        try:
            self._file.replace(b"".join(lines))  # under the lock, held since open()
        except OSError as exc:  # a refusal's strerror is its reason
            raise SessionError(f"{self.path}: cannot write session: {exc.strerror}") from exc
        old, self._fd = self._fd, -1
        os.close(old)
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
            self._size = os.fstat(self._fd).st_size
        except OSError as exc:
            raise SessionError(f"{self.path}: cannot reopen session: {exc.strerror}") from exc


# --- the sessions directory ----------------------------------------------------------


def _probe_lock(path: Path) -> int | None:
    """The pid holding ``path``'s lock, or None when nobody does."""
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_pid(fd) or 0
    finally:
        os.close(fd)
    return None


def _info(path: Path) -> tuple[int, SessionInfo] | None:
    try:
        stat = path.stat()
        with path.open("rb") as fh:
            first = fh.readline(1 << 20)
            count = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    except OSError:
        return None
    name = path.name.removesuffix(_SUFFIX)
    try:
        header = _header_decoder.decode(first)
    except msgspec.DecodeError:
        header = SessionHeader(name=name)
        count += 1 if first.endswith(b"\n") else 0
    return stat.st_mtime_ns, SessionInfo(
        name=name,
        path=str(path),
        created=header.created,
        modified=_iso(stat.st_mtime),
        messages=count,
        size=stat.st_size,
        provider=header.provider,
        model=header.model,
        cwd=header.cwd,
        locked_by=_probe_lock(path),
    )


def list_sessions(home: Path) -> list[SessionInfo]:
    """Every saved session of ``home``, most recently written first."""
    where = sessions_dir(home)
    if not where.is_dir():
        return []
    paths = [p for p in where.iterdir() if p.name.endswith(_SUFFIX) and p.is_file()]
    found = [info for p in paths if (info := _info(p)) is not None]
    found.sort(key=lambda pair: (pair[0], pair[1].name), reverse=True)
    return [info for _, info in found]


def latest_session(home: Path, cwd: str) -> str | None:
    """The most recently written session started in ``cwd`` (a real path), if any."""
    for info in list_sessions(home):
        if info.cwd == cwd:
            return info.name
    return None


def remove_session(home: Path, name: str) -> list[Path]:
    """Delete a session's files (data, torn side file, lock); returns what was deleted.

    Raises:
        SessionLocked: the session is open in another process.
        SessionError: bad name, no such session, or a file could not be deleted.
    """
    _check_name(name)
    path = sessions_dir(home) / f"{name}{_SUFFIX}"
    if not path.exists():
        raise SessionError(f"no session named {name} (in {sessions_dir(home)})")
    store = SessionStore(path, SessionHeader(name=name))
    fd = _lock(store._file, name)
    removed: list[Path] = []
    try:
        for victim in (path, store.torn_path, store.lock_path):
            with contextlib.suppress(FileNotFoundError):
                victim.unlink()
                removed.append(victim)
    except OSError as exc:
        raise SessionError(f"{path}: cannot remove: {exc.strerror}") from exc
    finally:
        os.close(fd)
    return removed
