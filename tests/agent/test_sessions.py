"""Session files that never lose data: repair, locking, permissions, record-level appends.

The store is driven directly and through ``corral run --session``; lock holders are
real processes (killed with SIGKILL for the stale-lock case).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.paths import REPO

from agent._cli.main import main
from agent._exceptions import SessionError
from agent._messages import Message, TextContent, ToolCallContent, ToolResultContent, now_iso
from agent._sessions import (
    SessionHeader,
    SessionLocked,
    SessionStore,
    list_sessions,
    remove_session,
)
from agent._transcript import Transcript

pytestmark = pytest.mark.usefixtures("no_leaks")

TORN = b'{"type":"message","message":{"role":"us'


def msg(role: str, text: str) -> Message:
    return Message(role=role, content=[TextContent(text=text)], time=now_iso())  # type: ignore[arg-type]


def store(home: Path, name: str = "work") -> SessionStore:
    return SessionStore.for_name(home, name, SessionHeader(name=name, provider="offline"))


def run(home: Path, work: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main, ["run", "--cwd", str(work), "--no-extensions", *args], catch_exceptions=False
    )
    return result.exit_code, result.output


# --- torn last line -------------------------------------------------------------------


def test_torn_line_is_repaired_on_open_and_kept_aside(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append(msg("user", "kept"))
    s.close()
    with s.path.open("ab") as fh:
        fh.write(TORN)
    again = store(tmp_path)
    assert [m.content for m in again.open()] == [[TextContent(text="kept")]]
    assert again.repaired is not None
    assert "moved to" in again.repaired
    assert s.path.read_bytes().endswith(b"}\n")
    assert again.torn_path.read_bytes() == TORN + b"\n"
    again.append(msg("user", "after"))
    again.close()
    third = store(tmp_path)
    assert [m.content[0] for m in third.open()] == [
        TextContent(text="kept"),
        TextContent(text="after"),
    ]
    assert third.repaired is None
    third.close()


def test_cli_resumes_twice_after_a_torn_line(home: Path, work: Path) -> None:
    """The issue's sequence: torn line, resume, resume again."""
    code, out = run(home, work, "--session", "s", 'say "one"')
    assert code == 0, out
    path = home / "sessions" / "s.jsonl"
    with path.open("ab") as fh:
        fh.write(TORN)
    for word in ("two", "three"):
        code, out = run(home, work, "--session", "s", f'say "{word}"')
        assert code == 0, out
    records = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    texts = [r["message"]["content"][0]["text"] for r in records]
    assert texts == ['say "one"', "one", 'say "two"', "two", 'say "three"', "three"]


# --- one writer -----------------------------------------------------------------------

