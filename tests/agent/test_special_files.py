"""A cloned repository's special files never hang or exhaust corral.

A FIFO (an open for reading waits for a writer), a link to ``/dev/zero`` (a read
never ends), a sparse 2 GiB file or a directory where the agent reads a file: the
project's ``.corral/config.toml``, its extensions' manifests, a file an MCP server's
command names, a batch tasks file and the scripts it names, a directory given to
``ext install``. Each is refused at once with the file named. Every read that
could hang or fill memory runs in a child process with a timeout and a memory
limit (a real ``corral``, or one reader), so a regression fails instead of hanging.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.agentkit import chaos, spawn_corral
from helpers.hostile import make_special, run_bounded

from agent._cli.settings import ConfigError, load_file

#: Calls one reader (an expression of ``arg``, a path) and prints what it raised.
_READ = """
import json, sys
from pathlib import Path
from agent import load_script
from agent._cli.settings import load_file
from agent._tools.mcp import Origin, load_config, project_config_path
from agent._tools.mcp.trust import pin_digest
from agent.batch import load_tasks
arg = sys.argv[2]
try:
    eval(sys.argv[1])
except Exception as exc:
    print(json.dumps([type(exc).__name__, str(exc)]))
"""

#: Kinds the agent's readers meet (a socket is the manifest tests' and the helper's).
KINDS = ["fifo", "link-to-dev-zero", "sparse-2GiB", "directory"]


def _refusal(call: str, arg: Path) -> tuple[str, str]:
    """What ``call`` raised, read in a bounded child (see :mod:`helpers.hostile`)."""
    proc = run_bounded(_READ, call, str(arg))
    assert proc.returncode == 0, proc.stderr
    kind, message = json.loads(proc.stdout)
    return kind, message


#: reader -> (file name, the call, its exception, what its message starts with).
READERS = {
    "config": (
        "config.toml",
        "load_file(Path(arg), project=True)",
        "ConfigError",
        "{path}: not a usable configuration file: ",
    ),
    "tasks": ("tasks.jsonl", "load_tasks(arg)", "TaskError", "{path}:0: cannot read the tasks: "),
    "script": ("script.jsonl", "load_script(arg)", "ScriptError", "{path}:0: cannot read script: "),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reader", list(READERS))
def test_a_special_file_is_an_error_naming_it(tmp_path: Path, reader: str, kind: str) -> None:
    name, call, error, start = READERS[reader]
    path = tmp_path / name
    words = make_special(kind, path)
    raised, message = _refusal(call, path)
    assert raised == error
    assert message.startswith(start.format(path=path) + words)


def test_a_config_file_still_reads_as_text(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b'model = "m"\r\nmax_steps = 3\r\n')
    assert load_file(path, project=True) == {"model": "m", "max_steps": 3}
    path.write_bytes(b"model = '\xff'\n")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_file(path, project=True)


def test_an_mcp_servers_fifo_argument_cannot_be_pinned(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".corral").mkdir(parents=True)
    os.mkfifo(project / "server.py")  # named by the entry, inside the project
    entry = {"command": sys.executable, "args": ["server.py"]}
    (project / ".corral" / "mcp.json").write_text(json.dumps({"mcpServers": {"srv": entry}}))
    call = "pin_digest(load_config(project_config_path(arg), Origin.PROJECT)[0][0])"
    error, message = _refusal(call, project)
    assert error == "McpConfigError"
    assert "server.py cannot be pinned (is a FIFO (named pipe), not a regular file)" in message


# --- real corral processes ----------------------------------------------------------


def _corral(args: list[str], home: Path, work: Path) -> tuple[int, str, str]:
    proc = spawn_corral(args, home, work)
    try:
        out, err = proc.communicate("", timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, out, err


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    (work / ".corral" / "extensions").mkdir(parents=True)
    return home, work


@pytest.mark.usefixtures("no_leaks")
def test_ext_list_shows_special_manifests_as_invalid_rows(places: tuple[Path, Path]) -> None:
    home, work = places
    local = work / ".corral" / "extensions"
    chaos(local, name="good")
    words = {}
    for kind in KINDS:
        (local / kind).mkdir()
        words[kind] = make_special(kind, local / kind / "extension.json")
    status, out, err = _corral(["ext", "list"], home, work)
    assert status == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "invalid" not in rows["good"]
    for kind in KINDS:
        assert "invalid" in rows[kind]
        assert words[kind] in rows[kind]


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("kind", ["fifo", "link-to-dev-zero"])
def test_run_refuses_a_special_project_config_at_once(places: tuple[Path, Path], kind: str) -> None:
    home, work = places
    words = make_special(kind, work / ".corral" / "config.toml")
    status, out, err = _corral(["run", "--provider", "offline", "hi"], home, work)
    assert status == 1, (out, err)
    config = work / ".corral" / "config.toml"
    assert f"{config}: not a usable configuration file: {words}" in err
    assert "Traceback" not in err


@pytest.mark.usefixtures("no_leaks")
def test_run_names_a_special_project_manifest(places: tuple[Path, Path]) -> None:
    home, work = places
    (work / ".corral" / "extensions" / "bad").mkdir()
    manifest = work / ".corral" / "extensions" / "bad" / "extension.json"
    os.mkfifo(manifest)
    status, out, err = _corral(["run", "--provider", "offline", "hi"], home, work)
    assert status == 1, (out, err)
    assert f"{manifest}: is a FIFO (named pipe), not a regular file" in err
    assert "Traceback" not in err


@pytest.mark.usefixtures("no_leaks")
def test_ext_install_refuses_special_files_in_the_source(places: tuple[Path, Path]) -> None:
    home, work = places
    src = work / "src"
    chaos(work, name="src")
    os.mkfifo(src / "pipe")
    if os.geteuid() == 0:  # copytree's own copy read a device until the disk was full
        os.mknod(src / "zero", 0o600 | 0o020000, os.makedev(1, 5))
    status, out, err = _corral(["ext", "install", "./src"], home, work)
    assert status == 1, (out, err)
    assert "not installed: in ./src: " in err
    assert "src/pipe: is a FIFO (named pipe), not a regular file" in err
    if os.geteuid() == 0:
        assert "src/zero: is a character device, not a regular file" in err
    assert "Traceback" not in err
    assert not list((home / "extensions").iterdir())
    (src / "pipe").unlink()
    (src / "zero").unlink(missing_ok=True)
    status, out, err = _corral(["ext", "install", "./src"], home, work)
    assert status == 0, (out, err)
    installed = home / "extensions" / "src"
    copied = installed / "chaos.py"
    assert copied.read_bytes() == (src / "chaos.py").read_bytes()
    assert os.stat(copied).st_mode == os.stat(src / "chaos.py").st_mode
    assert os.stat(copied).st_mtime_ns == os.stat(src / "chaos.py").st_mtime_ns
