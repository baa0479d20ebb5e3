"""One confirmation rule for every destructive or trusting command, in real processes.

With stdin ``/dev/null`` (a script, CI), ``tools mcp trust``, ``sessions rm``,
``ext trust`` and ``ext remove`` change nothing without ``-y``; on a terminal they
ask, and only yes goes ahead. ``tools mcp trust`` never pins an entry the policy
would refuse, and ``tools mcp list`` says ``starts`` only for what ``run`` starts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
from helpers.paths import EXAMPLES, REPO

_CODE = "import sys; from agent._cli.main import main; sys.exit(main())"


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "CORRAL_HOME": str(home), "PYTHONPATH": str(REPO), "NO_COLOR": "1"}


def corral(home: Path, work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """corral with stdin /dev/null, as a script or CI runs it."""
    return subprocess.run(
        [sys.executable, "-c", _CODE, *args],
        cwd=work,
        env=_env(home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def on_a_terminal(home: Path, work: Path, answer: str, *args: str) -> tuple[int, str]:
    """corral on a pseudo-terminal, answering its question with ``answer``."""
    child = pexpect.spawn(
        sys.executable, ["-c", _CODE, *args], cwd=str(work), env=_env(home), encoding="utf-8"
    )
    try:
        child.expect(r"\[y/N\]", timeout=60)
        child.sendline(answer)
        child.expect(pexpect.EOF, timeout=60)
        output = (child.before or "") + (child.after if isinstance(child.after, str) else "")
    finally:
        child.close()
    return child.exitstatus if child.exitstatus is not None else -1, output


def _mcp_project(work: Path) -> Path:
    path = work / ".corral" / "mcp.json"
    path.parent.mkdir(parents=True)
    servers = {
        "ok": {"command": "/bin/cat"},
        "relative": {"command": "python3", "args": ["server.py"]},
        "loopback": {"url": "http://127.0.0.1:9/mcp"},
    }
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def _pins(home: Path) -> str:
    found = list(home.rglob("mcp-trust*"))
    return "".join(p.read_text() for p in found if p.is_file())


@pytest.mark.slow  # several real corral processes
def test_mcp_trust_needs_yes_without_a_terminal(home: Path, work: Path) -> None:
    _mcp_project(work)
    refused = corral(home, work, "tools", "mcp", "trust", "ok")
    assert refused.returncode == 1
    assert "not asking without a terminal: add -y" in refused.stderr
    assert "/bin/cat" in refused.stdout  # shown before being refused
    assert "ok  " in corral(home, work, "tools", "mcp", "list").stdout
    assert "NOT TRUSTED" in corral(home, work, "tools", "mcp", "list").stdout
    trusted = corral(home, work, "tools", "mcp", "trust", "-y", "ok")
    assert trusted.returncode == 0, trusted.stderr
    listed = corral(home, work, "tools", "mcp", "list").stdout.splitlines()
    assert listed[0].split() == ["NAME", "ORIGIN", "STATE", "RUNS"]
    assert [row.split()[:3] for row in listed if row.startswith("ok ")] == [
        ["ok", "project", "starts"]
    ]


def test_mcp_trust_on_a_terminal_asks(home: Path, work: Path) -> None:
    _mcp_project(work)
    status, out = on_a_terminal(home, work, "n", "tools", "mcp", "trust", "ok")
    assert status == 1
    assert "ok not trusted" in out
    status, out = on_a_terminal(home, work, "y", "tools", "mcp", "trust", "ok")
    assert status == 0, out
    assert "trusted ok" in out


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("relative", "must be an absolute path"),
        ("loopback", "blocked 127.0.0.1"),
    ],
)
def test_mcp_trust_does_not_pin_what_the_policy_refuses(
    home: Path, work: Path, name: str, why: str
) -> None:
    _mcp_project(work)
    refused = corral(home, work, "tools", "mcp", "trust", "-y", name)
    assert refused.returncode == 1
    assert f"not trusting {name}: a session would not start it" in refused.stderr
    assert why in refused.stderr
    assert name not in _pins(home)
    listed = corral(home, work, "tools", "mcp", "list")
    (row,) = [r for r in listed.stdout.splitlines() if r.startswith(f"{name} ")]
    assert row.split()[2] == "REFUSED"
    assert why in listed.stdout
    assert "starts" not in row


def test_mcp_list_starts_only_what_the_allowances_let_through(home: Path, work: Path) -> None:
    _mcp_project(work)
    allow = ("--mcp-allow", "127.0.0.1:9")
    trusted = corral(home, work, "tools", "mcp", "trust", "-y", "loopback", *allow)
    assert trusted.returncode == 0, trusted.stderr
    rows = corral(home, work, "tools", "mcp", "list", *allow).stdout.splitlines()
    assert [r.split()[2] for r in rows if r.startswith("loopback ")] == ["starts"]
    rows = corral(home, work, "tools", "mcp", "list").stdout.splitlines()  # as `run` would
    assert [r.split()[2] for r in rows if r.startswith("loopback ")] == ["REFUSED"]


def _session(home: Path, work: Path, name: str) -> Path:
    made = corral(home, work, "run", "--session", name, "hi")
    assert made.returncode == 0, made.stderr
    (path,) = (home / "sessions").glob(f"{name}*.jsonl")
    return path


def test_sessions_rm_needs_yes_without_a_terminal(home: Path, work: Path) -> None:
    path = _session(home, work, "keep")
    refused = corral(home, work, "sessions", "rm", "keep")
    assert refused.returncode == 1
    assert "not asking without a terminal: add -y" in refused.stderr
    assert path.exists()
    gone = corral(home, work, "sessions", "rm", "-y", "keep")
    assert gone.returncode == 0, gone.stderr
    assert not path.exists()


def test_sessions_rm_on_a_terminal_asks(home: Path, work: Path) -> None:
    path = _session(home, work, "mine")
    status, out = on_a_terminal(home, work, "n", "sessions", "rm", "mine")
    assert status == 1
    assert "nothing deleted" in out
    assert path.exists()
    status, out = on_a_terminal(home, work, "y", "sessions", "rm", "mine")
    assert status == 0, out
    assert "removed session mine" in out
    assert not path.exists()


def test_ext_trust_and_remove_follow_the_same_rule(home: Path, work: Path) -> None:
    installed = corral(home, work, "ext", "install", str(EXAMPLES / "clock"))
    assert installed.returncode == 0, installed.stderr
    shutil.copytree(EXAMPLES / "clock", work / ".corral" / "extensions" / "clock2")
    for args in (("ext", "remove", "clock"), ("ext", "trust", ".corral/extensions/clock2")):
        refused = corral(home, work, *args)
        assert refused.returncode == 1
        assert "not asking without a terminal: add -y" in refused.stderr
    assert (home / "extensions" / "clock").is_dir()
