"""The CLI's surface: help texts, shortcuts, completion, colour, progress, log stamps, RPC."""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import trio
from click.testing import CliRunner
from helpers.paths import EXAMPLES, REPO

from agent._cli.main import COMMANDS, main
from agent._cli.render import HumanRenderer
from agent._cli.screen import Terminal, make_console
from agent._cli.term import ColorMode, wants_color
from agent._events import ExtNotify, ToolCallEvent
from agent._tools.bash import PROGRESS_BURST, ProgressLines
from agent._version import __version__
from supervisor._io import StderrLog
from supervisor._version import VERSION


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found += _commands(command, (*prefix, name))
    return found


def test_every_command_has_a_whole_summary_examples_env_and_exit_codes() -> None:
    runner = CliRunner()
    top = runner.invoke(main, ["--help"]).output
    for name, (_, _, summary) in COMMANDS.items():
        assert f"  {name.ljust(10)}  {summary}" in top  # listed whole, never cut off
    for path in _commands(main):
        out = runner.invoke(main, [*path, "--help"], terminal_width=100).output
        assert "..." not in out.split("Options:")[0].split("\n", 1)[1], (path, out)
        if (
            isinstance(main.get_command(click.Context(main), path[0]), click.Group)
            and len(path) == 1
        ):
            continue  # a group's help lists its commands; each command has the rest
        for part in ("Examples:", "Environment:", "Exit status:", "CORRAL_HOME"):
            assert part in out, (path, part, out)


def test_the_table_matches_each_commands_own_docstring() -> None:
    for name, (_, _, summary) in COMMANDS.items():
        command = main.get_command(click.Context(main), name)
        assert command is not None
        assert (command.help or "").splitlines()[0] == summary, name


