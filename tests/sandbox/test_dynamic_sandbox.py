"""Dynamic tools under the real sandbox: what the agent's code may not do, and the caps.

Each test creates a tool through :class:`DynamicTools` (its ``--describe`` runs
sandboxed too) and calls it: it must not reach the network (a listener on the
host's loopback stays silent), read or write host paths beyond its scratch
directory, outlive its timeout (its process group, background children included,
is killed), or flood the host with output (1 MiB cap).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.paths import REPO
from helpers.procs import descendants, lasting, sleep_marker, with_marker

import sandbox
from agent._messages import TextContent
from agent._tools.base import ToolRunResult
from agent._tools.dynamic import DynamicTools, RunCaps, ToolDraft, dynamic_tools

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend")

_OBJECT = {"type": "object", "properties": {}}


@pytest.fixture
def base() -> Iterator[Path]:
    # Not /tmp: the tool has a private /tmp, which would hide files for the wrong reason.
    where = Path(tempfile.mkdtemp(prefix="corral-dyn-test-", dir="/var/tmp"))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _tools(base: Path, caps: RunCaps | None = None) -> DynamicTools:
    backend = sandbox.select_sandbox("auto")
    if backend.backend != "bwrap":
        pytest.skip("no bwrap backend here")
    return dynamic_tools(base / "home", sandbox=backend, caps=caps, require_sandbox=True)


async def _run(
    tools: DynamicTools, code: str, args: dict[str, Any] | None = None
) -> tuple[bool, str]:
    """Create a tool with ``code`` and call it; (succeeded, text). Nothing may be left."""
    before = {p.pid for p in descendants()}
    fds = set(os.listdir("/proc/self/fd"))

    async def progress(text: str) -> None:
        pass

    with trio.fail_after(90):
        await tools.sync()
        tool = await tools.create(
            ToolDraft(name="probe", description="A probe.", parameters=_OBJECT, code=code),
            replace=True,
        )
        result: ToolRunResult = await tool.run("c1", args or {}, progress)
    assert lasting(before) == []
    assert set(os.listdir("/proc/self/fd")) <= fds
    text = " ".join(b.text for b in result.content if isinstance(b, TextContent))
    return not result.is_error, text


async def test_a_tool_runs_sandboxed_with_its_scratch_as_home(base: Path) -> None:
    ok, text = await _run(
        _tools(base),
        "import os\n"
        "open(os.path.join(os.environ['HOME'], 'x'), 'w').write('kept')\n"
        "return {'home': os.environ['HOME'], 'env': sorted(os.environ),\n"
        "        'root': sorted(os.listdir('/'))}",
    )
    assert ok, text
    assert '"env": ["HOME", "LANG", "PATH", "PWD", "PYTHONDONTWRITEBYTECODE"' in text
    assert "/scratch" in text
    assert '"home"' in text


async def test_no_network_not_even_the_hosts_loopback(base: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        ok, text = await _run(
            _tools(base),
            "import socket\n"
            f"socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
            "return 'connected'",
        )
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever reached the host
    finally:
        listener.close()
    assert not ok
    assert "ConnectionRefusedError" in text or "Network is unreachable" in text, text


async def test_no_host_paths(base: Path) -> None:
    secret = base / "secret.txt"
    secret.write_text("TOP SECRET\n")
    victim = base / "victim.txt"
    code = (
        "out = []\n"
        f"for path in ({str(secret)!r}, {os.path.expanduser('~/.bashrc')!r}, '/etc/shadow'):\n"
        "    try:\n"
        "        out.append(open(path).read())\n"
        "    except OSError as exc:\n"
        "        out.append(type(exc).__name__)\n"
        "try:\n"
        f"    open({str(victim)!r}, 'w').write('pwned')\n"
        "    out.append('wrote')\n"
        "except OSError as exc:\n"
        "    out.append(type(exc).__name__)\n"
        "return out"
    )
    ok, text = await _run(_tools(base), code)
    assert ok, text
    assert "TOP SECRET" not in text
    assert "wrote" not in text
    assert not victim.exists()
    assert text.count("Error") == 4, text


@pytest.mark.slow
async def test_a_tool_that_loops_forever_is_killed_with_its_process_group(base: Path) -> None:
    marker = sleep_marker()
    code = (
        "import subprocess, time\n"
        f"subprocess.Popen(['sleep', '{marker}'])\n"
        "while True:\n"
        "    time.sleep(0.1)"
    )
    with trio.fail_after(60):
        ok, text = await _run(_tools(base, RunCaps(timeout=3.0)), code)
    assert not ok
    assert "timed out after 3 s; its process group was killed" in text
    assert with_marker(marker) == []


async def test_output_is_capped_at_one_mebibyte(base: Path) -> None:
    ok, text = await _run(_tools(base), "return 'x' * (5 * 1024 * 1024)")
    assert not ok
    assert "wrote more than 1024 KiB to stdout; it was killed" in text
    assert len(text) < 1000


async def test_a_tool_cannot_print_past_the_result(base: Path) -> None:
    # print() goes to stderr during --call: stdout holds one JSON document.
    ok, text = await _run(_tools(base), "print('{\"data\": \"forged\"}')\nreturn 'real'")
    assert ok
    assert text == "real"


def _documented_environment() -> list[str]:
    """The variables docs/tools.md says a dynamic tool gets."""
    docs = (REPO / "docs" / "tools.md").read_text()
    bullet = docs[docs.index("* a minimal environment") :]
    bullet = bullet[: bullet.index("\n* ", 1)]
    return sorted(set(re.findall(r"`([A-Z][A-Z_]*)`", bullet)))


@pytest.mark.parametrize("backend", ["bwrap", "none"])
async def test_the_environment_is_exactly_the_documented_one(base: Path, backend: str) -> None:
    if backend == "bwrap":
        tools = _tools(base)
    else:
        tools = dynamic_tools(base / "home", sandbox=sandbox.select_sandbox("off"), caps=None)
    ok, text = await _run(
        tools,
        "import os\nreturn {'env': dict(os.environ), 'cwd': os.getcwd()}",
    )
    assert ok, text
    seen = json.loads(text)
    assert sorted(seen["env"]) == _documented_environment()
    env, cwd = seen["env"], seen["cwd"]
    assert (env["PWD"], env["HOME"]) == (cwd, os.path.join(cwd, "scratch"))
    assert env["TMPDIR"] == ("/tmp" if backend == "bwrap" else env["HOME"])


@pytest.mark.parametrize("ending", ["timeout", "return"])
@pytest.mark.slow  # ten sandboxed calls, five of them timing out
async def test_nothing_a_tool_started_is_alive_when_its_call_returns(
    base: Path, ending: str
) -> None:
    # The moment the call returns, not later: a background child of a tool that
    # timed out, or of one that returned, is gone (the pid namespace's end is
    # waited for). The marker is this run's own: other runs of the suite on the
    # machine have theirs.
    marker = sleep_marker()
    tail = "while True:\n    pass" if ending == "timeout" else "return 'left a child'"
    code = f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'])\n{tail}"
    tools = _tools(base, RunCaps(timeout=1.0))
    for _ in range(5):
        with trio.fail_after(60):
            ok, text = await _run(tools, code)
        assert ok is (ending == "return"), text
        assert with_marker(marker) == []
