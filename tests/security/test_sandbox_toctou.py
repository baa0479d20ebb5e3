"""Class 1: a path changed after validation is never bound; the extension is quarantined.

Real attacking extensions (``attacks/agent.py``) under the real supervisor with
bwrap: an accomplice (or another program) swaps a directory for a symlink to the
user's vault while the victim runs; the victim then crashes, or the host reloads.
Before, bwrap re-resolved the path at the restart and bound the vault (or the
host's ``/``). Also: a symlink planted in one session is refused by the next
session's validation.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import msgspec
import pytest
import trio
from helpers.supervised import CYCLE, Lab, act, crash, info, wait_for

from sandbox import GrantChanged, LaunchRequest, Permissions, select_sandbox, spawn
from sandbox._bwrap import BwrapSandbox
from supervisor import Quarantined, SupervisorClient


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return Lab(tmp_path)


def _starts(lab: Lab, name: str) -> int:
    log = lab.log(name)
    return log.read_text().count("[corral] started pid") if log.exists() else 0


async def _crash_and_expect_quarantine(client: SupervisorClient, name: str) -> Quarantined:
    events = client.subscribe()
    await crash(client, name)
    event = await wait_for(events, Quarantined, lambda e: e.extension == name)
    assert (await info(client, name)).state == "quarantined"
    return event


@pytest.mark.parametrize("mode", ["read_only", "read_write"])
async def test_grant_swapped_by_an_accomplice_is_not_bound_after_a_crash(
    lab: Lab, mode: str
) -> None:
    shared = lab.dir("shared")
    inner = shared / "x" / "keys"
    inner.mkdir(parents=True)
    (inner / "note").write_text("innocent\n")
    digger = lab.extension("digger", read_write=[str(shared)])
    reacher = lab.extension("reacher", **{mode: [str(inner)]})
    with trio.fail_after(CYCLE):
        async with lab.open(digger, reacher) as client:
            assert await act(client, "reacher", "look", path=str(inner)) == {"ok": ["note"]}
            # The accomplice turns a directory on the way into a symlink to the vault:
            # shared/x/keys now names vault/keys on the host.
            swapped = await act(
                client, "digger", "swap", path=str(shared / "x"), target=str(lab.vault)
            )
            assert swapped == {"ok": "swapped"}
            assert (shared / "x").is_symlink()
            assert (inner / "id_rsa").read_text().startswith(lab.token)
            event = await _crash_and_expect_quarantine(client, "reacher")
    assert str(inner) in event.reason
    assert "changed since it was validated" in event.reason
    assert "symlink" in event.reason
    # Never started again, so it never saw the vault; the quarantine outlives the host.
    assert _starts(lab, "reacher") == 1
    assert "changed since it was validated" in lab.quarantine("reacher").read_text()


async def test_swapped_data_directory_is_not_bound_after_a_crash(lab: Lab) -> None:
    reacher = lab.extension("reacher")
    data = lab.data_dir("reacher")
    with trio.fail_after(CYCLE):
        async with lab.open(reacher) as client:
            assert await act(client, "reacher", "look", path=str(data)) == {"ok": []}
            # Someone else (another tool of the user's, an unsandboxed run) swaps it.
            os.rename(data, f"{data}.orig")
            data.symlink_to(lab.vault / "keys")
            event = await _crash_and_expect_quarantine(client, "reacher")
    assert str(data) in event.reason
    assert _starts(lab, "reacher") == 1


async def test_swapped_extension_directory_is_not_bound_after_a_crash(lab: Lab) -> None:
    reacher = lab.extension("reacher")
    # An impostor with the same name and a manifest granting the vault.
    impostor = lab.exts / "impostor"
    shutil.copytree(reacher, impostor)
    lab.manifest(impostor, "reacher", read_only=[str(lab.vault)])
    with trio.fail_after(CYCLE):
        async with lab.open(reacher) as client:
            os.rename(reacher, f"{reacher}.orig")
            reacher.symlink_to(impostor)
            event = await _crash_and_expect_quarantine(client, "reacher")
    assert str(reacher) in event.reason
    assert _starts(lab, "reacher") == 1


async def test_grant_swapped_before_a_reload_quarantines_it(lab: Lab) -> None:
    shared = lab.dir("shared")
    inner = shared / "x" / "keys"
    inner.mkdir(parents=True)
    digger = lab.extension("digger", read_write=[str(shared)])
    reacher = lab.extension("reacher", read_only=[str(inner)])
    with trio.fail_after(CYCLE):
        async with lab.open(digger, reacher) as client:
            events = client.subscribe()
            await act(client, "digger", "swap", path=str(shared / "x"), target=str(lab.vault))
            stats = await client.reload()
            event = await wait_for(events, Quarantined, lambda e: e.extension == "reacher")
            status = await info(client, "reacher")
    # The manifest says the same; the disk does not: the user decides (ext enable).
    assert str(inner) in event.reason
    assert str(lab.vault / "keys") in event.reason
    assert status.state == "quarantined"
    assert stats.ready == 1  # the accomplice only
    assert _starts(lab, "reacher") == 1


async def test_symlink_planted_in_its_own_directory_is_refused_next_session(lab: Lab) -> None:
    # An extension whose author asked (and the user accepted) to write its own dir.
    planter = lab.extension("planter", read_write=["."], unsafe=["."])
    with trio.fail_after(CYCLE):
        async with lab.open(planter) as client:
            planted = await act(
                client, "planter", "plant", path=str(planter / "assets"), target=str(lab.vault)
            )
            assert planted == {"ok": "planted"}
            # It rewrites its own manifest to reach the vault through the planted link.
            permissions = {"read_write": ["."], "unsafe": ["."], "read_only": ["assets/keys"]}
            manifest = {"name": "planter", "exec": "agent.py", "language": "python"}
            text = msgspec.json.encode({**manifest, "permissions": permissions}).decode()
            path = str(planter / "extension.json")
            assert await act(client, "planter", "write", path=path, text=text) == {"ok": "written"}
    # The next session validates the new manifest and refuses the grant.
    with trio.fail_after(CYCLE):
        async with lab.open(planter) as client:
            (status,) = await client.list_extensions()
    assert status.state != "running"
    assert "permissions.read_only[0]" in status.problem
    assert "lies inside" in status.problem or "symlink" in status.problem
    assert _starts(lab, "planter") == 1


async def test_symlink_planted_in_a_writable_grant_is_refused_next_session(lab: Lab) -> None:
    work = lab.dir("work")
    planter = lab.extension("planter", read_write=[str(work)])
    with trio.fail_after(CYCLE):
        async with lab.open(planter) as client:
            await act(client, "planter", "plant", path=str(work / "docs"), target=str(lab.vault))
            data = lab.data_dir("planter")
            await act(client, "planter", "plant", path=str(data / "docs"), target=str(lab.vault))
    assert (work / "docs" / "keys" / "id_rsa").exists()  # the link works on the host
    for through in (work / "docs" / "keys", lab.data_dir("planter") / "docs" / "keys"):
        lab.manifest(planter, "planter", read_write=[str(work)], read_only=[str(through)])
        with trio.fail_after(CYCLE):
            async with lab.open(planter) as client:
                (status,) = await client.list_extensions()
        assert status.state != "running", through
        assert "permissions.read_only[0]" in status.problem
        assert "goes through a symlink" in status.problem
    assert _starts(lab, "planter") == 1


async def test_bwrap_without_bind_fd_still_refuses_a_swapped_grant(lab: Lab) -> None:
    """An old bwrap binds by name, right after the same check: a swap is still caught."""
    backend = select_sandbox("required", cgroups=False)
    assert isinstance(backend, BwrapSandbox)
    old = BwrapSandbox(msgspec.structs.replace(backend.config, bind_fd=False))
    shared = lab.dir("shared")
    (shared / "x").mkdir()
    ext = lab.extension("reacher")
    request = LaunchRequest(
        name="reacher",
        argv=[os.path.realpath("/usr/bin/cat"), str(shared / "x" / "note")],
        env={"PATH": "/usr/bin:/bin"},
        ext_dir=str(ext),
        data_dir=None,
        permissions=Permissions(read_only=[str(shared / "x")]),
    )
    (shared / "x" / "note").write_text("bound by name\n")
    plan = old.plan(request)
    try:
        assert "--ro-bind-fd" not in plan.argv
        assert any("cannot bind descriptors" in n for n in plan.notes)
        proc = spawn(plan)
        out, err = proc.communicate(timeout=CYCLE)
        assert out == b"bound by name\n", err
    finally:
        old.cleanup(plan)
    os.rename(shared / "x", shared / "x.orig")
    (shared / "x").symlink_to(lab.vault / "keys")
    with pytest.raises(GrantChanged, match="changed since it was validated"):
        old.plan(msgspec.structs.replace(request, pins=plan.pins))
