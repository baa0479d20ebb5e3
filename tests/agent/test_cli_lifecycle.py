"""``corral run`` / ``chat`` as real processes: signals, required ``-e`` extensions, late ones.

Every test runs the real CLI in a subprocess; leftovers are found by the grandchildren's
tag in their argv (``chaos-grandchild``), which survives re-parenting, and by this test's
extension directory in their environment (``CORRAL_EXT_DIR``), which they inherit: other
runs' chaos grandchildren on the same machine are not this test's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from helpers.agentkit import chaos, finish, read_until, script, spawn_corral
from helpers.paths import REPO

pytestmark = pytest.mark.usefixtures("no_leaks")


def grandchildren(ext: str) -> list[psutil.Process]:
    """The live ``chaos-grandchild`` processes of the extension in ``ext``."""
    mine = os.path.realpath(ext)
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if "chaos-grandchild" not in (p.info["cmdline"] or []):
            continue
        if p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            env = p.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if os.path.realpath(env.get("CORRAL_EXT_DIR", "")) == mine:
            found.append(p)
    return found


@pytest.fixture
def slow_script(tmp_path: Path) -> str:
    call = {"tool_calls": [{"name": "bash", "args": {"command": "echo started; sleep 60"}}]}
    return script(tmp_path, call, {"text": "never"})


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_run_handles_sigterm_and_sighup_like_ctrl_c(
    home: Path, work: Path, ext_dir: Path, slow_script: str, sig: signal.Signals, status: int
) -> None:
    # --sandbox off: no bwrap to take the extension's grandchildren down with it.
    ext = chaos(ext_dir, "--spawn", "2", "--ignore-sigterm")
    args = ["run", "--json", "--sandbox", "off", "--no-extensions", "-e", ext]
    proc = spawn_corral([*args, "--script", slow_script, "go"], home, work)
    read_until(proc, '"tool_call"')
    assert len(grandchildren(ext)) == 2
    proc.send_signal(sig)
    out, err = finish(proc)
    assert proc.returncode == status, err
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert {"type": "turn_end", "stop": "aborted"} in events
    assert events[-1] == {"type": "done"}
    assert "Traceback" not in err
    assert grandchildren(ext) == []


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_chat_handles_sigterm_and_sighup(
    home: Path, work: Path, ext_dir: Path, sig: signal.Signals, status: int
) -> None:
    ext = chaos(ext_dir, "--spawn", "1")
    proc = spawn_corral(["chat", "--sandbox", "off", "--no-extensions", "-e", ext], home, work)
    read_until(proc, "› ")
    assert len(grandchildren(ext)) == 1
    proc.send_signal(sig)
    _, err = finish(proc)
    assert proc.returncode == status, err
    assert "Traceback" not in err
    assert grandchildren(ext) == []


def run(home: Path, work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CORRAL_HOME": str(home), "PYTHONPATH": str(REPO)}
    code = "import sys; from agent._cli.main import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, "run", "--no-extensions", *args],
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        timeout=60,
        check=False,
    )


def test_missing_requested_extension_fails_before_the_prompt(
    home: Path, work: Path, tmp_path: Path
) -> None:
    done = run(home, work, "-e", str(tmp_path / "nowhere"), "hello")
    assert done.returncode == 1
    assert f"extension {tmp_path / 'nowhere'}" in done.stderr
    assert "Hello" not in done.stdout


def test_malformed_requested_extension_fails_before_the_prompt(
    home: Path, work: Path, ext_dir: Path
) -> None:
    bad = ext_dir / "bad"
    bad.mkdir()
    (bad / "extension.json").write_text('{"name": "bad", "exec": 42}')
    done = run(home, work, "-e", str(bad), "hello")
    assert done.returncode == 1
    assert "exec" in done.stderr
    assert "Hello" not in done.stdout


@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_requested_extension_that_cannot_exec_fails_with_the_real_reason(
    home: Path, work: Path, ext_dir: Path, tmp_path: Path, sandbox: str
) -> None:
    where = ext_dir / "noexec"
    where.mkdir()
    (where / "run.sh").write_text("#!/bin/sh\necho never\n")
    os.chmod(where / "run.sh", 0o644)  # not executable: the exec fails
    (where / "extension.json").write_text(json.dumps({"name": "noexec", "exec": "./run.sh"}))
    done = run(home, work, "--sandbox", sandbox, "-e", str(where), "hello")
    assert done.returncode == 1, done.stdout
    last = done.stderr.strip().splitlines()[-1]  # the error line, not the logs
    assert last.startswith(f"Error: extension {where}: did not start")
    assert "Permission denied" in last
    assert "Hello" not in done.stdout


def test_a_silent_extension_does_not_hold_the_turn_up(
    home: Path, work: Path, ext_dir: Path
) -> None:
    silent = chaos(ext_dir, "--no-hello", name="silent")
    done = run(home, work, "--sandbox", "off", "-e", silent, "--json", 'say "hi"')
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[-1] == {"type": "done"}
    assert "warning: extension silent has not said hello yet; going on" in done.stderr
    assert "no hello within" not in done.stderr  # the handshake deadline was not waited out
