"""Class 2: runtime binds come only from interpreters corral chose.

Before, corral read the ``pyvenv.cfg`` beside ``argv[0]`` (for a program run
directly: the extension's own file) and the program's shebang, and bound what
they named, unchecked: ``/etc``, ``~/.ssh``, other extensions' data. And an
interpreter under the home could bring corral's home into view. Each attack runs
through the real spawn path under bwrap, with a root and an unprivileged host.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from helpers.sandbox_harness import World


def _program(world: World, relative: str, shebang: str) -> Path:
    """The extension's own executable: ``read_files.py`` behind ``shebang``."""
    program = world.ext_dir / relative
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text(f"#!{shebang}\n" + (world.ext_dir / "read_files.py").read_text())
    program.chmod(0o755)
    return program


def _targets(world: World) -> dict[str, list[str]]:
    other = world.corral_home / "extensions" / "other"
    return {
        "files": [
            str(world.home / ".ssh" / "id_rsa"),
            str(other / "data" / "secret"),
            str(world.home / "project" / "secret.txt"),
            "/etc/passwd",
        ],
        "dirs": [str(world.home / ".ssh"), str(other), str(world.home / "project")],
    }


def test_pyvenv_cfg_beside_the_program_binds_nothing(world: World) -> None:
    program = _program(world, "bin/run", "/usr/bin/python3")
    targets = _targets(world)
    # bin/../pyvenv.cfg is the extension's own file: every `home =` was a bind.
    homes = [*targets["dirs"], "/etc", str(world.corral_home)]
    (world.ext_dir / "pyvenv.cfg").write_text("".join(f"home = {h}\n" for h in homes))
    report = world.run("read_files.py", argv=[str(program), json.dumps(targets)], interpreter="")
    assert report["returncode"] == 0, report["stderr"]
    verdict = json.loads(report["stdout"])
    assert verdict["read"] == {}
    assert not any(verdict["listed"].get(d) for d in targets["dirs"]), verdict["listed"]
    assert not any(Path(b) in Path(h).parents or b == h for b in report["bound"] for h in homes)
    assert world.token not in report["stdout"]


def test_shebang_of_the_program_binds_nothing(world: World) -> None:
    # A "runtime" in the user's home whose pyvenv.cfg names ~/.ssh: corral followed
    # the extension's shebang to it and bound both.
    tools = world.make_dir("home", "alice", "tools", "bin")
    (tools / "python3").symlink_to(os.path.realpath("/usr/bin/python3"))
    (tools.parent / "pyvenv.cfg").write_text(f"home = {world.home / '.ssh'}\n")
    program = _program(world, "run", str(tools / "python3"))
    targets = _targets(world)
    report = world.run("run", argv=[str(program), json.dumps(targets)], interpreter="")
    # It cannot start (its interpreter is not visible), and says why.
    assert report["returncode"] != 0
    assert world.token not in report["stdout"] + report["stderr"]
    assert any("does not show" in n and str(tools / "python3") in n for n in report["notes"])
    for hidden in (tools.parent, world.home / ".ssh"):
        assert not any(Path(b) == hidden or hidden in Path(b).parents for b in report["bound"])


def test_interpreter_in_the_home_never_exposes_corral_home(world: World) -> None:
    # An interpreter corral chose, installed under ~/.local/bin (a copy of this
    # one, finding its standard library where it was built for).
    local_bin = world.make_dir("home", "alice", ".local", "bin")
    python = local_bin / "python3"
    shutil.copy2(os.path.realpath("/usr/bin/python3"), python)
    python.chmod(0o755)
    targets = _targets(world)
    targets["dirs"] += [str(world.corral_home), str(world.home / ".local")]
    report = world.run(
        "read_files.py",
        argv=[str(python), str(world.ext_dir / "read_files.py"), json.dumps(targets)],
    )
    assert report["returncode"] == 0, report["stderr"]
    # ~/.local holds corral's home: only ~/.local/bin is bound, and the note says so.
    assert str(local_bin) in report["bound"]
    assert str(world.home / ".local") not in report["bound"]
    assert any("exposing only" in n for n in report["notes"])
    verdict = json.loads(report["stdout"])
    assert verdict["read"] == {}
    assert world.token not in report["stdout"]
