"""A reader that closes corral's stdout ends corral quietly: exit 0, no traceback,
nothing left running (``corral run --json … | head -1``, as ``git log | head``).

Real processes over real pipes: the read end is closed before corral writes (every
write fails), or after the first lines (a write in the middle of a run fails).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from helpers.paths import EXAMPLES

pytestmark = pytest.mark.usefixtures("no_leaks")

CORRAL = [str(Path(sys.executable).with_name("corral"))]


def _env(home: Path) -> dict[str, str]:
    keep = ("PATH", "LANG", "PYTHONPATH")
    return {k: v for k, v in os.environ.items() if k in keep} | {"CORRAL_HOME": str(home)}


def _closed_before(args: list[str], home: Path, cwd: Path, stdin: bytes = b"") -> tuple[int, str]:
    read, write = os.pipe()
    os.close(read)  # nobody will ever read: every write fails with EPIPE
    try:
        proc = subprocess.Popen(
            [*CORRAL, *args],
            stdin=subprocess.PIPE,
            stdout=write,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=_env(home),
        )
    finally:
        os.close(write)
    _, err = proc.communicate(stdin, timeout=120)
    return proc.returncode, err.decode()


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["run", "--json", 'say "x"'], b""),
        (["run", 'say "x"'], b""),
        (["rpc"], b'{"id":"1","type":"prompt","message":"say hi"}\n'),
        (["ext", "list"], b""),
        (["sessions", "list"], b""),
        (["audit"], b""),
        (["tools", "list", "--dynamic"], b""),
        (["--help"], b""),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_a_closed_stdout_ends_the_command_quietly(
    home: Path, work: Path, args: list[str], stdin: bytes
) -> None:
    status, err = _closed_before(args, home, work, stdin)
    assert "Traceback" not in err
    assert "BrokenPipe" not in err
    assert err == ""
    assert status == 0


def test_head_1_of_a_run_stops_its_extensions(home: Path, work: Path) -> None:
    proc = subprocess.Popen(
        # The tool call outlasts the reader: its result is written to a closed pipe.
        [*CORRAL, "run", "--json", "-e", str(EXAMPLES / "hello-py"), "run `sleep 2`"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=work,
        env=_env(home),
    )
    assert proc.stdout is not None
    started = None
    for line in iter(proc.stdout.readline, b""):
        event = json.loads(line)
        if event["type"] == "ext_status" and event["status"] == "started":
            started = psutil.Process(event["pid"])
            break
    assert started is not None
    proc.stdout.close()  # the reader is gone, the run goes on writing
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err.decode()
    assert "provider_crashed" not in err.decode()  # a closed stdout is not the model's fault
    assert proc.returncode == 0
    assert not started.is_running()
