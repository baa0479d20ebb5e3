"""``corral ext …`` and ``corral sandbox check`` through the real entry point."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from agent._cli.main import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "extensions"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("CORRAL_HOME", str(h))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # no project-local extensions unless a test makes some
    return h


def corral(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def listed(*args: str) -> dict[str, dict[str, object]]:
    out = corral("ext", "list", "--json", *args)
    assert out.exit_code == 0, out.output
    return {row["name"]: row for row in map(json.loads, out.output.splitlines())}


def test_install_list_disable_enable_remove(home: Path) -> None:
    out = corral("ext", "install", str(EXAMPLES / "weather"))
    assert out.exit_code == 0, out.output
    assert "installed weather" in out.output
    assert (home / "extensions" / "weather" / "extension.json").exists()
    row = listed()["weather"]
    assert row["source"] == "global"
    assert row["state"] == "enabled"

    assert corral("ext", "disable", "weather").exit_code == 0
    manifest = json.loads((home / "extensions" / "weather" / "extension.json").read_text())
    assert manifest["enabled"] is False
    assert listed()["weather"]["state"] == "disabled"

    assert corral("ext", "enable", "weather").exit_code == 0
    assert listed()["weather"]["state"] == "enabled"

    out = corral("ext", "remove", "weather")
    assert out.exit_code == 0
    assert not (home / "extensions" / "weather").exists()
    assert "weather" not in listed()


def test_install_refuses_an_invalid_manifest_and_leaves_nothing(home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "extension.json").write_text('{"name": "bad", "exec": "./missing.py"}')
    out = corral("ext", "install", str(bad))
    assert out.exit_code == 1
    assert "exec" in out.output
    assert "missing.py" in out.output
    assert "Traceback" not in out.output
    assert [p.name for p in (home / "extensions").iterdir()] == []


def test_install_will_not_replace_without_force(home: Path) -> None:
    assert corral("ext", "install", str(EXAMPLES / "clock")).exit_code == 0
    again = corral("ext", "install", str(EXAMPLES / "clock"))
    assert again.exit_code == 1
    assert "--force" in again.output
    assert corral("ext", "install", "--force", str(EXAMPLES / "clock")).exit_code == 0


def test_install_from_a_git_url(home: Path, tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.fail("git is needed for this test")
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "hello-py", repo)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-qm", "x"], check=True)
    out = corral("ext", "install", f"file://{repo}")
    assert out.exit_code == 0, out.output
    assert (home / "extensions" / "hello-py" / "hello.py").exists()
    bad = corral("ext", "install", f"file://{tmp_path}/nope.git")
    assert bad.exit_code == 1
    assert "cannot clone" in bad.output


def test_list_shows_invalid_duplicate_and_quarantined(home: Path, tmp_path: Path) -> None:
    assert corral("ext", "install", str(EXAMPLES / "weather")).exit_code == 0
    local = Path.cwd() / ".corral" / "extensions"
    shutil.copytree(EXAMPLES / "weather", local / "weather")
    (local / "broken").mkdir(parents=True)
    (local / "broken" / "extension.json").write_text('{"name": "broken", "exec": 3}')
    quarantine = home / "state" / "quarantine" / "weather.txt"
    quarantine.parent.mkdir(parents=True)
    quarantine.write_text("crashed 5 times in 300 s (last: exit status 3)\n")

    out = corral("ext", "list", "--json")
    rows = [json.loads(line) for line in out.output.splitlines()]
    by_state = {(r["name"], r["state"]): r for r in rows}
    assert by_state[("weather", "quarantined")]["source"] == "project"
    assert "exit status 3" in str(by_state[("weather", "quarantined")]["problem"])
    assert "shadowed by" in str(by_state[("weather", "duplicate")]["problem"])
    assert by_state[("broken", "invalid")]["problem"].startswith("exec")  # type: ignore[union-attr]

    table = corral("ext", "list")
    assert table.exit_code == 0
    assert table.output.splitlines()[0].split()[:3] == ["NAME", "VERSION", "SOURCE"]

    assert corral("ext", "enable", "weather").exit_code == 0
    assert not quarantine.exists()


def test_list_flags_unsandboxed_extensions(home: Path) -> None:
    assert corral("ext", "install", str(EXAMPLES / "clock")).exit_code == 0
    assert listed("--sandbox", "off")["clock"]["sandbox"] == "UNSANDBOXED"
    assert listed("--sandbox", "auto")["clock"]["sandbox"] == "bwrap"


def test_mistakes_are_one_line_and_non_zero(home: Path) -> None:
    for args, words in [
        (["ext", "remove", "nope"], "not installed"),
        (["ext", "enable", "nope"], "no extension named nope"),
        (["ext", "logs", "nope"], "no log for nope"),
        (["ext", "install", "/definitely/not/here"], "no such directory"),
    ]:
        out = corral(*args)
        assert out.exit_code == 1, args
        assert words in out.output, (args, out.output)
        assert "Traceback" not in out.output
    bad_flag = corral("ext", "list", "--sandbox", "maybe")
    assert bad_flag.exit_code == 2
    assert "maybe" in bad_flag.output


def test_logs_prints_the_extension_log(home: Path) -> None:
    log = home / "logs" / "ext-clock.log"
    log.parent.mkdir(parents=True)
    log.write_text("[corral] started pid 1\nhello from stderr\n")
    out = corral("ext", "logs", "clock")
    assert out.exit_code == 0
    assert "hello from stderr" in out.output


def test_sandbox_check_reports_bwrap() -> None:
    out = corral("sandbox", "check", "--json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["chosen"] == "bwrap"
    human = corral("sandbox", "check")
    assert "bwrap" in human.output


def test_console_script_runs() -> None:
    """The installed entry point (not just the click object) works."""
    out = subprocess.run(
        [sys.executable, "-c", "from agent._cli.main import main; main()", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 0
    assert "version" in out.stdout
