"""``corral ext …`` and ``corral sandbox check`` through the real entry point."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from click.testing import CliRunner, Result
from helpers.paths import EXAMPLES, TOOLHOST_EXAMPLES

from agent._cli.main import main
from supervisor import (
    SupervisorConfig,
    data_dir,
    identity_of,
    log_file,
    open_supervisor,
    quarantine_file,
)


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

    assert row["description"] == "current weather for any city (deterministic fake)"

    before = (home / "extensions" / "weather" / "extension.json").read_bytes()
    assert corral("ext", "disable", "weather").exit_code == 0
    assert (home / "extensions" / "weather" / "extension.json").read_bytes() == before
    assert listed()["weather"]["state"] == "disabled"

    assert corral("ext", "enable", "weather").exit_code == 0
    assert listed()["weather"]["state"] == "enabled"

    out = corral("ext", "remove", "-y", "weather")
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
    # Quarantine records are keyed by identity: this one is the project-local weather's.
    quarantine = quarantine_file(home, identity_of("weather", str(local / "weather")))
    quarantine.parent.mkdir(parents=True)
    quarantine.write_text("crashed 5 times in 300 s (last: exit status 3)\n")

    out = corral("ext", "list", "--json")
    rows = [json.loads(line) for line in out.output.splitlines()]
    by_state = {(r["name"], r["state"]): r for r in rows}
    assert by_state[("weather", "quarantined")]["source"] == "project"
    assert by_state[("weather", "quarantined")]["trust"] == "untrusted"
    assert by_state[("weather", "duplicate")]["source"] == "global"
    assert "exit status 3" in str(by_state[("weather", "quarantined")]["problem"])
    assert "shadowed by" in str(by_state[("weather", "duplicate")]["problem"])
    assert by_state[("broken", "invalid")]["problem"].startswith("exec")  # type: ignore[union-attr]

    table = corral("ext", "list")
    assert table.exit_code == 0
    assert table.output.splitlines()[0].split()[:3] == ["NAME", "KIND", "VERSION"]

    assert corral("ext", "enable", "weather").exit_code == 0
    assert not quarantine.exists()


def test_list_shows_tool_hosts_and_their_last_ui_elements(home: Path) -> None:
    assert corral("ext", "install", str(TOOLHOST_EXAMPLES / "python-tools")).exit_code == 0
    row = listed()["py-notes"]
    assert (row["kind"], row["runtime"], row["ui_elements"]) == ("tool-host", "python", [])
    table = corral("ext", "list").output.splitlines()
    assert table[1].split()[:2] == ["py-notes", "tool-host"]

    async def run_once() -> None:  # what a session does: the host answers get_ui_elements
        with trio.fail_after(30):
            async with open_supervisor(SupervisorConfig(home=str(home), sandbox="off")):
                pass

    trio.run(run_once)
    shown = [{"kind": "status", "text": "notes live in this session's state"}]
    assert listed()["py-notes"]["ui_elements"] == shown


def test_list_flags_unsandboxed_extensions(home: Path) -> None:
    assert corral("ext", "install", str(EXAMPLES / "clock")).exit_code == 0
    assert listed("--sandbox", "off")["clock"]["sandbox"] == "UNSANDBOXED"
    assert listed("--sandbox", "auto")["clock"]["sandbox"] == "bwrap"


def test_mistakes_are_one_line_and_non_zero(home: Path) -> None:
    for args, words in [
        (["ext", "remove", "-y", "nope"], "not installed"),
        (["ext", "enable", "nope"], "no extension named nope"),
        (["ext", "logs", "nope"], "no extension named nope"),
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
    assert corral("ext", "install", str(EXAMPLES / "clock")).exit_code == 0
    log = log_file(home, identity_of("clock", str(home / "extensions" / "clock")))
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
    assert "ok  network lists (egress proxy)" in human.output


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


def _copy(src: Path, dest: Path, **changes: object) -> Path:
    shutil.copytree(src, dest)
    manifest = json.loads((dest / "extension.json").read_text())
    manifest.update(changes)
    (dest / "extension.json").write_text(json.dumps(manifest))
    return dest


def test_install_pins_and_shows_the_permissions(home: Path, tmp_path: Path) -> None:
    perms = {"network": True, "env": ["WEATHER_KEY"], "limits": {"memory_mb": 256}}
    src = _copy(EXAMPLES / "weather", tmp_path / "weather", permissions=perms)
    out = corral("ext", "install", str(src))
    assert out.exit_code == 0, out.output
    assert "permissions  net:ANYWHERE (risky), env:WEATHER_KEY, mem 256M" in out.output
    assert "network      RISKY: anywhere, as you" in out.output
    assert "content      sha256:" in out.output
    row = listed()["weather"]
    assert row["trust"] == "trusted"
    assert row["permissions_summary"] == "net:ANYWHERE (risky), env:WEATHER_KEY, mem 256M"
    full = row["permissions"]
    assert isinstance(full, dict)
    assert full["network"] is True
    assert full["limits"]["memory_mb"] == 256  # the whole structure, defaults included
    assert full["limits"]["processes"] == 64
    head = corral("ext", "list").output.splitlines()[0].split()
    assert head[:8] == [
        "NAME",
        "KIND",
        "VERSION",
        "SOURCE",
        "STATE",
        "TRUST",
        "DESCRIPTION",
        "PERMISSIONS",
    ]


def test_install_and_list_show_a_network_list(home: Path, tmp_path: Path) -> None:
    perms = {"network": ["api.open-meteo.com", "127.0.0.1:8080"], "unsafe": ["127.0.0.1:8080"]}
    src = _copy(EXAMPLES / "weather", tmp_path / "weather", permissions=perms)
    out = corral("ext", "install", str(src))
    assert out.exit_code == 0, out.output
    assert (
        "network      only api.open-meteo.com, 127.0.0.1:8080, through corral's proxy" in out.output
    )
    row = listed()["weather"]
    assert row["permissions_summary"] == (
        "net:api.open-meteo.com, net:127.0.0.1:8080, unsafe:127.0.0.1:8080"
    )
    bad = _copy(EXAMPLES / "weather", tmp_path / "bad", permissions={"network": ["10.0.0.1"]})
    refused = corral("ext", "install", str(bad))
    assert refused.exit_code != 0
    assert "permissions.network[0]: '10.0.0.1' is a private address" in refused.output
    assert "also list '10.0.0.1' in permissions.unsafe" in refused.output


def test_trust_and_untrust_a_project_extension(home: Path) -> None:
    local = Path.cwd() / ".corral" / "extensions"
    shutil.copytree(EXAMPLES / "weather", local / "weather")
    assert listed()["weather"]["trust"] == "untrusted"
    asked = corral("ext", "trust", "weather")  # CliRunner's stdin is no terminal
    assert asked.exit_code == 1
    assert "add -y" in asked.output
    assert "status       never trusted" in asked.output
    assert corral("ext", "trust", "-y", "weather").exit_code == 0
    assert listed()["weather"]["trust"] == "trusted"
    again = corral("ext", "trust", "weather")
    assert again.exit_code == 0
    assert "nothing to do" in again.output
    (local / "weather" / "extra.py").write_text("")
    changed = listed()["weather"]
    assert changed["trust"] == "changed"
    assert "corral ext trust .corral/extensions/weather" in str(changed["problem"])
    assert corral("ext", "trust", "-y", ".corral/extensions/weather").exit_code == 0  # by path
    untrusted = corral("ext", "untrust", "weather")
    assert "will not start until trusted again" in untrusted.output
    assert listed()["weather"]["trust"] == "untrusted"


def test_an_installed_extension_named_by_its_path_is_one_extension(home: Path) -> None:
    # `-e` naming a project-local extension (or its manifest) is the same extension,
    # once: it starts, and nothing says it shadows itself.
    local = Path.cwd() / ".corral" / "extensions"
    shutil.copytree(EXAMPLES / "weather", local / "weather")
    for named in (".corral/extensions/weather", str(local / "weather" / "extension.json")):
        rows = corral("ext", "list", "--json", "-e", named).output.splitlines()
        assert [(r["name"], r["source"]) for r in map(json.loads, rows)] == [("weather", "cli")]
        run = corral("run", "--provider", "offline", "-e", named, "hi")
        assert run.exit_code == 0, run.output
        assert "shadowed" not in run.output


def test_trust_mistakes_name_the_culprit(home: Path, tmp_path: Path) -> None:
    elsewhere = _copy(EXAMPLES / "clock", tmp_path / "clock")
    out = corral("ext", "trust", "-y", str(elsewhere))
    assert out.exit_code == 1
    assert "needs no trust" in out.output
    assert "no extension named nope" in corral("ext", "trust", "nope").output
    assert corral("ext", "install", str(EXAMPLES / "clock")).exit_code == 0
    shutil.copytree(EXAMPLES / "clock", Path.cwd() / ".corral" / "extensions" / "clock")
    (home / "state" / "trust.json").chmod(0o666)
    bad = corral("ext", "trust", "-y", "clock")
    assert bad.exit_code == 1
    assert "others may write it" in bad.output
    assert "Traceback" not in bad.output


def test_disable_a_project_extension_records_the_choice_outside_the_repo(home: Path) -> None:
    local = Path.cwd() / ".corral" / "extensions" / "clock"
    shutil.copytree(EXAMPLES / "clock", local)
    assert corral("ext", "trust", "-y", "clock").exit_code == 0
    files = {p: p.read_bytes() for p in local.rglob("*") if p.is_file()}
    assert corral("ext", "disable", "clock").exit_code == 0
    assert listed()["clock"]["state"] == "disabled"
    assert listed()["clock"]["trust"] == "trusted"  # nothing in the repo changed
    assert {p: p.read_bytes() for p in local.rglob("*") if p.is_file()} == files
    choices = list((home / "state" / "enabled").iterdir())
    assert [p.read_text() for p in choices] == ["false\n"]
    assert corral("ext", "enable", "clock").exit_code == 0
    assert listed()["clock"]["state"] == "enabled"
    assert not list((home / "state" / "enabled").iterdir())  # back to the manifest's say


def test_enable_overrides_a_manifest_that_says_disabled(home: Path) -> None:
    local = Path.cwd() / ".corral" / "extensions" / "clock"
    shutil.copytree(EXAMPLES / "clock", local)
    manifest = json.loads((local / "extension.json").read_text())
    (local / "extension.json").write_text(json.dumps({**manifest, "enabled": False}))
    assert listed()["clock"]["state"] == "disabled"
    assert corral("ext", "enable", "clock").exit_code == 0
    assert listed()["clock"]["state"] == "enabled"
    assert json.loads((local / "extension.json").read_text())["enabled"] is False


def test_disable_refuses_an_ext_path(home: Path, tmp_path: Path) -> None:
    out = corral("ext", "disable", str(EXAMPLES / "clock"))
    assert out.exit_code == 1
    assert "neither installed nor project-local" in out.output


def test_trusting_an_older_install_adopts_its_name_keyed_state(home: Path) -> None:
    # As an older corral left it: copied in, no pin, state keyed by name.
    shutil.copytree(EXAMPLES / "clock", home / "extensions" / "clock")
    (home / "data" / "clock").mkdir(parents=True)
    (home / "data" / "clock" / "saved").write_text("kept")
    (home / "logs").mkdir()
    (home / "logs" / "ext-clock.log").write_text("old lines\n")
    row = listed()["clock"]
    assert row["trust"] == "untrusted"
    out = corral("ext", "trust", "-y", "clock")
    assert out.exit_code == 0, out.output
    identity = identity_of("clock", str(home / "extensions" / "clock"))
    assert (data_dir(home, identity) / "saved").read_text() == "kept"
    assert log_file(home, identity).read_text() == "old lines\n"
    assert not (home / "data" / "clock").exists()


def test_remove_keeps_the_data_unless_purged(home: Path) -> None:
    assert corral("ext", "install", str(EXAMPLES / "clock")).exit_code == 0
    identity = identity_of("clock", str(home / "extensions" / "clock"))
    for path in (data_dir(home, identity) / "x", log_file(home, identity)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    assert identity in (home / "state" / "trust.json").read_text()
    out = corral("ext", "remove", "-y", "clock")
    assert out.exit_code == 0, out.output
    assert "its data stays in" in out.output
    assert (data_dir(home, identity) / "x").read_text() == "x"
    assert not log_file(home, identity).exists()
    assert identity not in (home / "state" / "trust.json").read_text()

    assert corral("ext", "install", str(EXAMPLES / "clock")).exit_code == 0
    assert corral("ext", "remove", "-y", "--purge", "clock").exit_code == 0
    assert not data_dir(home, identity).exists()


def test_remove_asks_first_and_needs_yes_without_a_terminal(home: Path) -> None:
    assert corral("ext", "install", str(EXAMPLES / "clock")).exit_code == 0
    out = corral("ext", "remove", "clock")
    assert out.exit_code == 1
    assert "add -y" in out.output
    assert (home / "extensions" / "clock").is_dir()
