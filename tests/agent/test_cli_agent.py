"""``corral run``, ``chat`` and ``demo`` through the real entry point.

Most tests invoke the ``corral`` click group (``agent._cli.main:main``, what the console
script runs) with ``CliRunner``; the Ctrl-C tests run it as a real subprocess.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from helpers.agentkit import finish, probe, read_until, script, spawn_corral
from helpers.paths import EXAMPLES

from agent._cli.main import main

pytestmark = pytest.mark.usefixtures("no_leaks")

WEATHER = str(EXAMPLES / "weather")
GUARD = str(EXAMPLES / "guard")


def corral(*args: str, stdin: str | None = None, cwd: Path | None = None) -> Result:
    runner = CliRunner()
    base = ["--cwd", str(cwd)] if cwd is not None and args and args[0] in ("run", "chat") else []
    return runner.invoke(main, [args[0], *base, *args[1:]], input=stdin, catch_exceptions=False)


def test_run_plain_text(home: Path, work: Path) -> None:
    result = corral("run", "--no-extensions", "hello there", cwd=work)
    assert result.exit_code == 0, result.output
    assert "Hello! 👋" in result.stdout


def test_run_json_is_one_event_per_line(home: Path, work: Path) -> None:
    result = corral("run", "--no-extensions", "--json", "run `echo hi`", cwd=work)
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    types = [e["type"] for e in events]
    assert types[0] == "user_message"
    assert types[-1] == "done"
    for needed in ("turn_start", "assistant_start", "text_delta", "tool_call", "tool_result"):
        assert needed in types
    (result_event,) = [e for e in events if e["type"] == "tool_result"]
    assert result_event["content"] == [{"type": "text", "text": "hi"}]
    assert [e["stop"] for e in events if e["type"] == "turn_end"] == ["tool_use", "end_turn"]


def test_ext_takes_a_directory_or_its_manifest_file(home: Path, work: Path) -> None:
    # The seed's examples point -e at an extension.json too: it means its directory.
    manifest = str(Path(WEATHER) / "extension.json")
    result = corral("run", "-e", manifest, "--no-extensions", "weather in Berlin", cwd=work)
    assert result.exit_code == 0, result.output
    assert "Berlin: " in result.stdout
    listed = CliRunner().invoke(main, ["ext", "list", "--json", "-e", manifest, "--sandbox", "off"])
    assert listed.exit_code == 0, listed.output
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    (weather,) = [e for e in rows if e["name"] == "weather"]
    assert weather["path"] == WEATHER
    # Any other file is refused, naming it.
    other = str(Path(WEATHER) / "weather.py")
    refused = corral("run", "-e", other, "--no-extensions", "hi", cwd=work)
    assert refused.exit_code == 2
    assert "weather.py" in refused.output
    assert "extension.json" in refused.output


def test_run_with_an_extension_tool(home: Path, work: Path) -> None:
    result = corral("run", "-e", WEATHER, "--no-extensions", "weather in Berlin", cwd=work)
    assert result.exit_code == 0, result.output
    assert "Berlin: " in result.stdout
    # stdout is the answer alone; stderr (a terminal or not) carries the notes.
    assert "→ weather" not in result.stdout
    assert "→ weather" in result.stderr


def test_run_blocked_tool_call_shows_the_reason(home: Path, work: Path) -> None:
    result = corral("run", "--json", "-e", GUARD, "--no-extensions", "run `rm -rf build`", cwd=work)
    assert result.exit_code == 0, result.output
    (blocked,) = [
        e for e in map(json.loads, result.stdout.splitlines()) if e["type"] == "tool_result"
    ]
    assert blocked["is_error"]
    assert "refused: matches danger pattern" in blocked["content"][0]["text"]


def test_run_shows_who_rewrote_or_blocked_a_call(home: Path, work: Path) -> None:
    # On a terminal the human lines say it (see test_cli_tty); as JSON, the events do.
    rewritten = corral("run", "--json", "-e", GUARD, "--no-extensions", "run `ls -a`", cwd=work)
    assert rewritten.exit_code == 0, rewritten.output
    events = [json.loads(line) for line in rewritten.stdout.splitlines()]
    (call,) = [e for e in events if e["type"] == "tool_call"]
    assert call["args"] == {"command": "ls -a"}
    assert call["ran_args"] == {"command": "echo GUARDED: 'ls -a'"}
    assert call["rewritten_by"] == ["guard"]
    blocked = corral("run", "--json", "-e", GUARD, "--no-extensions", "run `rm -rf x`", cwd=work)
    events = [json.loads(line) for line in blocked.stdout.splitlines()]
    (call,) = [e for e in events if e["type"] == "tool_call"]
    assert call["blocked_by"] == "guard"


def test_run_scripted_provider_error_exit_status(home: Path, work: Path, tmp_path: Path) -> None:
    path = script(tmp_path, {"error": "boom", "status": 500})
    result = corral("run", "--no-extensions", "--script", path, "go", cwd=work)
    assert result.exit_code == 1
    assert result.stdout == ""
    # stderr is not a terminal: the problem is still one line in words.
    assert result.stderr.splitlines() == ["✖ model error — scripted: boom"]


def test_run_json_says_error_before_done(home: Path, work: Path, tmp_path: Path) -> None:
    path = script(tmp_path, {"error": "boom", "status": 500})
    result = corral("run", "--no-extensions", "--json", "--script", path, "go", cwd=work)
    assert result.exit_code == 1
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["type"] for e in lines][-3:] == ["turn_end", "error", "done"]
    assert lines[-2] == {"type": "error", "message": "scripted: boom"}


def test_a_real_process_logs_the_same_line(home: Path, work: Path, tmp_path: Path) -> None:
    # In a fresh interpreter structlog is imported (and configured) only by the first
    # log call: the line is the one the configuration says, with level and time stamp.
    path = script(tmp_path, {"error": "boom", "status": 500})
    args = ["--log-format", "json", "-v", "run", "--no-extensions", "--script", path, "go"]
    proc = spawn_corral(args, home, work)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (1, "")
    lines = err.splitlines()
    assert lines[-1] == "✖ model error — scripted: boom"
    (logged,) = [e for e in map(json.loads, lines[:-1]) if e["event"] == "provider_failed"]
    assert (logged["error"], logged["level"]) == ("scripted: boom", "info")
    assert logged["timestamp"].endswith("Z")


def test_run_turn_blocked_exit_status(home: Path, work: Path, ext_dir: Path) -> None:
    ext = probe(ext_dir, "--block-turn")
    result = corral("run", "--no-extensions", "-e", ext, "hi", cwd=work)
    assert result.exit_code == 1
    assert "✖ turn blocked — blocked by extension probe: closed for lunch" in result.stderr


def test_run_malformed_script_is_a_clear_error(home: Path, work: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"txt": "typo"}\n')
    result = corral("run", "--no-extensions", "--script", str(bad), "go", cwd=work)
    assert result.exit_code == 1
    assert f"Error: {bad}:2:" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--provider", "nope"],
            "'nope' is not one of 'offline', 'scripted', 'openai', 'anthropic'",
        ),
        (["--provider", "scripted"], "the scripted provider needs a script"),
        (["--session", "../x"], "invalid session name"),
        (["--tools", "read,teleport"], "unknown built-in tool(s) teleport"),
        (["--max-steps", "0"], "0 is not in the range x>=1"),
    ],
)
def test_run_bad_options(home: Path, work: Path, args: list[str], needle: str) -> None:
    result = corral("run", "--no-extensions", *args, "hi", cwd=work)
    assert result.exit_code in (1, 2)
    assert needle in result.stderr
    assert "Traceback" not in result.output


def test_run_prompt_from_stdin(home: Path, work: Path) -> None:
    result = corral("run", "--no-extensions", "-", stdin='say "from stdin"\n', cwd=work)
    assert result.exit_code == 0, result.output
    assert "from stdin" in result.stdout


def test_session_save_and_resume(home: Path, work: Path) -> None:
    first = corral("run", "--no-extensions", "--session", "s1", 'say "one"', cwd=work)
    assert first.exit_code == 0, first.output
    second = corral("run", "--no-extensions", "--session", "s1", "--json", 'say "two"', cwd=work)
    assert second.exit_code == 0, second.output
    lines = (home / "sessions" / "s1.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["name"] == "s1"
    texts = [json.loads(line)["message"]["content"][0]["text"] for line in lines[1:]]
    assert texts == ['say "one"', "one", 'say "two"', "two"]


def test_chat_builtin_commands(home: Path, work: Path, ext_dir: Path) -> None:
    lines = ["/help", "/tools", "/model", "hello", "/ext", "/compact", "/clear", "/nosuch", "/quit"]
    result = corral(
        "chat", "--no-extensions", "-e", probe(ext_dir), stdin="\n".join(lines) + "\n", cwd=work
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "corral chat" in out
    assert "/reload-ext" in out
    assert "/disp" in out
    assert "hostinfo  (probe)" in out
    assert "read  (builtin)" in out
    assert "offline / offline" in out
    assert "Hello! 👋" in out
    assert "probe 1.0.0 — " in out
    assert "calls " in out
    assert "compacted the transcript" in out
    assert "transcript cleared" in out
    assert "unknown command /nosuch" in out


def test_chat_extension_command_actions(home: Path, work: Path, ext_dir: Path) -> None:
    lines = ["/disp you", "/ins", "", "/nop", "/ask", "/oops", "/quit"]
    result = corral(
        "chat", "--no-extensions", "-e", probe(ext_dir), stdin="\n".join(lines) + "\n", cwd=work
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "[probe] probe says you" in out
    assert "(inserted: 'prefilled by probe'" in out
    assert 'You said: "prefilled by probe"' in out
    assert "asked by probe" in out
    assert "[probe] probe failed on purpose" in out
    assert "[probe] probe handled it" in out


def test_chat_reload_ext_and_eof(home: Path, work: Path) -> None:
    result = corral("chat", "--no-extensions", "-e", WEATHER, stdin="/reload-ext\n", cwd=work)
    assert result.exit_code == 0, result.output
    assert "reloaded: stopped 1, loaded 1, ready 1, errors: none" in result.stdout
    assert "bye" in result.stdout


@pytest.mark.slow
def test_demo(home: Path) -> None:
    result = CliRunner().invoke(main, ["demo"], catch_exceptions=False)
    out = result.stdout
    assert result.exit_code == 0, out
    for needle in (
        "A tool call",
        "┊ The request needs a tool; I will call weather.",
        "The guard blocks",
        "The guard rewrites",
        "GUARDED",
        "[redacted]",
        "transcript keeps the model's original: 'the launch code is SECRET'",
        "A crash mid-call",
        "restarted",
        "/reload-ext",
        "A clean stop",
        "demo finished: every step went as expected",
    ):
        assert needle in out, needle
    assert not list(home.iterdir()), "the demo must not touch CORRAL_HOME"


# --- real subprocesses: Ctrl-C ------------------------------------------------------


@pytest.fixture
def slow_script(tmp_path: Path) -> str:
    call = {"tool_calls": [{"name": "bash", "args": {"command": "echo started; sleep 60"}}]}
    return script(tmp_path, call, {"text": "never"}, {"text": "later answer"})


@pytest.mark.slow
def test_chat_ctrl_c_cancels_the_turn_then_exits(home: Path, work: Path, slow_script: str) -> None:
    proc = spawn_corral(
        ["chat", "--no-extensions", "--sandbox", "off", "--script", slow_script], home, work
    )
    assert proc.stdin is not None
    read_until(proc, "› ")
    proc.stdin.write("go\n")
    proc.stdin.flush()
    read_until(proc, "→ bash")
    proc.send_signal(signal.SIGINT)
    seen = read_until(proc, "turn cancelled")
    assert "cancelling the turn" in seen
    read_until(proc, "› ")
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc)
    assert proc.returncode == 0, err
    assert "bye" in out
    assert "Traceback" not in err


@pytest.mark.slow
def test_run_ctrl_c_aborts_with_130(home: Path, work: Path, slow_script: str) -> None:
    proc = spawn_corral(
        ["run", "--json", "--no-extensions", "--sandbox", "off", "--script", slow_script, "go"],
        home,
        work,
    )
    read_until(proc, '"text":"started"')  # bash's first output line, as tool_progress
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc)
    assert proc.returncode == 130, err
    assert '"stop":"aborted"' in out
    assert "Traceback" not in err
