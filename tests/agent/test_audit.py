"""The audit log (``$CORRAL_HOME/audit.jsonl``) and ``corral audit``."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
import trio
from click.testing import CliRunner, Result
from structlog.testing import capture_logs

from agent import InterventionRecord
from agent._audit import (
    AuditLog,
    AuditRecord,
    EgressAuditRecord,
    audit_path,
    read_audit,
    select_records,
)
from agent._cli.audit_cmd import parse_since
from agent._cli.main import main
from supervisor import EgressRefused, InterventionKind

REWRITE = InterventionRecord(
    extension="guard",
    event="tool_call",
    kind=InterventionKind.REWRITE,
    applied=True,
    tool_id="c1",
    tool="bash",
    args={"command": "echo GUARDED: ls"},
)
IGNORED = InterventionRecord(
    extension="squat\x1b]0;owned\x07",
    event="tool_call",
    kind=InterventionKind.BLOCK,
    applied=False,
    reason="no\x1b[2J",
    tool_id="c2",
    tool="write",
)
TURN = InterventionRecord(
    extension="gate",
    event="turn_start",
    kind=InterventionKind.BLOCK,
    applied=True,
    reason="closed",
    step=2,
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "corral"
    monkeypatch.setenv("CORRAL_HOME", str(where))
    return where


async def fill(home: Path) -> None:
    with trio.fail_after(10):
        await AuditLog(audit_path(home), session="work", cwd="/src").record(
            [REWRITE], model_args={"command": "ls"}
        )
        await AuditLog(audit_path(home), session="", cwd="/tmp").record([IGNORED, TURN])


def corral(*args: str) -> Result:
    return CliRunner().invoke(main, ["audit", *args], catch_exceptions=False)


async def test_records_are_appended_0600_and_read_back(home: Path) -> None:
    await fill(home)
    path = audit_path(home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    records, bad = read_audit(path)
    assert bad == 0
    assert [(r.extension, r.session, r.kind, r.applied) for r in records] == [
        ("guard", "work", InterventionKind.REWRITE, True),
        (IGNORED.extension, "", InterventionKind.BLOCK, False),
        ("gate", "", InterventionKind.BLOCK, True),
    ]
    assert records[0].model_args == {"command": "ls"}
    assert records[2].model_args is None  # only tool calls carry the model's args
    # Appending never rewrites: the first line is byte for byte what it was.
    first = path.read_bytes().splitlines()[0]
    await AuditLog(path, session="x", cwd="/").record([TURN])
    assert path.read_bytes().splitlines()[0] == first


async def test_a_widened_file_is_put_back_to_0600(home: Path) -> None:
    home.mkdir()
    audit_path(home).write_text("")
    audit_path(home).chmod(0o644)
    await fill(home)
    assert stat.S_IMODE(audit_path(home).stat().st_mode) == 0o600


async def test_concurrent_writers_never_interleave(home: Path) -> None:
    logs = [AuditLog(audit_path(home), session=f"s{i}", cwd="/") for i in range(4)]
    big = InterventionRecord(
        extension="e",
        event="tool_call",
        kind=InterventionKind.REWRITE,
        applied=True,
        args={"content": "x" * 20_000},
    )
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for log in logs:
                for _ in range(10):
                    nursery.start_soon(log.record, [big, big])
    records, bad = read_audit(audit_path(home))
    assert bad == 0
    assert len(records) == 80


async def test_bad_lines_are_skipped_and_counted(home: Path) -> None:
    await fill(home)
    with audit_path(home).open("ab") as fh:
        fh.write(b'{"not": "a record"}\n{"extension": "torn", "ev')
    records, bad = read_audit(audit_path(home))
    assert (len(records), bad) == (3, 2)
    out = corral()
    assert out.exit_code == 0
    assert "skipped 2 unreadable line(s)" in out.output


async def test_a_symlinked_log_is_not_followed(home: Path, tmp_path: Path) -> None:
    home.mkdir()
    target = tmp_path / "elsewhere"
    target.write_text("")
    audit_path(home).symlink_to(target)
    with capture_logs() as logs:
        await fill(home)  # logged, never raised
    assert target.read_text() == ""
    assert [e["event"] for e in logs] == ["audit_write_failed", "audit_write_failed"]


def test_selection() -> None:
    now = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
    records = [
        AuditRecord(
            **{**msgspec.structs.asdict(TURN), "extension": ext},
            time=(now - timedelta(hours=3 - i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            session=session,
        )
        for i, (ext, session) in enumerate([("a", "x"), ("b", "x"), ("a", "y"), ("a", "x")])
    ]
    assert [r.extension for r in select_records(records, extension="a")] == ["a", "a", "a"]
    assert len(select_records(records, session="x", extension="a")) == 2
    assert len(select_records(records, since=now - timedelta(hours=1, minutes=30))) == 2
    assert [r.session for r in select_records(records, last=2)] == ["y", "x"]
    assert select_records(records, last=0) == []
    assert parse_since("90m", now) == now - timedelta(minutes=90)
    assert parse_since("2026-01-02T10:00:00Z", now) == now - timedelta(hours=2)


async def test_the_command_table_json_and_filters(home: Path) -> None:
    await fill(home)
    table = corral()
    assert table.exit_code == 0
    lines = table.output.splitlines()
    assert lines[0].split() == ["TIME", "SESSION", "EXTENSION", "EVENT", "ACTION", "DETAIL"]
    assert "guard" in lines[1]
    assert "rewrite" in lines[1]
    assert '{"command": "ls"} -> {"command": "echo GUARDED: ls"}' in lines[1]
    assert "ignored block" in lines[2]
    assert "step 2: closed" in lines[3]
    # Extension text cannot drive the terminal.
    assert "\x1b" not in table.output
    assert "\x07" not in table.output
    assert "squat\\x1b]0;owned\\x07" in lines[2]
    as_json = corral("--json", "--extension", "guard")
    (record,) = map(json.loads, as_json.output.splitlines())
    assert record["args"] == {"command": "echo GUARDED: ls"}
    assert record["applied"] is True
    assert corral("--session", "work", "-n", "5").output.count("\n") == 2
    assert corral("--session", "", "--json").output.count("\n") == 2
    assert corral("--json", "-n", "1").output.count("\n") == 1
    assert "no record matches" in corral("--extension", "nobody").output
    assert corral("--since", "1h").output.count("\n") == 4


def test_the_command_on_an_empty_home_and_bad_options(home: Path) -> None:
    empty = corral()
    assert empty.exit_code == 0
    assert f"no interventions recorded (audit log: {audit_path(home)})" in empty.output
    bad = CliRunner().invoke(main, ["audit", "--since", "yesterday"])
    assert bad.exit_code == 2  # a usage error, as click's own
    assert "Invalid value for '--since': 'yesterday'" in bad.output
    negative = CliRunner().invoke(main, ["audit", "-n", "-1"])
    assert negative.exit_code != 0


def test_an_unreadable_log_is_a_clear_error(home: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads anything")
    home.mkdir()
    audit_path(home).write_text("")
    audit_path(home).chmod(0)
    out = CliRunner().invoke(main, ["audit"])
    assert out.exit_code != 0
    assert "cannot read the audit log" in out.output


async def test_refused_connections_are_recorded_and_shown(home: Path) -> None:
    refusal = EgressRefused(
        extension="weather",
        destination="evil.example:443",
        reason="not in permissions.network in weather's extension.json",
        via="connect",
    )
    flood = msgspec.structs.replace(refusal, destination="x\x1b[2J:80", unreported=57)
    with trio.fail_after(10):
        log = AuditLog(audit_path(home), session="work", cwd="/src")
        await log.record_egress(refusal)
        await log.record_egress(flood)
        await fill(home)
    records, bad = read_audit(audit_path(home))
    assert bad == 0
    assert isinstance(records[0], EgressAuditRecord)
    assert records[0].destination == "evil.example:443"
    assert records[1].unreported == 57  # type: ignore[union-attr]
    assert len(records) == 5  # and the interventions still read as theirs
    table = corral("--extension", "weather")
    assert table.exit_code == 0
    lines = table.output.splitlines()
    assert lines[1].split()[2:5] == ["weather", "network", "refused"]
    assert "evil.example:443 (connect): not in permissions.network" in lines[1]
    assert "57 more before it not recorded one by one" in lines[2]
    assert "\x1b" not in table.output
    (first, _) = map(json.loads, corral("--json", "--extension", "weather").output.splitlines())
    assert first["action"] == "egress_refused"
    assert first["session"] == "work"