def _cli_then(argv: list[str], report: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run ``corral ARGV`` in a real interpreter, as the console script does, then print
    its exit status and ``report`` (an expression evaluated in that process); stdout."""
    code = (
        "import sys; from agent._cli.main import main\n"
        "status = 0\n"
        f"try:\n    main({argv!r}, prog_name='corral')\n"
        "except SystemExit as exc:\n    status = exc.code\n"
        f"print(status, {report})"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.parametrize("argv", [["--help"], ["--version"]])
def test_help_and_version_import_no_command(argv: list[str]) -> None:
    # What the answer imported.
    imported = (
        "sorted(m for m in sys.modules if m.split('.')[0] in "
        "('trio', 'supervisor', 'structlog', 'rich', 'prompt_toolkit', 'sandbox', 'asyncio')"
        " or m == 'importlib.metadata')"
    )
    out = _cli_then(argv, imported, REPO)
    assert out.strip().splitlines()[-1] == "0 []"
    if argv == ["--version"]:
        assert out.splitlines()[0] == f"corral, version {__version__}"


OFFLINE = ["run", "--provider", "offline", "hi"]


def test_an_offline_run_without_extensions_imports_only_what_it_uses(
    home: Path, work: Path
) -> None:
    # The whole prompt into pipes; it logs nothing, so structlog (and through it
    # asyncio) stays unloaded, as do rich (no terminal to draw on) and the providers
    # and tools not in use.
    imported = (
        "sorted(m for m in sys.modules if m.split('.')[0] in "
        "('structlog', 'asyncio', 'rich', 'httpx', 'mcp', 'sqlite3') or m.startswith("
        "('agent._tools.dynamic.', 'agent._tools.mcp', 'agent._providers.scripted',"
        " 'agent._providers.openai', 'agent._providers.anthropic', 'agent._cli.chat')))"
    )
    env = {k: v for k, v in os.environ.items() if k != "CORRAL_LOG"}
    out = _cli_then(OFFLINE, imported, work, env)
    assert "offline model" in out.splitlines()[0]
    assert out.strip().splitlines()[-1] == "0 []"
    assert not (home / "logs").exists()


def test_an_offline_run_without_extensions_starts_no_guardian_and_no_probe(
    home: Path, work: Path
) -> None:
    # Nothing will be spawned: the guardian and the machine probe (bwrap, cgroups) are
    # left for the first spawn, which never comes; the bash tool was offered all the same.
    report = (
        "sys.modules['sandbox._select']._probe is None,"
        " sorted(sys.modules['sandbox'].guardian_pids())"
    )
    out = _cli_then(OFFLINE, report, work)
    assert out.strip().splitlines()[-1] == "0 True []"


def test_a_run_with_an_extension_prefetches_the_guardian(home: Path, work: Path) -> None:
    argv = ["run", "--provider", "offline", "-e", str(EXAMPLES / "weather"), "hi"]
    out = _cli_then(argv, "sys.modules['sandbox._guardian'].guardian().pid is not None", work)
    assert out.strip().splitlines()[-1] == "0 True"


def test_the_version_is_the_installed_one() -> None:
    # pyproject.toml reads agent/_version.py: the metadata says the same, and so does
    # the copy the supervisor states on the wire (supervisor/_version.py).
    assert importlib.metadata.version("corral") == __version__ == VERSION


def test_bare_ext_form_starts_a_chat(home: Path, work: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["-e", str(EXAMPLES / "weather"), "--no-extensions", "--cwd", str(work)],
        input="/tools\n/quit\n",
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "corral chat" in result.stdout
    assert "weather  (weather)" in result.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell: str) -> None:
    result = CliRunner().invoke(main, ["completion", shell])
    assert result.exit_code == 0
    assert "_CORRAL_COMPLETE" in result.output


def test_completion_answers_with_commands() -> None:
    env = {**os.environ, "_CORRAL_COMPLETE": "bash_complete", "COMP_WORDS": "corral ex"}
    env["COMP_CWORD"] = "1"
    code = "from agent._cli.main import main; main(prog_name='corral')"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True
    ).stdout
    assert "plain,ext" in out.splitlines()


def test_colour_follows_the_mode_and_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    def drawn(mode: ColorMode) -> str:
        out = io.StringIO()
        renderer = HumanRenderer(Terminal(make_console(out, mode)))
        renderer.show(ExtNotify(extension="weather", level="warn", message="careful"))
        return out.getvalue()

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert "\x1b[" in drawn(ColorMode.ALWAYS)
    assert drawn(ColorMode.NEVER) == "[weather] careful\n"
    assert drawn(ColorMode.AUTO) == "[weather] careful\n"  # not a terminal
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_color(sys.stdout, ColorMode.AUTO)
    assert wants_color(sys.stdout, ColorMode.ALWAYS)


async def test_bash_progress_keeps_the_latest_lines_of_a_flood() -> None:
    sent: list[str] = []

    async def progress(text: str) -> None:
        sent.append(text)

    lines = ProgressLines(progress)
    lines.feed(b"".join(b"line %d\n" % i for i in range(10_000)) + b"tail without newline")
    with trio.fail_after(5):
        await lines.flush()
    assert sent[0] == f"[… {10_000 + 1 - PROGRESS_BURST} more lines]"
    assert sent[1:] == [
        *(f"line {i}" for i in range(10_000 - PROGRESS_BURST + 1, 10_000)),
        "tail without newline",
    ]


async def test_bash_progress_pump_sends_lines_as_they_come() -> None:
    sent: list[str] = []
    got = trio.Event()

    async def progress(text: str) -> None:
        sent.append(text)
        got.set()

    lines = ProgressLines(progress)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lines.run_pump)
            lines.feed(b"first\nsecond\npart")
            await got.wait()
            nursery.cancel_scope.cancel()
    assert sent == ["first", "second"]


def test_extension_log_lines_carry_the_time_they_were_written(tmp_path: Path) -> None:
    log = StderrLog(tmp_path / "ext.log", max_bytes=1 << 20, tail_lines=10)
    log.open()
    log.feed(b"one\ntw")
    log.feed(b"o\nfake\rline\n")
    log.note("stopped")
    log.close()
    lines = (tmp_path / "ext.log").read_bytes().decode().split("\n")[:-1]
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "
    assert [re.sub(stamp, "", line, count=1) for line in lines] == [
        "one",
        "two",
        "fake\rline",  # a carriage return does not start a stamped line
        "[corral] stopped",
    ]
    assert all(re.match(stamp, line) for line in lines)


def test_rpc_tool_result_names_the_extension(home: Path, work: Path) -> None:
    commands = [
        {"id": "1", "type": "prompt", "message": "weather in Berlin"},
        {"id": "2", "type": "prompt", "message": "run `echo hi`"},
    ]
    argv = [sys.executable, "-c", "from agent._cli.main import main; main()", "rpc"]
    argv += ["--no-extensions", "-e", str(EXAMPLES / "weather"), "--cwd", str(work)]
    env = {**os.environ, "CORRAL_HOME": str(home), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        argv,
        input="".join(json.dumps(c) + "\n" for c in commands),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = [e for e in map(json.loads, done.stdout.splitlines()) if e["type"] == "tool_result"]
    assert [r.get("extension") for r in results] == ["weather", None]
    assert "extension" not in results[1]  # built-in: the seed's fields only


def test_a_rewrite_or_block_names_who_did_it_and_what_ran() -> None:
    out = io.StringIO()
    renderer = HumanRenderer(Terminal(make_console(out, ColorMode.NEVER)))
    renderer.show(
        ToolCallEvent(
            id="c1",
            name="bash",
            args={"command": "ls -a"},
            ran_args={"command": "echo GUARDED"},
            rewritten_by=["guard\x1b[2J"],
        )
    )
    renderer.show(ToolCallEvent(id="c2", name="bash", args={"command": "rm"}, blocked_by="guard"))
    shown = out.getvalue()
    assert '→ bash (rewritten by [guard\\x1b[2J]) {"command": "echo GUARDED"}' in shown
    assert 'the model asked for {"command": "ls -a"}' in shown
    assert '→ bash (blocked by [guard]) {"command": "rm"}' in shown
    assert "\x1b" not in shown


def test_a_sandbox_note_is_said_once_not_on_every_started_line() -> None:
    # As a non-root user without a delegated cgroup, every start carries the same
    # note; the demo printed it ten times.
    from agent._host import agent_event_for
    from supervisor import ExtensionStarted

    memory = "memory is limited per process (RLIMIT_DATA), not for the whole extension"
    out = io.StringIO()
    renderer = HumanRenderer(Terminal(make_console(out, ColorMode.NEVER)))
    for name, pid, note in [("a", 1, memory), ("b", 2, memory), ("c", 3, f"{memory}; other")]:
        started = ExtensionStarted(
            extension=name,
            pid=pid,
            sandboxed=True,
            backend="bwrap",
            tools=[],
            commands=[],
            note=note,
        )
        event = agent_event_for(started)
        assert event is not None
        renderer.show(event)
    lines = out.getvalue().splitlines()
    assert sum("RLIMIT_DATA" in line for line in lines) == 1
    assert "[b] started (pid 2): bwrap" in lines
    assert "[c] started (pid 3): bwrap; other" in lines
