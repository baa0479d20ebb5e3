"""``corral_tools.run``: a standalone tool program's ``--describe`` and ``--call``.

Each test runs ``toolhost_fixtures/standalone_tool.py`` as a real subprocess, the
way a dynamic tool is run: arguments on stdin, one JSON document on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from supervisor.lowlevel import SDK_DIR

PROGRAM = Path(__file__).with_name("toolhost_fixtures") / "standalone_tool.py"
TIMEOUT = 60


def run_tool(*flags: str, stdin: bytes = b"") -> tuple[int, Any, str]:
    env = dict(os.environ, PYTHONPATH=SDK_DIR, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, str(PROGRAM), *flags],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=TIMEOUT,
        check=False,
    )
    out = json.loads(proc.stdout) if proc.stdout else None
    if proc.stdout:
        assert proc.stdout.count(b"\n") == 1, proc.stdout  # exactly one JSON document
    return proc.returncode, out, proc.stderr.decode()


def test_describe_prints_the_spec() -> None:
    code, spec, err = run_tool("--describe")
    assert (code, err) == (0, "")
    assert spec == {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {
                "a": {"type": "integer"},
                "b": {"type": "integer", "default": 0},
                "mode": {
                    "enum": ["add", "fail", "noisy", "raise", "unjson"],
                    "default": "add",
                },
            },
            "required": ["a"],
        },
    }


def test_call_writes_data() -> None:
    assert run_tool("--call", stdin=b'{"a": 2, "b": 3}') == (0, {"data": 5}, "")


def test_call_repairs_and_says_so_on_stderr() -> None:
    code, out, err = run_tool("--call", stdin=b"```json\n{'a': 2, 'b': '3',}\n```\n")
    assert (code, out) == (0, {"data": 5})
    assert "repaired arguments: code_fence, trailing_comma, single_quotes, loose_types" in err


@pytest.mark.parametrize(
    ("stdin", "error"),
    [
        (b'{"a": "x"}', 'a: expected an integer, got "x"'),
        (b'{"b": 1}', "a: required field is missing"),
        (b'{"a": 1, "mode": "fail"}', "asked to fail"),
        (b"", "arguments: not valid JSON"),
    ],
)
def test_call_writes_an_error_and_exits_1(stdin: bytes, error: str) -> None:
    code, out, _ = run_tool("--call", stdin=stdin)
    assert code == 1
    assert set(out) == {"error"}
    assert out["error"].startswith(error)


def test_a_raising_tool_is_an_error_with_its_traceback_on_stderr() -> None:
    code, out, err = run_tool("--call", stdin=b'{"a": 1, "mode": "raise"}')
    assert (code, out) == (1, {"error": "ZeroDivisionError: oops"})
    assert "Traceback" in err
    assert "standalone_tool.py" in err


def test_a_result_that_is_not_json_is_an_error() -> None:
    code, out, _ = run_tool("--call", stdin=b'{"a": 1, "mode": "unjson"}')
    assert code == 1
    assert out["error"].startswith("the result is not JSON")


def test_prints_and_parts_go_to_stderr() -> None:
    code, out, err = run_tool("--call", stdin=b'{"a": 1, "mode": "noisy"}')
    assert (code, out) == (0, {"data": 1})
    assert "printed by the tool" in err
    assert '{"part": {"step": 1}}' in err


@pytest.mark.parametrize("flags", [(), ("--help",), ("--call", "--describe")])
def test_anything_else_prints_the_usage_and_exits_2(flags: tuple[str, ...]) -> None:
    code, out, err = run_tool(*flags)
    assert (code, out) == (2, None)
    assert "usage:" in err
