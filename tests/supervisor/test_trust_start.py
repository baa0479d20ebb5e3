"""The supervisor starts project-local and installed extensions only while they are trusted.

Real extensions over real pipes; the trust pins are made as ``corral ext trust`` makes
them (``Kit.trust``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from helpers.supkit import CYCLE, Kit, wait_for

from supervisor import (
    ExtensionCrashed,
    ExtensionGone,
    Quarantined,
    ToolsChanged,
    data_dir,
    log_file,
    quarantine_file,
)

#: Writes what it finds in its data directory into it, then serves until shutdown.
MARKER = """\
data = os.environ["CORRAL_DATA_DIR"]
seen = sorted(os.listdir(data))
sys.stderr.write(f"data dir holds {seen}\\n")
open(os.path.join(data, "started"), "w").close()
emit({"type": "hello", "name": NAME, "version": "1.0.0"})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "shutdown":
        break
"""

#: Reports its data directory on stderr and crashes at once, every time.
CRASHER = """\
sys.stderr.write(f"data dir holds {sorted(os.listdir(os.environ['CORRAL_DATA_DIR']))}\\n")
sys.exit(3)
"""


def _dirs(kit: Kit, tmp_path: Path) -> tuple[Path, Path, Path]:
    project = tmp_path / "proj"
    return project, project / ".corral" / "extensions", kit.home / "extensions"


async def test_untrusted_extensions_are_listed_never_started(kit: Kit, tmp_path: Path) -> None:
    project, local, glob = _dirs(kit, tmp_path)
    cli = kit.inline("named", MARKER)
    proj = kit.inline("planted", MARKER, where=local)
    inst = kit.inline("copied", MARKER, where=glob)
    with trio.fail_after(CYCLE):
        async with kit.open(cli, discover=True, project_dir=str(project)) as client:
            infos = {i.name: i for i in await client.list_extensions()}
    assert infos["named"].state == "running"  # --ext: trusted for the run
    for name, spec_dir in (("planted", proj), ("copied", inst)):
        info = infos[name]
        assert info.state == "untrusted"
        assert info.pid is None
        assert "is not trusted" in info.problem
        assert "corral ext trust" in info.problem
        assert str(spec_dir) in info.problem or spec_dir.name in info.problem
    started = sorted(p.parent.name for p in (kit.home / "data").glob("*/started"))
    assert len(started) == 1
    assert started[0].startswith("named-")


async def test_trusted_ones_start_and_a_change_is_caught_before_a_restart(kit: Kit) -> None:
    glob = kit.home / "extensions"
    ext = kit.chaos("flaky", "--crash-after", "1", where=glob)
    kit.trust(ext)
    with trio.fail_after(CYCLE):
        async with kit.open(discover=True) as client:
            (info,) = await client.list_extensions()
            assert info.state == "running"
            events = client.subscribe()
            (ext / "added-meanwhile.py").write_text("import os\n")
            with pytest.raises(ExtensionGone):
                await client.call_tool("chaos_echo", {"text": "boom"})
            await wait_for(events, ExtensionCrashed)
            await wait_for(events, ToolsChanged, lambda e: not e.tools)
            (info,) = await client.list_extensions()
    assert info.state == "untrusted"
    assert "changed since it was trusted" in info.problem
    log = log_file(kit.home, kit.spec(ext).identity).read_text()
    assert "not started: extension flaky" in log


async def test_a_squatter_gets_its_own_data_log_and_quarantine(kit: Kit, tmp_path: Path) -> None:
    project, local, glob = _dirs(kit, tmp_path)
    installed = kit.inline("dup", MARKER, where=glob)
    squatter = kit.inline("dup", CRASHER, where=local)
    kit.trust(installed)
    kit.trust(squatter, source="project")  # even trusted, it is another extension
    own = kit.spec(installed)
    theirs = kit.spec(squatter, "project")
    secret = data_dir(kit.home, own.identity) / "api-token"
    secret.parent.mkdir(parents=True)
    secret.write_text("installed one's secret")

    with trio.fail_after(CYCLE):
        async with kit.open(discover=True, project_dir=str(project)) as client:
            events = client.subscribe()
            infos = await client.list_extensions()
            if not any(i.state == "quarantined" for i in infos):
                await wait_for(events, Quarantined, timeout=CYCLE)
            infos = await client.list_extensions()
    by_path = {i.path: i for i in infos}
    assert by_path[str(squatter)].state == "quarantined"
    assert by_path[str(installed)].state == "duplicate"
    assert quarantine_file(kit.home, theirs.identity).exists()
    assert not quarantine_file(kit.home, own.identity).exists()
    squatter_log = log_file(kit.home, theirs.identity).read_text()
    assert "data dir holds []" in squatter_log
    assert "api-token" not in squatter_log
    assert not log_file(kit.home, own.identity).exists()

    # Without the project, the installed one runs, unquarantined, with its data.
    with trio.fail_after(CYCLE):
        async with kit.open(discover=True) as client:
            (info,) = await client.list_extensions()
    assert info.state == "running"
    assert "data dir holds ['api-token']" in log_file(kit.home, own.identity).read_text()
