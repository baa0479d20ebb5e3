"""The CLI's one error type: one message, every line terminal-safe, exit status 1;
usage mistakes stay click's, exit status 2. Through the real entry point."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from helpers.paths import EXAMPLES

import agent._cli
from agent._cli.errors import CLIError
from agent._cli.main import main

_CLI = Path(agent._cli.__file__).parent


@pytest.fixture(autouse=True)
def _in_work(home: Path, work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A private CORRAL_HOME; no project-local extensions unless a test makes some.
    monkeypatch.chdir(work)


def corral(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_the_cli_has_one_error_type() -> None:
    # Every command reports a mistake the same way: no ClickException of its own.
    kinds = []
    for path in sorted(_CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and any(
                ast.unparse(base).endswith("ClickException") for base in node.bases
            ):
                kinds.append(f"{path.name}:{node.name}")
    assert kinds == ["errors.py:CLIError"]


def test_every_line_of_a_message_is_made_safe() -> None:
    shown = CLIError("first \x1b]0;title\x07\nsecond\u202e").format_message()
    assert shown == "first \\x1b]0;title\\x07\nsecond\\u202e"
    assert isinstance(CLIError("x"), click.ClickException)
    assert CLIError("x").exit_code == 1


@pytest.mark.parametrize(
    ("args", "status", "words"),
    [
        (
            ("sessions", "show", "nothere"),
            1,
            "Error: no session named nothere (saved sessions: none)",
        ),
        (("audit", "--since", "soon"), 2, "Invalid value for '--since': 'soon': use an age"),
        (("tools", "rm", "--dynamic", "ghost"), 1, "Error: no dynamic tool named ghost"),
        (("ext", "logs", "ghost"), 1, "Error: no extension named ghost here"),
        (("run", "--tools", "nonsense", "hi"), 1, "Error: unknown built-in tool(s) nonsense"),
        (("run",), 2, "Missing argument 'PROMPT...'"),
        (("run", "--sandbox", "maybe", "hi"), 2, "Invalid value for '--sandbox'"),
    ],
)
def test_messages_and_exit_statuses_stay(args: tuple[str, ...], status: int, words: str) -> None:
    out = corral(*args)
    assert out.exit_code == status, out.output
    assert words in out.output
    assert "Traceback" not in out.output


def test_untrusted_extensions_are_one_line_each() -> None:
    # refuse_untrusted says one line per extension (it printed them joined by a
    # literal "\n" before the CLI had one error type).
    local = Path.cwd() / ".corral" / "extensions"
    shutil.copytree(EXAMPLES / "weather", local / "weather")
    shutil.copytree(EXAMPLES / "clock", local / "clock")
    out = corral("run", "hi")
    assert out.exit_code == 1
    lines = out.output.splitlines()
    assert len(lines) == 2, out.output
    assert lines[0].startswith("Error: ")
    assert sorted("clock" in line or "weather" in line for line in lines) == [True, True]
    assert all("corral ext trust" in line for line in lines)
