"""Every way an extension can fail to start stops ``run`` and ``rpc``: exit status 1
and one line naming the extension and the reason, unless
``--skip-broken-extensions`` says go on without it (the one left out may be the
guard the user counts on). Untrusted ones already refuse (tests/security).

Project-local extensions (``.corral/extensions``), trusted with ``ext trust -y``,
run by real ``corral`` processes with stderr on a pipe.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.agentkit import chaos, spawn_corral, write_ext

pytestmark = pytest.mark.usefixtures("no_leaks")

SKIP = "--skip-broken-extensions"


def _corral(args: list[str], home: Path, work: Path, stdin: str = "") -> tuple[int, str, str]:
    proc = spawn_corral(args, home, work)
    out, err = proc.communicate(stdin, timeout=120)
    return proc.returncode, out, err


def _project(work: Path) -> Path:
    where = work / ".corral" / "extensions"
    where.mkdir(parents=True, exist_ok=True)
    return where


def _trusted(path: str, home: Path, work: Path) -> None:
    status, _, err = _corral(["ext", "trust", "-y", path], home, work)
    assert status == 0, err


def _invalid(work: Path, home: Path) -> str:
    where = _project(work) / "greedy"
    where.mkdir()
    manifest = {
        "name": "greedy",
        "version": "1.0.0",
        "exec": "./greedy.py",
        "language": "python",
        "permissions": {"read_only": [str(work / "no-such-dir")]},
    }
    (where / "extension.json").write_text(json.dumps(manifest))
    (where / "greedy.py").write_text("print('never')\n")
    return "greedy/extension.json: permissions.read_only[0]"


def _crashing(work: Path, home: Path) -> str:
    script = work.parent / "crash.py"
    script.write_text("import sys\nprint('boom', file=sys.stderr)\nsys.exit(3)\n")
    _trusted(write_ext(_project(work), "crashy", script), home, work)
    return "extension crashy (" + str(_project(work) / "crashy") + ") did not start: "


def _refused(work: Path, home: Path) -> str:
    _trusted(chaos(_project(work), "--wrong-name", name="impostor"), home, work)
    return "extension impostor ("


BROKEN = {"invalid manifest": _invalid, "crash before hello": _crashing, "refused": _refused}


@pytest.mark.parametrize("how", sorted(BROKEN))
@pytest.mark.parametrize("command", ["run", "rpc"])
def test_a_broken_extension_stops_run_and_rpc(
    home: Path, work: Path, how: str, command: str
) -> None:
    culprit = BROKEN[how](work, home)
    args = [command, "hi"] if command == "run" else [command]
    stdin = '{"id":1,"type":"ping"}\n' if command == "rpc" else ""
    status, out, err = _corral(args, home, work, stdin)
    lines = err.strip().splitlines()
    assert status == 1, err
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: ")
    assert culprit in lines[0]
    assert SKIP in lines[0]  # the way to go on is named
    assert out == ""


@pytest.mark.parametrize("how", sorted(BROKEN))
def test_the_flag_goes_on_without_it(home: Path, work: Path, how: str) -> None:
    BROKEN[how](work, home)
    status, out, err = _corral(["run", SKIP, "hi"], home, work)
    assert status == 0, err
    assert "Hello!" in out
    rpc = _corral(["rpc", SKIP], home, work, '{"id":1,"type":"ping"}\n')
    assert rpc[0] == 0, rpc[2]
    assert json.loads(rpc[1].splitlines()[-1])["data"] == {"pong": True}
