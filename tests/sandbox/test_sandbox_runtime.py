"""Which read-only paths an interpreter needs, found without running it."""

from __future__ import annotations

import concurrent.futures
import os
import sys
from pathlib import Path

import pytest

from sandbox import PlanError
from sandbox._runtime import find_runtime_paths


def test_system_interpreter_needs_nothing() -> None:
    python = os.path.realpath("/usr/bin/python3")
    assert find_runtime_paths("x", python).paths == []


def _venv(tmp_path: Path) -> tuple[Path, Path]:
    """A venv in ``tmp_path/venv`` whose python links to a base in ``tmp_path/opt``."""
    base = tmp_path / "opt" / "python3.11"
    (base / "bin").mkdir(parents=True)
    real = base / "bin" / "python3.11"
    real.write_bytes(b"\x7fELF")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(real)
    (venv / "pyvenv.cfg").write_text(f"home = {base / 'bin'}\nversion = 3.11.7\n")
    return venv, base


def test_venv_needs_itself_and_its_base(tmp_path: Path) -> None:
    venv, base = _venv(tmp_path)
    needs = find_runtime_paths("x", str(venv / "bin" / "python"))
    assert needs.paths == [str(venv), str(base)]


def test_this_interpreter_resolves() -> None:
    needs = find_runtime_paths("x", sys.executable)
    real = os.path.realpath(sys.executable)
    assert any(real.startswith(p + "/") for p in needs.paths) or real.startswith("/usr/")


def test_prefix_is_narrowed_when_it_would_expose_private_data(tmp_path: Path) -> None:
    home = tmp_path / "home"
    local = home / ".local"
    (local / "bin").mkdir(parents=True)
    (local / "state" / "corral").mkdir(parents=True)
    node = local / "bin" / "node"
    node.write_bytes(b"\x7fELF")
    needs = find_runtime_paths(
        "x", str(node), home=str(home), hidden=(str(local / "state" / "corral"),)
    )
    assert needs.paths == [str(local / "bin")]
    assert "holds private data" in needs.notes[0]


@pytest.mark.parametrize("shim", ["shims/python", "volta/bin/node"])
def test_shims_are_refused(tmp_path: Path, shim: str) -> None:
    path = tmp_path / shim
    path.parent.mkdir(parents=True)
    if shim.startswith("volta"):
        target = tmp_path / "volta-shim"
        target.write_bytes(b"\x7fELF")
        path.symlink_to(target)
    else:
        path.write_text('#!/usr/bin/env bash\nexec pyenv exec "$0" "$@"\n')
    with pytest.raises(PlanError, match="shim"):
        find_runtime_paths("x", str(path))


def test_script_interpreter_is_followed(tmp_path: Path) -> None:
    tool = tmp_path / "opt" / "tool"
    (tool / "bin").mkdir(parents=True)
    (tool / "bin" / "interp").write_bytes(b"\x7fELF")
    script = tmp_path / "ext" / "run"
    script.parent.mkdir()
    script.write_text(f"#!{tool / 'bin' / 'interp'} -u\n")
    needs = find_runtime_paths("x", str(script), system=("/usr", str(script.parent)))
    assert needs.paths == [str(tool)]
    env_script = tmp_path / "ext" / "run2"
    env_script.write_text("#!/usr/bin/env python3\n")
    needs = find_runtime_paths("x", str(env_script), system=("/usr", str(script.parent)))
    assert needs.paths == []
    assert "PATH" in needs.notes[0]


def test_a_link_in_a_bin_directory_brings_its_prefix(tmp_path: Path) -> None:
    # nvm's layout: <prefix>/bin/npx -> ../lib/node_modules/npm/bin/npx-cli.js, whose
    # `#!/usr/bin/env node` needs <prefix>/bin/node on the sandbox's PATH.
    prefix = tmp_path / "nvm" / "versions" / "node" / "v20"
    cli = prefix / "lib" / "node_modules" / "npm" / "bin" / "npx-cli.js"
    cli.parent.mkdir(parents=True)
    cli.write_text("#!/usr/bin/env node\n")
    (prefix / "bin").mkdir()
    (prefix / "bin" / "node").write_bytes(b"\x7fELF")
    (prefix / "bin" / "npx").symlink_to("../lib/node_modules/npm/bin/npx-cli.js")
    needs = find_runtime_paths("x", str(prefix / "bin" / "npx"))
    assert needs.paths == [str(prefix)]