HOLD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from agent._sessions import SessionHeader, SessionStore
    s = SessionStore.for_name(Path(sys.argv[1]), "s", SessionHeader(name="s"))
    s.open()
    print("holding", flush=True)
    sys.stdin.read()
    """
)


def hold(home: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "holding\n"
    return proc


def test_second_process_gets_a_one_line_error_naming_the_holder(home: Path, work: Path) -> None:
    holder = hold(home)
    try:
        with pytest.raises(SessionLocked, match=rf"in use by pid {holder.pid}") as info:
            store(home, "s").open()
        assert info.value.pid == holder.pid
        code, out = run(home, work, "--session", "s", "hi")
        assert code == 1
        assert f"session s is in use by pid {holder.pid}" in out
        assert "Traceback" not in out
    finally:
        holder.communicate("", timeout=10)
    s = store(home, "s")
    s.open()  # released at the holder's exit
    s.close()


def test_lock_of_a_killed_process_is_taken_over(home: Path) -> None:
    holder = hold(home)
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=10)
    s = store(home, "s")
    s.open()
    assert s.lock_path.read_text().split()[0] == str(os.getpid())
    s.close()


def test_files_are_private(tmp_path: Path) -> None:
    (tmp_path / "sessions").mkdir(mode=0o755)
    os.chmod(tmp_path / "sessions", 0o755)
    s = store(tmp_path)
    s.append(msg("user", "secret"))
    s.rewrite([msg("user", "compacted")])
    s.close()
    assert stat.S_IMODE((tmp_path / "sessions").stat().st_mode) == 0o700
    for path in (s.path, s.lock_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


# --- header -----------------------------------------------------------------------------


async def test_header_records_creation_and_keeps_it(tmp_path: Path) -> None:
    s = store(tmp_path)
    t = Transcript(store=s)
    await t.append(msg("user", "one"))
    created = json.loads(s.path.read_text().splitlines()[0])["created"]
    assert created.endswith("Z")
    assert created.startswith("20")
    await t.aclose()
    again = store(tmp_path)
    t2 = Transcript(again.open(), again)
    await t2.replace([msg("user", "summary")])
    await t2.aclose()
    assert json.loads(s.path.read_text().splitlines()[0])["created"] == created
    assert list_sessions(tmp_path)[0].created == created


# --- record-level atomic appends -----------------------------------------------------------

FULL_DISK = textwrap.dedent(
    """
    import resource, signal, sys
    from pathlib import Path
    from agent._exceptions import SessionError
    from agent._messages import Message, TextContent
    from agent._sessions import SessionHeader, SessionStore
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    s = SessionStore.for_name(Path(sys.argv[1]), "s", SessionHeader(name="s"))
    s.open()
    size = s.path.stat().st_size
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, size + 100))
    big = Message(role="user", content=[TextContent(text="x" * 10000)], time="t")
    try:
        s.append(big)
    except SessionError as exc:
        print("refused:", exc)
    """
)


def test_a_failed_append_leaves_no_partial_record(home: Path) -> None:
    s = store(home, "s")
    s.append(msg("user", "before"))
    s.close()
    size = s.path.stat().st_size
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(home)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=30,
        check=True,
    )
    assert "refused:" in done.stdout, done.stderr
    assert s.path.stat().st_size == size
    again = store(home, "s")
    assert [m.content[0] for m in again.open()] == [TextContent(text="before")]
    assert again.repaired is None
    again.close()


def test_every_record_is_one_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = store(tmp_path)
    s.open()
    writes: list[bytes] = []
    real = os.write

    def spy(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return real(fd, data)

    monkeypatch.setattr(os, "write", spy)
    call = Message(
        role="assistant",
        content=[ToolCallContent(id="c", name="read", args={"path": "x" * 5000})],
        time=now_iso(),
    )
    result = Message(
        role="tool",
        content=[ToolResultContent(call_id="c", is_error=False, content=[])],
        time=now_iso(),
    )
    s.append(msg("user", "hi"))
    s.append_many([call, result])  # a tool call and its results: one write
    s.append(msg("user", "bye"))
    s.close()
    assert [w.count(b"\n") for w in writes] == [2, 2, 1]  # header + user, exchange, user
    assert all(w.endswith(b"\n") for w in writes)
    assert [m.role for m in s.load()] == ["user", "assistant", "tool", "user"]


def test_corrupt_middle_line_names_the_way_out(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append(msg("user", "one"))
    s.append(msg("user", "two"))
    s.close()
    lines = s.path.read_text().splitlines()
    lines[1] = "not json"
    s.path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SessionError, match=r"work\.jsonl:2: not a session record.*sessions rm"):
        store(tmp_path).open()
    assert remove_session(tmp_path, "work")  # needs the lock: the failed open released it


# --- corral sessions, --continue -------------------------------------------------------------


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_sessions_list_show_rm(home: Path, work: Path, tmp_path: Path) -> None:
    assert cli("sessions", "list")[1].startswith("no saved sessions")
    other = tmp_path / "other"
    other.mkdir()
    assert run(home, work, "--session", "alpha", 'say "a1"')[0] == 0
    assert run(home, other, "--session", "beta", 'say "b1"')[0] == 0
    code, out = cli("sessions", "list", "--json")
    assert code == 0, out
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["name"] for r in rows] == ["beta", "alpha"]
    assert rows[1]["messages"] == 2
    assert rows[1]["cwd"] == str(work.resolve())
    assert rows[1]["created"].endswith("Z")
    assert rows[1]["locked_by"] is None
    code, out = cli("sessions", "list")
    assert out.splitlines()[0].split() == ["NAME", "MESSAGES", "MODIFIED", "MODEL", "STATE", "CWD"]
    code, out = cli("sessions", "show", "alpha")
    assert code == 0, out
    assert "user:" in out
    assert "a1" in out
    code, out = cli("sessions", "show", "alpha", "--json")
    header, *messages = (json.loads(line) for line in out.splitlines())
    assert header["type"] == "session"
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert cli("sessions", "rm", "-y", "alpha") == (0, "removed session alpha\n")
    assert not list((home / "sessions").glob("alpha*"))
    code, out = cli("sessions", "show", "alpha")
    assert code == 1
    assert "no session named alpha (saved sessions: beta)" in out


def test_sessions_rm_refuses_a_session_in_use(home: Path) -> None:
    holder = hold(home)
    try:
        store(home, "s").path.write_text("")
        code, out = cli("sessions", "rm", "s")
        assert code == 1
        assert f"in use by pid {holder.pid}" in out
        code, out = cli("sessions", "list", "--json")
        assert json.loads(out)["locked_by"] == holder.pid
    finally:
        holder.communicate("", timeout=10)
    assert (home / "sessions" / "s.jsonl").exists()


def test_continue_resumes_the_latest_session_of_this_directory(
    home: Path, work: Path, tmp_path: Path
) -> None:
    code, out = run(home, work, "--continue", "hi")
    assert code == 1
    assert "no saved session to continue in" in out
    other = tmp_path / "other"
    other.mkdir()
    assert run(home, work, "--session", "old", 'say "x"')[0] == 0
    assert run(home, work, "--session", "new", 'say "y"')[0] == 0
    assert run(home, other, "--session", "elsewhere", 'say "z"')[0] == 0
    code, out = run(home, work, "--continue", 'say "again"')
    assert code == 0, out
    lines = (home / "sessions" / "new.jsonl").read_text().splitlines()
    assert len(lines) == 5
    assert run(home, work, "--continue", "--session", "x", "hi")[0] == 1
