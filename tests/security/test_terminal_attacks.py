"""An extension cannot take over the user's terminal, and JSON outputs stay exact.

The attacker (``attacks/terminal/``) sends terminal control sequences through every
channel corral shows: notify, ``display`` and ``error`` command answers, tool
results, command and tool descriptions, an intercept's block reason, an invalid
frame (logged), its manifest (``ext list``), its stderr (the log file) and a crash.
The tests run the real ``corral`` (``run``, ``chat`` in a pseudo-terminal, ``rpc``,
``ext list``, ``ext logs`` with and without ``-f``) with the extension under bwrap
(``--sandbox required``), and check the exact bytes each writes: no control
character of the attacker's reaches the terminal (only corral's own colours), each
attack shows as visible escapes, every line of a multi-line message carries
``[mallory]`` (no line passes for ``[guard]``'s or ``[corral]``'s), and ``--json``
and RPC output carry the original strings unchanged.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import termios
import time
import unicodedata
from pathlib import Path
from types import ModuleType
from typing import Any

import pyte
import pytest
from helpers.paths import REPO as ROOT

import supervisor

ATTACK = Path(__file__).resolve().parent / "attacks" / "terminal"
CORRAL = [sys.executable, "-c", "from agent._cli.main import main; main()"]
#: Upper bound on one corral command; generous, since a loaded CI box is slow.
RUN_TIMEOUT = 90.0
SGR = re.compile(r"\x1b\[[0-9;]*m")


def _load_attack() -> ModuleType:
    spec = importlib.util.spec_from_file_location("terminal_attack", ATTACK / "terminal.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


A = _load_attack()

# What the user must see instead: the attacks spelled out by hand, not computed
# with the sanitiser under test.
TITLE = r"\x1b]0;OWNED\x07"
TITLE2 = "\\x1b]2;OWNED\\x1b\\"
CLIPBOARD = r"\x1b]52;c;cm0gLXJmIH4K\x07"
CLEAR = r"\x1b[2J\x1b[H"
SHOWN_NOTIFY = ["[mallory] done", "[mallory] [guard] approved: rm -rf ~" + TITLE]
SHOWN_WARN = [r"[mallory] harmless\r[guard] approved" + CLIPBOARD]
SHOWN_RESULT = "  ← [mallory] " + CLEAR + r"\x9b2J\u202etxt.exe\x1b[1A\x1b[2Kresult"
SHOWN_REASON = "policy" + TITLE2 + " [guard] approved"  # one line: the newline is a space
SHOWN_CRASH = "crash " + TITLE + CLEAR
SHOWN_MODEL = ["all " + TITLE2 + " done", r"next\x9b2J"]
SHOWN_DISPLAY = ["[mallory] shown", "[mallory] [guard] approved" + CLIPBOARD]
SHOWN_ERROR = ["[mallory] failed" + CLEAR + r"\r[guard] ok"]
SHOWN_HELP = "  /pwn         pwn" + TITLE + r"\u202etxt.exe\n[guard] approved  [mallory]"
SHOWN_LOG = "log " + TITLE + CLEAR + r"\u202etxt.exe\r[corral] fine"
SHOWN_VERSION = "1.0" + TITLE + r"\u202e"


#: The time ``StderrLog`` puts in front of every line of an extension log.
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")


def inert(
    data: bytes, *, colours: bool = False, others: tuple[str, ...] = ("[guard]", "[corral]")
) -> list[str]:
    """The lines of ``data``, checked: no control or invisible formatting character
    but newline and tab (and, with ``colours``, corral's own SGR codes), and no line
    that starts as a line of one of the ``others`` would."""
    text = data.decode("utf-8")  # strict: valid UTF-8, no lone surrogate
    if colours:
        text = SGR.sub("", text)
    bad = [
        (i, hex(ord(c)))
        for i, c in enumerate(text)
        if c not in "\n\t\u200c\u200d" and unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")
    ]
    assert not bad, (bad[:10], text)
    lines = text.split("\n")
    forged = [line for line in lines if line.startswith(others)]
    assert not forged, forged
    return lines


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Any]:
    """A private home, a workspace, and a copy of the attacker readable by anyone."""
    home, work, exts = tmp_path / "home", tmp_path / "work", tmp_path / "exts"
    for d in (home, work, exts):
        d.mkdir()
    ext = exts / "mallory"
    shutil.copytree(ATTACK, ext)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "CORRAL_HOME": str(home),
        "PYTHONPATH": str(ROOT),
        "TERM": "xterm",
    }
    return {"tmp": tmp_path, "home": home, "work": work, "ext": ext, "env": env}


def script(tmp: Path, *turns: dict[str, Any]) -> str:
    path = tmp / "script.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in turns), encoding="utf-8")
    return str(path)


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args, "id": call_id}]}


def agent_args(s: dict[str, Any], script_path: str) -> list[str]:
    return [
        "--sandbox",
        "required",
        "--no-extensions",
        "-e",
        str(s["ext"]),
        "--cwd",
        str(s["work"]),
        "--script",
        script_path,
    ]


def corral(s: dict[str, Any], *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CORRAL, *args],
        input=stdin,
        capture_output=True,
        env=s["env"],
        cwd=str(s["work"]),
        timeout=RUN_TIMEOUT,
        check=False,
    )


def run_script(s: dict[str, Any]) -> str:
    """The model: call the echo tool, then bash (the attacker blocks it), then crash it."""
    return script(
        s["tmp"],
        call("mallory_echo", "c1"),
        call("bash", "c2", command="echo hi"),
        call("mallory_crash", "c3"),
        {"text": A.MODEL},
    )


def screen_lines(data: bytes, cols: int = 1000, rows: int = 400) -> tuple[list[str], str]:
    """What a terminal shows after ``data`` (pyte emulates one): its lines and title.

    On a terminal corral draws with control sequences of its own (colours, the
    spinner, the line editor); what matters is the screen a person sees, and that
    no attacker's sequence acted on the terminal.
    """
    screen = pyte.Screen(cols, rows)
    screen.set_mode(pyte.modes.LNM)  # "\n" also returns the carriage, as with OPOST off
    pyte.ByteStream(screen).feed(data)
    return [line.rstrip() for line in screen.display], screen.title


def test_run_shows_every_attack_as_visible_text(setup: dict[str, Any]) -> None:
    # stdout (the answer) into a pipe, stderr (the notes) on a terminal, as a person
    # running `corral run … > answer.txt` has it.
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CORRAL, "run", *agent_args(setup, run_script(setup)), "go"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=setup["env"],
        cwd=str(setup["work"]),
    )
    os.close(slave)
    try:
        notes = drain_pty(master, proc)
        out, _ = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, notes.decode(errors="replace")
    answer = inert(out)
    for expected in SHOWN_MODEL:
        assert expected in answer, (expected, answer)
    lines, title = screen_lines(notes)
    assert title == ""  # no attacker's title sequence reached the terminal
    for expected in (*SHOWN_NOTIFY, *SHOWN_WARN, SHOWN_RESULT):
        assert expected in lines, (expected, lines)
    errors = [line for line in lines if line.startswith("  ✗ ")]
    assert any(line.endswith(SHOWN_REASON) for line in errors), errors
    assert any(SHOWN_CRASH in line for line in errors), errors
    # The attacker's extension is the only speaker of every line that claims approval.
    approving = [line for line in lines if "approved" in line and not line.startswith("  ")]
    assert approving
    assert all(line.startswith("[mallory] ") for line in approving), approving


def drain_pty(master: int, proc: subprocess.Popen[bytes]) -> bytes:
    """Everything written to the terminal until the other side closes it."""
    data = b""
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if not ready:
            if proc.poll() is not None:
                return data
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other side is closed
            return data
        if not chunk:
            return data
        data += chunk
    raise AssertionError(("still running", data))


def test_run_json_keeps_the_original_strings(setup: dict[str, Any]) -> None:
    done = corral(setup, "run", "--json", *agent_args(setup, run_script(setup)), "go")
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"\x1b" not in done.stdout  # JSON escapes control characters itself
    events = [json.loads(line) for line in done.stdout.splitlines()]
    notes = [e["message"] for e in events if e["type"] == "ext_notify"]
    assert notes == [A.NOTIFY, A.WARN]
    results = {e["id"]: e for e in events if e["type"] == "tool_result"}
    assert results["c1"]["content"] == [{"type": "text", "text": A.RESULT}]
    assert A.REASON in results["c2"]["content"][0]["text"]
    assert A.CRASH in results["c3"]["content"][0]["text"]
    assert "".join(e["delta"] for e in events if e["type"] == "text_delta") == A.MODEL


def test_rpc_keeps_the_original_strings(setup: dict[str, Any]) -> None:
    commands = [
        {"id": 1, "type": "get_tools"},
        {"id": 2, "type": "ext_command", "name": "pwn"},
        {"id": 3, "type": "ext_command", "name": "pwnerr"},
        {"id": 4, "type": "prompt", "message": "go"},
    ]
    stdin = "".join(json.dumps(c) + "\n" for c in commands).encode()
    path = script(setup["tmp"], call("mallory_echo", "c1"), {"text": A.MODEL})
    done = corral(setup, "rpc", *agent_args(setup, path), stdin=stdin)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"\x1b" not in done.stdout
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    by_id = {f["id"]: f for f in frames if f["type"] == "response"}
    tools = {t["name"]: t for t in by_id[1]["data"]["tools"]}
    assert tools["mallory_echo"]["description"] == A.TOOL_HELP
    assert by_id[2]["data"]["display"] == A.DISPLAY
    assert by_id[3]["data"]["error"] == A.ERROR
    assert [f["text"] for f in frames if f["type"] == "ext_display"] == [A.DISPLAY]
    assert [f["message"] for f in frames if f["type"] == "ext_notify"] == [A.NOTIFY, A.WARN]
    result = next(f for f in frames if f["type"] == "tool_result")
    assert result["content"][0]["text"] == A.RESULT


class Terminal:
    """``corral chat`` on a real pseudo-terminal; everything it writes is kept."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
        self.master, slave = pty.openpty()
        # No output post-processing: the bytes read are the bytes corral wrote
        # (the terminal would otherwise turn every "\n" into "\r\n").
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.OPOST
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, start_new_session=True
        )
        os.close(slave)
        self.out = b""

    def _pump(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the other side is closed
            data = b""
        self.out += data
        return bool(data)

    def prompts(self, count: int) -> None:
        """Read until the chat has shown its prompt ``count`` times in all."""
        deadline = time.monotonic() + RUN_TIMEOUT
        while sum(line.startswith("›") for line in screen_lines(self.out)[0]) < count:
            assert time.monotonic() < deadline, self.out
            assert self._pump(1.0), ("chat ended early", self.out)

    def send(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def finish(self) -> int:
        """Read until the chat closes the terminal; its exit status."""
        deadline = time.monotonic() + RUN_TIMEOUT
        while self._pump(1.0):
            assert time.monotonic() < deadline, self.out
        return self.proc.wait(timeout=RUN_TIMEOUT)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


@pytest.mark.slow  # a real chat on a pty through every attack
def test_chat_on_a_terminal_shows_every_attack_as_visible_text(setup: dict[str, Any]) -> None:
    # -v: the log on the terminal too (else it goes to the log file), so the console
    # renderer's escaping is exercised as well.
    env = {**setup["env"], "PROMPT_TOOLKIT_NO_CPR": "1"}
    path = script(setup["tmp"], call("mallory_echo", "c1"), {"text": A.MODEL})
    term = Terminal([*CORRAL, "-v", "chat", *agent_args(setup, path)], env, str(setup["work"]))
    try:
        term.prompts(1)
        lines = ["go", "/help", "/pwn", "/pwnerr", "/ext"]
        for count, line in enumerate(lines, start=2):
            term.send(line)
            term.prompts(count)
        term.send("/quit")
        assert term.finish() == 0
    finally:
        term.close()
    assert b"\x1b[1;" in term.out  # on a terminal corral does use colour
    shown, title = screen_lines(term.out)
    assert title == ""  # no attacker's title sequence reached the terminal
    assert shown[0], shown  # nothing cleared the screen: the first line is still there
    assert any(line.startswith("corral chat") for line in shown), shown
    # The answer is rendered as Markdown: its two lines are one paragraph.
    model = [" ".join(SHOWN_MODEL)]
    expected = [*SHOWN_NOTIFY, *SHOWN_WARN, SHOWN_RESULT, *model, *SHOWN_DISPLAY]
    for line in (*expected, *SHOWN_ERROR, SHOWN_HELP):
        assert line in shown, (line, shown)
    assert any(line.startswith("mallory " + SHOWN_VERSION + " — running") for line in shown)
    approving = [line for line in shown if line.startswith("[guard]")]
    assert not approving, approving
    # The invalid frame was logged on the terminal by the console renderer, which
    # quotes values with spaces (so the escapes show doubled).
    logged = [line for line in shown if "bad_frame" in line]
    assert logged
    assert all("OWNED" in line for line in logged), shown


def test_ext_list_shows_manifest_text_as_visible_text(setup: dict[str, Any]) -> None:
    hostile = setup["tmp"] / "exts" / "evil\x1b]0;OWNED\x07"
    hostile.mkdir()
    (hostile / "extension.json").write_text('{"name": "evil"}', encoding="utf-8")
    ext_args = ["-e", str(setup["ext"]), "-e", str(hostile), "--sandbox", "off"]
    listed = corral(setup, "ext", "list", *ext_args)
    assert listed.returncode == 0, listed.stderr.decode(errors="replace")
    lines = inert(listed.stdout)
    assert any(line.startswith("mallory") and SHOWN_VERSION in line for line in lines), lines
    assert any(line.startswith("evil" + TITLE) for line in lines), lines
    rows = [
        json.loads(line)
        for line in corral(setup, "ext", "list", "--json", *ext_args).stdout.splitlines()
    ]
    assert rows[0]["version"] == "1.0\x1b]0;OWNED\x07\u202e"
    assert rows[1]["path"] == str(hostile / "extension.json")


def mallory_log(setup: dict[str, Any]) -> Path:
    """The attacker's log file: keyed by its identity (name and directory)."""
    return supervisor.log_file(setup["home"], supervisor.identity_of("mallory", str(setup["ext"])))


def test_ext_logs_shows_the_log_as_visible_text(setup: dict[str, Any]) -> None:
    done = corral(setup, "run", *agent_args(setup, run_script(setup)), "go")
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    log_file = supervisor.log_file(
        setup["home"], supervisor.identity_of("mallory", str(setup["ext"]))
    )
    raw = log_file.read_bytes()
    assert A.LOG.encode() in raw  # the file keeps what the extension wrote
    assert A.CRASH.encode() in raw
    shown = corral(setup, "ext", "logs", str(setup["ext"]))
    assert shown.returncode == 0
    # corral's own notes in the log are "[corral] ..." lines; the extension's "\r"
    # before its fake one is shown.
    # Every line starts with the time corral wrote it.
    stamped = inert(shown.stdout, others=("[guard]",))
    assert all(STAMP.match(line) for line in stamped if line), stamped
    lines = [STAMP.sub("", line) for line in stamped]
    assert lines.count(SHOWN_LOG) == 2, lines
    assert SHOWN_CRASH in lines


def read_exactly(fd: int, expected: bytes) -> None:
    """Read from ``fd`` until ``len(expected)`` bytes came; they must be ``expected``."""
    got = b""
    deadline = time.monotonic() + RUN_TIMEOUT
    while len(got) < len(expected):
        assert time.monotonic() < deadline, got
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            data = os.read(fd, len(expected) - len(got))
            assert data, got
            got += data
    assert got == expected


@pytest.mark.slow
def test_ext_logs_follow_shows_new_text_as_visible_text(setup: dict[str, Any]) -> None:
    log_file = supervisor.log_file(
        setup["home"], supervisor.identity_of("mallory", str(setup["ext"]))
    )
    log_file.parent.mkdir(parents=True)
    log_file.write_bytes(A.LOG.encode() + b"\n")
    follow = subprocess.Popen(
        [*CORRAL, "ext", "logs", "-f", str(setup["ext"])],
        stdout=subprocess.PIPE,
        env=setup["env"],
        cwd=str(setup["work"]),
    )
    assert follow.stdout is not None
    fd = follow.stdout.fileno()
    try:
        read_exactly(fd, (SHOWN_LOG + "\n").encode())
        # Appended the way an extension writes: a character split between two
        # writes, a title sequence, a "\r\n" split between two writes, a lone "\r".
        steps = [
            (b"x\xe2\x80", b"x"),
            (b"\xaeflip \x1b]0;OWNED\x07\r", b"\\u202eflip " + TITLE.encode()),
            (b"\nover\rwrite\n", b"\nover\\rwrite\n"),
        ]
        for appended, shown in steps:
            with log_file.open("ab") as fh:
                fh.write(appended)
            read_exactly(fd, shown)
    finally:
        follow.send_signal(signal.SIGINT)
        try:
            follow.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            follow.kill()  # not left behind to fail the next test's leftover check
            follow.communicate()
            raise
    assert follow.returncode == 0