def test_relative_or_missing_argv0_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="absolute"):
        find_runtime_paths("x", "python3")
    with pytest.raises(PlanError, match="does not exist"):
        find_runtime_paths("x", str(tmp_path / "nope"))


def test_runtime_paths_pass_the_rules_of_a_grant(tmp_path: Path) -> None:
    home = tmp_path / "home"
    corral = home / "state" / "corral"
    corral.mkdir(parents=True)
    # A venv whose pyvenv.cfg names places no read-only grant could have.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    (venv / "pyvenv.cfg").write_text(f"home = /etc\nhome = {home}/.ssh\nhome = {corral}\n")
    needs = find_runtime_paths(
        "x", str(venv / "bin" / "python"), home=str(home), private=(str(corral),)
    )
    assert str(venv) in needs.paths
    for refused in ("/etc", f"{home}/.ssh", str(corral)):
        assert not any(p == refused or p.startswith(refused + "/") for p in needs.paths), refused
    # An interpreter that can only be reached through a credential store is refused.
    keys = home / ".ssh" / "bin"
    keys.mkdir(parents=True)
    (keys / "python").write_bytes(b"\x7fELF")
    with pytest.raises(PlanError, match="cannot be made visible"):
        find_runtime_paths("x", str(keys / "python"), home=str(home))
    # So is one inside corral's home (where extensions write).
    inside = corral / "bin"
    inside.mkdir()
    (inside / "node").write_bytes(b"\x7fELF")
    with pytest.raises(PlanError, match="must stay hidden"):
        find_runtime_paths("x", str(inside / "node"), home=str(home), private=(str(corral),))


def test_a_venv_holding_the_extension_shows_its_bin_and_pyvenv_cfg(tmp_path: Path) -> None:
    # pip installs corral's example extensions inside the venv's site-packages: the
    # venv may not be bound whole, yet its python must still start in the sandbox.
    venv, base = _venv(tmp_path)
    ext = venv / "lib" / "python3.11" / "site-packages" / "agent" / "_examples" / "hello-py"
    ext.mkdir(parents=True)
    needs = find_runtime_paths("x", str(venv / "bin" / "python"), hidden=(str(ext),))
    assert needs.paths == [str(venv / "bin"), str(venv / "pyvenv.cfg"), str(base)]
    assert not any(str(ext).startswith(p + "/") for p in needs.paths)


def test_a_name_inside_the_system_directories_needs_no_alias(tmp_path: Path) -> None:
    # /bin -> usr/bin (merged /usr): the sandbox shows the system directories with
    # their own links, and bwrap refuses a bind over a link ("Race condition
    # binding dirfd"), so /bin/sh must not bring an alias of /bin.
    system = tmp_path / "usr"
    (system / "bin").mkdir(parents=True)
    (system / "bin" / "sh").write_bytes(b"\x7fELF")
    (system / "bin" / "sh").chmod(0o755)
    linked = tmp_path / "bin"
    linked.symlink_to(system / "bin")
    needs = find_runtime_paths("x", str(linked / "sh"), system=(str(system), str(linked)))
    assert needs.aliases == []
    # Outside the system directories the same link is an alias, as a linked venv is.
    needs = find_runtime_paths("x", str(linked / "sh"), system=(str(system),))
    assert needs.aliases == [(str(linked), str(system / "bin"))]


def test_a_fifo_as_pyvenv_cfg_is_not_waited_on(tmp_path: Path) -> None:
    """A FIFO where a venv's ``pyvenv.cfg`` belongs (a cloned project's venv) is not
    read: opening it for reading would wait for a writer for ever."""
    venv, _ = _venv(tmp_path)
    cfg = venv / "pyvenv.cfg"
    cfg.unlink()
    os.mkfifo(cfg)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        found = pool.submit(find_runtime_paths, "x", str(venv / "bin" / "python"))
        try:
            needs = found.result(timeout=10)
        finally:  # a reader stuck in open() (the old code) gets its writer, and ends
            writer = os.open(cfg, os.O_WRONLY | os.O_NONBLOCK) if not found.done() else -1
            if writer >= 0:
                os.close(writer)
    assert needs.paths  # found the other way: through the link to its base
