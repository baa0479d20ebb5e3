"""A bare ``exec`` (``node``, ``python3``, ``npx``) is a program on PATH, as in the seed's
reference implementation; ``hello_ack`` says where the extension lives and persists.

The extensions are written to the reference's shapes (no SDK; its clock example's
manifest: ``"exec": "node"``, ``"args": ["index.js"]``, ``"language": "javascript"``)
and run under bwrap with ``--sandbox required``: as root under ``./dev test``, and as
the unprivileged user in CI's second run.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.supkit import Kit, require_bwrap

from supervisor import (
    ExtensionState,
    ManifestError,
    SupervisorClient,
    TrustStore,
    data_dir,
    describe_program,
    identity_of,
    load_manifest,
)

SHAPES = Path(__file__).with_name("refshapes")
CYCLE = 60.0
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not on PATH")


@asynccontextmanager
async def _sandboxed(kit: Kit, ext: Path, **config: Any) -> AsyncIterator[SupervisorClient]:
    require_bwrap()
    settings = {"sandbox": "required", "handshake_timeout": 20, "command_timeout": 30} | config
    async with kit.open(ext, config=kit.config(**settings)) as client:
        yield client


def _node_ext(kit: Kit, name: str = "refnode", **manifest: Any) -> Path:
    ext = kit.write(name, "node", ["index.js"], language="javascript", **manifest)
    shutil.copy(SHAPES / "refnode.js", ext / "index.js")
    if name != "refnode":
        text = (ext / "index.js").read_text().replace('"refnode"', json.dumps(name))
        (ext / "index.js").write_text(text)
    return ext


@needs_node
async def test_a_node_extension_by_bare_name_runs_sandboxed(kit: Kit) -> None:
    ext = _node_ext(kit)
    spec = kit.spec(ext, "cli")
    assert NODE is not None
    assert spec.exec_path == os.path.normpath(NODE)
    assert describe_program(spec).endswith("(found on PATH)")
    with trio.fail_after(CYCLE):
        async with _sandboxed(kit, ext) as client:
            (info,) = await client.list_extensions()
            assert info.state is ExtensionState.RUNNING, info.problem
            assert (info.sandboxed, info.backend) == (True, "bwrap")
            where = json.loads((await client.invoke_command("where")).display)
            first = (await client.invoke_command("save", "one")).display
            second = (await client.invoke_command("save", "two")).display
    # Node itself runs the script: never `node /usr/bin/node index.js`.
    assert where["execPath"] == os.path.realpath(NODE)
    assert where["argv"][1:] == [str(ext / "index.js")]
    ack = where["ack"]
    stored = data_dir(kit.home, identity_of("refnode", str(ext)))
    assert (ack["extension_dir"], ack["data_dir"]) == (str(ext), str(stored))
    assert (first, second) == ("one\n", "one\ntwo\n")
    assert (stored / "notes.txt").read_text() == "one\ntwo\n"  # on the host, kept


@needs_node
async def test_hello_ack_omits_data_dir_when_there_is_none(kit: Kit) -> None:
    ext = _node_ext(kit, permissions={"data_dir": False})
    with trio.fail_after(CYCLE):
        async with _sandboxed(kit, ext) as client:
            ack = json.loads((await client.invoke_command("where")).display)["ack"]
    assert ack["extension_dir"] == str(ext)
    assert "data_dir" not in ack


async def test_a_bare_python3_is_corrals_python_and_persists_in_data_dir(kit: Kit) -> None:
    ext = kit.write("refpy", "python3", ["main.py"], language="python")
    shutil.copy(SHAPES / "refpy.py", ext / "main.py")
    spec = kit.spec(ext, "global")
    assert (spec.exec_lookup, spec.exec_path) == ("python", os.path.abspath(sys.executable))
    # corral's own interpreter is not the extension's code: not pinned.
    assert TrustStore(kit.home).digest(spec).entry(os.path.realpath(sys.executable)) is None
    with trio.fail_after(CYCLE):
        async with _sandboxed(kit, ext) as client:
            (info,) = await client.list_extensions()
            assert info.sandboxed, info.problem
            answer = json.loads((await client.invoke_command("save", "kept")).display)
    assert answer["executable"] == os.path.abspath(sys.executable)
    assert answer["text"] == "kept\n"
    assert answer["ack"]["data_dir"] == str(data_dir(kit.home, identity_of("refpy", str(ext))))


def test_npx_without_the_network_is_told_at_load_time(kit: Kit) -> None:
    if shutil.which("npx") is None:
        pytest.skip("npx is not on PATH")
    ext = kit.write("refnpx", "npx", ["-y", "tsx", "./index.ts"])
    note = kit.spec(ext).exec_note
    assert "npx fetches 'tsx' from the npm registry" in note
    assert "permissions.network" in note
    granted = kit.write("granted", "npx", ["-y", "tsx"], permissions={"network": True})
    assert kit.spec(granted).exec_note == ""


async def test_npx_without_the_network_says_so_when_it_times_out(kit: Kit) -> None:
    if shutil.which("npx") is None:
        pytest.skip("npx is not on PATH")
    ext = kit.write("refnpx", "npx", ["-y", "tsx", "./index.ts"])
    (ext / "index.ts").write_text("console.log('never reached')\n")
    with trio.fail_after(CYCLE):
        # npx without a network retries its DNS for a minute, silently.
        async with _sandboxed(kit, ext, handshake_timeout=2) as client:
            (info,) = await client.list_extensions()
    assert info.state is ExtensionState.FAILED
    assert info.problem.startswith("no hello within 2 s; npx fetches 'tsx'")
    assert "permissions.network" in info.problem


@needs_node
async def test_a_unix_socket_refused_names_the_permission(kit: Kit) -> None:
    ext = kit.write("refsock", "node", ["sock.js"], restart="never")
    shutil.copy(SHAPES / "sock.js", ext / "sock.js")
    with trio.fail_after(CYCLE):
        async with _sandboxed(kit, ext, handshake_timeout=5) as client:
            while True:
                (info,) = await client.list_extensions()
                if info.problem:
                    break
                await trio.sleep(0.05)
    assert "could not open the unix socket /tmp/refsock-" in info.problem
    assert '"network": true' in info.problem


def _executable(path: Path, body: str = "#!/bin/sh\nexit 0\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def test_path_entries_in_the_project_or_the_extension_are_never_used(
    kit: Kit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "cloned"
    ext = kit.write("runner", "mytool", where=project / ".corral" / "extensions")
    planted = project / "node_modules" / ".bin"
    _executable(planted / "mytool")  # what a cloned repository can plant
    _executable(ext / "bin" / "mytool")
    real = tmp_path / "system" / "bin"
    _executable(real / "mytool")
    monkeypatch.setenv(
        "PATH", os.pathsep.join(["", ".", str(planted), str(ext / "bin"), str(real)])
    )
    spec = load_manifest(ext, "project", home=str(kit.home))
    assert (spec.exec_lookup, spec.exec_path) == ("path", str(real / "mytool"))
    # Pinned like any program outside the directory: an upgrade asks trust again.
    assert TrustStore(kit.home).digest(spec).entry(str(real / "mytool")) is not None

    monkeypatch.setenv("PATH", os.pathsep.join([str(planted), str(ext / "bin")]))
    with pytest.raises(ManifestError) as refused:
        load_manifest(ext, "project", home=str(kit.home))
    assert "'mytool' is neither a file in" in refused.value.message
    assert f"{planted / 'mytool'} (inside {project})" in refused.value.message
    assert f"{ext / 'bin' / 'mytool'} (inside {ext})" in refused.value.message


def test_a_file_in_the_directory_wins_over_path(kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    ext = kit.write("local", "mytool")
    _executable(ext / "mytool")
    other = kit.root / "elsewhere"
    _executable(other / "mytool")
    monkeypatch.setenv("PATH", str(other))
    spec = kit.spec(ext)
    assert (spec.exec_lookup, spec.exec_path) == ("", str(ext / "mytool"))
    assert describe_program(spec) == "mytool"


async def test_a_version_manager_shim_on_path_is_refused_with_the_fix(
    kit: Kit, monkeypatch: pytest.MonkeyPatch
) -> None:
    shims = kit.root / "pyenv" / "shims"
    _executable(shims / "mytool", '#!/bin/sh\nexec pyenv exec mytool "$@"\n')
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}/usr/bin{os.pathsep}/bin")
    ext = kit.write("shimmed", "mytool")
    with trio.fail_after(CYCLE):
        async with _sandboxed(kit, ext) as client:
            (info,) = await client.list_extensions()
    assert info.state is ExtensionState.FAILED
    assert "is a version-manager shim" in info.problem
