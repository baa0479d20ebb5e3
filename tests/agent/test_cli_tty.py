"""``corral chat`` and ``corral run`` in a real pseudo-terminal, read as a person would.

pexpect runs corral on a pty; pyte emulates the terminal, answers its cursor
position requests, and the tests assert on the rendered screen: the spinner comes
and goes, Markdown renders, a warning never overdraws the prompt, Ctrl-C cancels
a running tool and kills its process group, history and Tab completion work.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pexpect
import psutil
import pyte
import pytest
from helpers.agentkit import script
from helpers.panelkit import panel_ext
from helpers.paths import REPO
from helpers.ptykit import run_on_pty

pytestmark = pytest.mark.usefixtures("no_leaks")

COLS, ROWS = 100, 40
#: Upper bound on waiting for one thing to appear (generous: the machine is shared).
WAIT = 30.0


class Screen:
    """corral on a pseudo-terminal, with the screen a terminal would show."""

    def __init__(self, args: list[str], home: Path, work: Path) -> None:
        env = {
            **os.environ,
            "CORRAL_HOME": str(home),
            "PYTHONPATH": str(REPO),
            "TERM": "xterm-256color",
            "COLUMNS": str(COLS),
            "LINES": str(ROWS),
        }
        env.pop("NO_COLOR", None)
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = b""
        code = "import sys; from agent._cli.main import main; sys.exit(main())"
        self.child = pexpect.spawn(
            sys.executable, ["-c", code, *args], cwd=str(work), env=env, dimensions=(ROWS, COLS)
        )

    def _pump(self, timeout: float) -> None:
        try:
            data = self.child.read_nonblocking(65536, timeout=timeout)
        except pexpect.TIMEOUT:
            return
        except pexpect.EOF:
            raise AssertionError("corral exited:\n" + self.text()) from None
        self.raw += data
        self.stream.feed(data)
        if b"\x1b[6n" in data:  # a cursor position request: answer as a terminal does
            cursor = self.screen.cursor
            self.child.send(f"\x1b[{cursor.y + 1};{cursor.x + 1}R")

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]

    def text(self) -> str:
        return "\n".join(self.lines())

    def wait(self, what: str, check: Callable[[], bool], timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"no {what} on the screen:\n{self.text()}"
            self._pump(0.1)

    def wait_for(self, needle: str, timeout: float = WAIT) -> None:
        self.wait(repr(needle), lambda: needle in self.text(), timeout)

    def prompt_ready(self, count: int) -> None:
        """Wait until ``count`` prompt lines are on the screen and the status line shows."""
        self.wait(
            f"prompt #{count}",
            lambda: (
                sum(line.startswith("›") for line in self.lines()) >= count
                and "/help" in self.lines()[-1] + self.text().split("›")[-1]
            ),
        )

    def send(self, keys: str) -> None:
        self.child.send(keys)

    def finish(self) -> int:
        deadline = time.monotonic() + WAIT
        while self.child.isalive():
            assert time.monotonic() < deadline, self.text()
            try:
                self._pump(0.1)
            except AssertionError:
                break
        self.child.close()
        return self.child.exitstatus if self.child.exitstatus is not None else -1

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


@pytest.fixture
def open_screen(home: Path, work: Path) -> Callable[..., Screen]:
    opened: list[Screen] = []

    def open_(*args: str) -> Screen:
        screen = Screen(list(args), home, work)
        opened.append(screen)
        return screen

    yield open_  # type: ignore[misc]
    for screen in opened:
        screen.close()


MARKDOWN = (
    "# Plan\n\nI will **check** two things:\n\n- the first\n- the second\n\n"
    "```python\nprint('hi')\n```\n"
)


def test_chat_renders_markdown_and_the_spinner_comes_and_goes(
    open_screen: Callable[..., Screen], tmp_path: Path
) -> None:
    path = script(tmp_path, {"text": MARKDOWN, "delay": 2})
    term = open_screen("chat", "--no-extensions", "--script", path)
    term.prompt_ready(1)
    term.send("go\r")
    term.wait("the spinner", lambda: "thinking…" in term.text())
    term.wait_for("the second")
    term.prompt_ready(2)
    lines = term.lines()
    assert "thinking…" not in term.text()  # gone once the answer came
    assert any(line.strip() == "Plan" for line in lines)  # a heading, without its "#"
    assert "I will check two things:" in lines  # bold without its "**"
    assert " • the first" in lines
    assert any(line.strip() == "print('hi')" for line in lines)  # fences gone
    assert "```" not in term.text()
    assert "scripted/scripted" in lines[-1] or "scripted/scripted" in term.text().split("›")[-1]
    term.send("\x04")
    assert term.finish() == 0


def test_chat_ctrl_c_cancels_a_running_tool_and_kills_its_group(
    open_screen: Callable[..., Screen], tmp_path: Path, work: Path
) -> None:
    pidfile = work / "pids"
    command = f"sleep 300 & echo $$ $! > {pidfile}; echo started; wait"
    call = {"tool_calls": [{"name": "bash", "args": {"command": command}}]}
    path = script(tmp_path, call, {"text": "next answer"})
    term = open_screen("chat", "--no-extensions", "--sandbox", "off", "--script", path)
    term.prompt_ready(1)
    term.send("go\r")
    term.wait_for("running bash")
    term.wait_for("│ started")  # bash's output, live under the spinner
    pids = [int(p) for p in pidfile.read_text().split()]
    assert all(psutil.pid_exists(p) for p in pids)
    term.send("\x03")
    term.wait_for("turn cancelled")
    term.prompt_ready(2)
    deadline = time.monotonic() + WAIT
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"still running: {pids}"
        time.sleep(0.05)
    assert "running bash" not in term.text()
    term.send("again\r")
    term.wait_for("next answer")
    term.send("\x04")
    assert term.finish() == 0


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


LATE = textwrap.dedent(
    """\
    #!/usr/bin/env python3
    import json, sys, threading, time

    def emit(obj):
        sys.stdout.write(json.dumps(obj) + "\\n")
        sys.stdout.flush()

    emit({"type": "hello", "name": "late", "version": "1.0.0", "capabilities": []})
    emit({"type": "ready"})

    def later():
        time.sleep(float(sys.argv[1]))
        emit({"type": "notify", "level": "warn", "message": "a late warning"})

    threading.Thread(target=later, daemon=True).start()
    for line in sys.stdin:
        if json.loads(line).get("type") == "shutdown":
            emit({"type": "shutdown_ack"})
            break
    """
)


@pytest.mark.slow  # a real chat on a pty
def test_a_warning_is_printed_above_the_prompt_never_over_it(
    open_screen: Callable[..., Screen], ext_dir: Path
) -> None:
    ext = ext_dir / "late"
    ext.mkdir()
    (ext / "late.py").write_text(LATE)
    (ext / "late.py").chmod(0o755)
    manifest = {"name": "late", "exec": "./late.py", "args": ["3"], "language": "python"}
    (ext / "extension.json").write_text(json.dumps(manifest))
    term = open_screen("chat", "--no-extensions", "-e", str(ext))
    term.prompt_ready(1)
    term.send("half typed")
    term.wait_for("[late] a late warning")
    term.wait_for("› half typed")
    lines = term.lines()
    warning = next(i for i, line in enumerate(lines) if "[late] a late warning" in line)
    prompt = next(i for i, line in enumerate(lines) if line.startswith("› half typed"))
    assert warning < prompt  # above the prompt, which was drawn again below it
    assert lines[warning] == "[late] a late warning"  # nothing of the prompt mixed in
    term.send("\x03\x04")  # Ctrl-C clears the line, Ctrl-D leaves
    assert term.finish() == 0


def test_history_is_kept_per_project_and_tab_completes_commands(
    open_screen: Callable[..., Screen], home: Path
) -> None:
    term = open_screen("chat", "--no-extensions")
    term.prompt_ready(1)
    term.send('say "first line"\r')
    term.wait_for("first line")
    term.prompt_ready(2)
    term.send("/he\t")
    term.wait_for("› /help")
    term.send("\r")
    term.wait_for("built-in commands")
    term.prompt_ready(3)
    term.send("\x04")
    assert term.finish() == 0
    (history,) = (home / "history").iterdir()
    assert history.name.startswith("work-")

    again = open_screen("chat", "--no-extensions")
    again.prompt_ready(1)
    again.send("\x1b[A\x1b[A")  # Up twice: the last line but one of the last session
    again.wait_for('› say "first line"')
    again.send("\x15\x04")  # Ctrl-U empties the line, Ctrl-D leaves
    assert again.finish() == 0


def test_multi_line_input_with_a_trailing_backslash(
    open_screen: Callable[..., Screen], home: Path
) -> None:
    term = open_screen("chat", "--no-extensions")
    term.prompt_ready(1)
    term.send('say "one\\\r')  # Enter after a trailing backslash: a new line, not sent
    term.wait("a continuation line", lambda: any(ln.startswith("…") for ln in term.lines()))
    term.send('two"\r')
    term.prompt_ready(2)
    term.send("\x04")
    assert term.finish() == 0
    (history,) = (home / "history").iterdir()
    assert '+say "one\n+two"\n' in history.read_text()  # one entry of two lines


def test_run_on_a_terminal_keeps_stdout_for_the_answer(home: Path, work: Path) -> None:
    code = "import sys; from agent._cli.main import main; sys.exit(main())"
    answer = work / "answer.txt"
    ext = str(REPO / "examples" / "extensions" / "weather")
    shell = (
        f"{sys.executable} -c {code!r} run --usage --no-extensions -e {ext} "
        f"'weather in Berlin' > {answer}"
    )
    env = {**os.environ, "CORRAL_HOME": str(home), "PYTHONPATH": str(REPO), "TERM": "xterm"}
    status, shown = run_on_pty(shell, cwd=str(work), env=env, rows=ROWS, cols=COLS, wait=WAIT)
    assert status == 0
    assert "  ← [weather] Berlin: 16°C, fog" in shown  # the notes, on the terminal
    assert any(line.startswith("  tokens ") for line in shown)
    text = answer.read_text()
    assert "Berlin: 16°C, fog" in text  # the answer alone, in the file
    assert "←" not in text
    assert "\x1b" not in text
    assert "[weather]" not in text


def test_on_a_terminal_the_log_goes_to_the_log_file(home: Path, work: Path, tmp_path: Path) -> None:
    # structlog is configured when the first entry is logged, not at start-up: the
    # entry still goes to the file as a JSON line (info and above), and the terminal
    # gets the human line only.
    path = script(tmp_path, {"error": "boom", "status": 500})
    screen = Screen(["run", "--no-extensions", "--script", path, "go"], home, work)
    try:
        screen.wait_for("boom")
        assert screen.finish() == 1
    finally:
        screen.close()
    lines = (home / "logs" / "corral.log").read_text().splitlines()
    (logged,) = [json.loads(line) for line in lines]
    assert logged["event"] == "provider_failed"
    assert (logged["error"], logged["level"]) == ("scripted: boom", "info")
    assert logged["timestamp"].endswith("Z")
    assert "provider_failed" not in screen.text()


def test_chat_shows_a_new_tools_code_and_asks_before_it_runs(
    open_screen: Callable[..., Screen], tmp_path: Path, home: Path
) -> None:
    new = {
        "name": "new_tool",
        "args": {
            "name": "shout",
            "description": "Shout the text.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
            "code": "text = args['text']\nreturn text.upper() + '!'",
        },
    }
    path = script(
        tmp_path,
        {"tool_calls": [new]},
        {"text": "not made"},
        {"tool_calls": [new]},
        {"tool_calls": [{"name": "shout", "args": {"text": "hey"}}]},
        {"text": "all done"},
    )
    catalog = home / "state" / "dynamic-tools.db"
    term = open_screen("chat", "--no-extensions", "--tools", "+dynamic", "--script", path)
    term.prompt_ready(1)
    term.send("make one\r")
    term.wait_for("create shout? [y/N]")
    text = term.text()
    assert "the agent wants to create the tool shout:" in text
    assert "      text = args['text']" in text
    assert "      return text.upper() + '!'" in text
    term.send("n\r")
    term.wait_for("not made")
    term.prompt_ready(2)
    assert "the user declined to create it" in term.text()
    assert not catalog.exists()
    term.send("again\r")
    term.wait_for("create shout? [y/N]")
    term.send("y\r")
    term.wait_for("all done")
    assert "HEY!" in term.text()
    assert catalog.exists()
    term.send("\x04")
    assert term.finish() == 0


def _panel_chat(open_screen: Callable[..., Screen], ext_dir: Path, name: str) -> Screen:
    """A chat (sandboxed where it can be) with the panel extension ``name``, at its prompt."""
    ext = panel_ext(ext_dir, name)
    term = open_screen("chat", "--no-extensions", "--sandbox", "auto", "-e", str(ext))
    term.prompt_ready(1)
    return term


def test_chat_draws_an_extension_panel_in_place_and_gives_it_the_keys(
    open_screen: Callable[..., Screen], ext_dir: Path
) -> None:
    term = _panel_chat(open_screen, ext_dir, "board")
    term.send("/board\r")
    term.wait_for("── Board (0/2 done) ──")
    term.wait_for("› □ first")
    assert "up/down move - x toggle - q close" in term.text()
    term.send("\x1b[B")  # Down: the extension moves its cursor and draws again
    term.wait_for("› □ second")
    term.send("x")
    term.wait_for("── Board (1/2 done) ──")
    term.wait_for("› ✓ second")
    term.send("hi")  # runes go to the extension, not to the line editor
    term.wait_for("typed: hi")
    term.send("\x1b")  # Esc closes the panel; the extension is told
    term.wait_for("[board] closed board-main: closed by the user")
    term.prompt_ready(2)
    assert "── Board" not in term.text()
    lines = term.lines()
    prompt = max(i for i, line in enumerate(lines) if line.startswith("›"))
    assert lines[prompt] == "›"  # nothing typed into the editor
    # Again, and this time the extension closes it ("q"): the prompt comes back.
    term.send("/board\r")
    term.wait_for("› ✓ second")
    term.send("q")
    term.prompt_ready(3)
    assert "── Board" not in term.text()
    term.send("\x04")
    assert term.finish() == 0


def test_chat_panel_text_cannot_drive_the_terminal(
    open_screen: Callable[..., Screen], ext_dir: Path
) -> None:
    term = _panel_chat(open_screen, ext_dir, "hostile")
    term.send("/evil\r")
    term.wait_for("── \\x1b]0;pwned\\x07TTT")
    term.wait_for("\\x1b[2J\\x1b]52;c;cHduZWQ=\\x07row 0")
    assert "more lines" in term.text()  # cut at the terminal's height
    assert term.screen.title != "pwned"
    assert b"\x1b]0;pwned" not in term.raw
    assert b"\x1b]52;" not in term.raw
    term.send("\x03")  # Ctrl-C closes the panel too
    term.prompt_ready(2)
    assert "pwned" not in term.text()
    term.send("\x04")
    assert term.finish() == 0


def test_chat_closes_the_panel_of_an_extension_that_crashed(
    open_screen: Callable[..., Screen], ext_dir: Path
) -> None:
    term = _panel_chat(open_screen, ext_dir, "board")
    term.send("/board\r")
    term.wait_for("── Board (0/2 done) ──")
    term.send("!")  # the extension exits with its panel open
    term.wait_for("[board] panel closed: the extension exited")
    term.prompt_ready(2)
    assert "── Board" not in term.text()
    term.wait_for("[board] restarted")
    term.send("\x04")
    assert term.finish() == 0


def test_one_ctrl_c_at_the_prompt_says_how_to_leave_and_a_second_leaves(
    open_screen: Callable[..., Screen],
) -> None:
    term = open_screen("chat", "--no-extensions")
    term.prompt_ready(1)
    term.send("\x03")
    term.wait_for("press Ctrl-C again to quit")
    assert term.child.isalive()
    term.prompt_ready(2)
    term.send("hello\r")  # a line in between: the next Ctrl-C is a first one again
    term.prompt_ready(3)
    term.send("\x03")
    term.wait("a second hint", lambda: term.text().count("press Ctrl-C again to quit") == 2)
    assert term.child.isalive()
    term.send("\x03")
    assert term.finish() == 0
    assert term.lines()[-1] == "bye" or "bye" in term.text().split("press Ctrl-C again")[-1]


def test_exit_says_goodbye_as_ctrl_d_does(open_screen: Callable[..., Screen]) -> None:
    for leave in ("/exit\r", "/quit\r", "\x04"):
        term = open_screen("chat", "--no-extensions")
        term.prompt_ready(1)
        term.send(leave)
        assert term.finish() == 0
        assert "bye" in term.text().split("›")[-1], (leave, term.text())


def test_a_resumed_chat_shows_the_last_exchange(
    open_screen: Callable[..., Screen], tmp_path: Path
) -> None:
    path = script(tmp_path, {"text": "first answer"}, {"text": "the answer is 42\n\nsecond line"})
    term = open_screen("chat", "--no-extensions", "--session", "s", "--script", path)
    term.prompt_ready(1)
    term.send("first question\r")
    term.wait_for("first answer")
    term.prompt_ready(2)
    term.send("what is it?\r")
    term.wait_for("second line")
    term.prompt_ready(3)
    term.send("\x04")
    assert term.finish() == 0
    again = open_screen("chat", "--no-extensions", "--session", "s", "--script", path)
    again.prompt_ready(1)
    shown = again.text()
    assert "resumed session with 4 messages" in shown
    after = shown.split("resumed session with 4 messages")[1]
    assert "you › what is it?" in after
    assert "the answer is 42" in after
    assert "second line" in after
    assert "first question" not in after
    again.send("\x04")
    assert again.finish() == 0
