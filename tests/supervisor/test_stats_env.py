"""Stats, the extension's environment and argv, its stderr log, and the seed quick-start."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import trio
from helpers.paths import EXAMPLES
from helpers.procs import cmdline, environ
from helpers.supkit import CYCLE, Kit

from supervisor import PROTOCOL_VERSION, CallTimeout, data_dir, identity_of

ENV_DUMP = """\
sys.stderr.write("inline: hello from stderr\\n")
sys.stderr.flush()
emit({"type": "hello", "name": NAME})
emit({"type": "register_command", "name": "env"})
emit({"type": "register_command", "name": "touch"})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "command_invoked":
        if msg["name"] == "env":
            text = json.dumps(dict(os.environ))
        else:
            path = os.path.join(os.environ["CORRAL_DATA_DIR"], "note.txt")
            with open(path, "w") as f:
                f.write("written")
            text = path
        emit({"type": "command_response", "id": msg["id"], "action": "display",
              "display": text})
    elif msg["type"] == "shutdown":
        break
"""

_FACTS = {
    "CORRAL_EXT_NAME",
    "CORRAL_EXT_DIR",
    "CORRAL_DATA_DIR",
    "CORRAL_PROTOCOL_VERSION",
    "CORRAL_EXT_INSTANCE",
}
_ALLOWED = {"PATH", "HOME", "LANG", "TERM", "TMPDIR", "USER"}
# What the host adds for Python extensions (SDK path, unbuffered, no bytecode).
_PYTHON = {"PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"}


async def test_environment_is_an_allowlist(kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_TEST_SECRET", "hunter2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "also-secret")
    monkeypatch.setenv("MY_TOOL_TOKEN", "granted-value")
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("LC_TESTING", "not a locale variable")
    ext = kit.inline("envy", ENV_DUMP, permissions={"env": ["MY_TOOL_TOKEN"]})
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            shown = await client.invoke_command("env")
            touched = await client.invoke_command("touch")
            pid = (await client.list_extensions())[0].pid
            assert pid is not None
            initial = environ(pid)  # what it was started with, not what it made of it
    env = json.loads(shown.display)
    for seen in (env, initial):
        assert "CORRAL_TEST_SECRET" not in seen
        assert "AWS_SECRET_ACCESS_KEY" not in seen
        assert "hunter2" not in json.dumps(seen)
        assert seen["MY_TOOL_TOKEN"] == "granted-value"
        # Only the standard locale variables, not whatever the host has under LC_.
        assert seen["LC_TIME"] == "C"
        assert "LC_TESTING" not in seen
        assert seen["CORRAL_EXT_NAME"] == "envy"
        assert seen["CORRAL_EXT_DIR"] == str(ext)
        assert seen["CORRAL_DATA_DIR"] == str(data_dir(kit.home, identity_of("envy", str(ext))))
        assert seen["CORRAL_PROTOCOL_VERSION"] == str(PROTOCOL_VERSION) == "1"
        assert seen["PATH"] == os.environ["PATH"]
        extra = {
            k
            for k in seen
            if k not in _ALLOWED | _FACTS | _PYTHON | {"MY_TOOL_TOKEN"} and not k.startswith("LC_")
        }
        assert extra == set(), f"not on the allowlist: {sorted(extra)}"
    assert Path(touched.display).read_text() == "written"


async def test_stderr_goes_to_the_log_file(kit: Kit) -> None:
    ext = kit.inline("envy", ENV_DUMP)
    chaos = kit.chaos("chatter", "--stderr-lines", "3")
    with trio.fail_after(CYCLE):
        async with kit.open(ext, chaos) as client:
            await client.invoke_command("env")
            pid = next(i.pid for i in await client.list_extensions() if i.name == "envy")
    log = kit.log_text("envy")
    assert "inline: hello from stderr" in log
    assert f"started pid {pid}" in log
    assert kit.log_path("envy").stat().st_mode & 0o077 == 0  # private to the user
    chatter = kit.log_text("chatter")
    # Every line starts with the UTC time it was written ("…Z "), then the text.
    unstamped = [line.split("Z ", 1)[1] for line in chatter.splitlines()]
    assert [line for line in unstamped if line.startswith("chaos:")] == [
        "chaos: stderr line 1",
        "chaos: stderr line 2",
        "chaos: stderr line 3",
    ]
    assert "inline" not in chatter


async def test_log_is_rotated_by_size(kit: Kit) -> None:
    ext = kit.chaos("chatter", "--stderr-lines", "400")
    with trio.fail_after(CYCLE):
        async with kit.open(ext, config=kit.config(log_max_bytes=2000)) as client:
            await client.call_tool("chaos_echo", {"text": "x"})
    log = kit.log_path("chatter")
    backup = log.with_name(log.name + ".1")
    assert backup.exists()
    # One stderr read (at most 64 KiB) may land whole after a rotation.
    assert log.stat().st_size <= 2000 + 65536
    assert backup.stat().st_size <= 2000 + 65536
    assert "chaos: stderr line 400" in log.read_text() + backup.read_text()


async def test_python_and_node_run_with_absolute_interpreters(kit: Kit) -> None:
    ext = kit.inline("envy", ENV_DUMP)
    node = shutil.which("node")
    paths = [ext, EXAMPLES / "clock"] if node else [ext]
    with trio.fail_after(CYCLE):
        async with kit.open(*paths) as client:
            infos = {i.name: i for i in await client.list_extensions()}
            argv = {name: cmdline(i.pid) for name, i in infos.items() if i.pid is not None}
    py = argv["envy"]
    assert os.path.isabs(py[0])
    assert os.path.basename(py[0]) not in ("sh", "bash", "dash", "env")
    assert os.path.realpath(py[0]) == os.path.realpath(sys.executable)
    assert py[1] == str(ext / "ext.py")
    if node:
        js = argv["clock"]
        assert os.path.isabs(js[0])
        assert js[0] == os.path.realpath(node)
        assert js[1] == str(EXAMPLES / "clock" / "clock.js")


async def test_stats(kit: Kit) -> None:
    ext = kit.chaos("busy", "--crash-after", "7")
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            idle = (await client.list_extensions())[0]
            for i in range(5):
                await client.call_tool("chaos_echo", {"text": str(i)})
            busy = (await client.list_extensions())[0]
    assert idle.stats.latency_p50_ms is None
    assert idle.stats.calls == 0
    s = busy.stats
    assert busy.state == "running"
    assert busy.pid is not None
    assert busy.pid > 0
    assert s.calls == 5
    assert (s.errors, s.timeouts, s.bad_frames, s.restarts) == (0, 0, 0, 0)
    assert s.latency_p50_ms is not None
    assert s.latency_p50_ms > 0
    assert s.latency_p95_ms is not None
    assert s.latency_p95_ms >= s.latency_p50_ms
    assert s.latency_p99_ms is not None
    assert s.latency_p99_ms >= s.latency_p95_ms
    assert s.rss_bytes is not None
    assert s.rss_bytes > 1024 * 1024
    assert s.cpu_percent is not None
    assert s.cpu_percent >= 0
    assert s.open_fds is not None
    assert s.open_fds >= 3
    assert s.uptime_s is not None
    assert s.uptime_s > 0
    assert busy.sandboxed is False
    assert busy.backend == "none"
    assert busy.tools == ["chaos_echo"]
    assert busy.commands == ["chaos"]
    assert busy.source == "cli"
    assert busy.version == "1.0.0"


async def test_timeouts_and_errors_in_stats(kit: Kit) -> None:
    hang = kit.chaos("hang", "--hang")
    with trio.fail_after(CYCLE):
        async with kit.open(hang, config=kit.config(tool_timeout=0.3)) as client:
            for _ in range(2):
                with pytest.raises(CallTimeout):
                    await client.call_tool("chaos_echo", {"text": "x"})
            info = (await client.list_extensions())[0]
    assert (info.stats.calls, info.stats.timeouts) == (2, 2)
    assert info.stats.latency_p50_ms is None  # nothing was answered


async def test_seed_python_quick_start_works_unmodified(kit: Kit) -> None:
    hello = EXAMPLES / "hello-py"
    assert json.loads((hello / "extension.json").read_text())["exec"] == "./hello.py"
    with trio.fail_after(CYCLE):
        async with kit.open(hello) as client:
            assert [(c.name, c.description, c.extension) for c in client.commands()] == [
                ("hellopy", "say hi (python)", "hello-py"),
            ]
            out = await client.invoke_command("hellopy")
            info = (await client.list_extensions())[0]
    assert out.action == "prompt"
    assert out.prompt == "Greet me very briefly. Add one emoji."
    assert out.extension == "hello-py"
    assert info.state == "running"
