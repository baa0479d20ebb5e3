"""Class 3 of the second review: a trust pin must cover every file that will run.

A trusted project-local extension whose directory links to code elsewhere in the
project (``helper.py -> ../../../scripts/helper.py``, or a whole directory), or
whose manifest names a script outside its directory, used to keep running after
the agent's own ``bash`` changed that code: the pin covered the link's text, not
what it points to. Here the change is made the way the attack made it: a real
``corral run`` (offline model, ``--sandbox required``) whose ``bash`` call edits
the file; the next ``corral run`` must refuse to start the extension until the
user trusts it again. As root and as an unprivileged user, every extension under
bwrap.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from helpers.trust_harness import RUN, Site

import sandbox
from agent._tools.bash import BashTool
from agent._tools.confine import Workspace
from agent._tools.mcp import Origin, load_config, project_config_path
from agent._tools.mcp.trust import McpTrust, code_paths, entry_digest, pin_digest
from supervisor import TrustStore, load_manifest

pytestmark = pytest.mark.slow

COMMAND = "corral ext trust .corral/extensions/linked"


def _scripts(site: Site) -> Path:
    scripts = site.project / "scripts"
    (scripts / "lib").mkdir(parents=True, exist_ok=True)
    (scripts / "helper.py").write_text("VALUE = 1\n")
    (scripts / "lib" / "mod.py").write_text("VALUE = 2\n")
    (scripts / "tool.py").write_text("VALUE = 3\n")
    return scripts


def _file_link(ext: Path) -> None:
    (ext / "helper.py").symlink_to("../../../scripts/helper.py")


def _dir_link(ext: Path) -> None:
    (ext / "lib").symlink_to("../../../scripts/lib")


def _dangling_link(ext: Path) -> None:
    (ext / "later.py").symlink_to("../../../scripts/later.py")


def _absolute_link(ext: Path) -> None:
    (ext / "helper.py").symlink_to(ext.parents[2] / "scripts" / "helper.py")


def _chained_link(ext: Path) -> None:
    # A link to a link inside, which leads out: still followed to the code.
    (ext / "inner.py").symlink_to("../../../scripts/helper.py")
    (ext / "helper.py").symlink_to("inner.py")


#: (id, how the extension reaches outside code, extra manifest fields, the bash edit)
CASES: list[tuple[str, Callable[[Path], None] | None, dict[str, object], str]] = [
    ("file-link", _file_link, {}, "echo 'VALUE = 666' >> scripts/helper.py"),
    ("file-link-replaced", _file_link, {}, "rm scripts/helper.py && echo x > scripts/helper.py"),
    ("absolute-link", _absolute_link, {}, "echo 'VALUE = 666' >> scripts/helper.py"),
    ("chained-link", _chained_link, {}, "echo 'VALUE = 666' >> scripts/helper.py"),
    ("dir-link-edit", _dir_link, {}, "echo 'VALUE = 666' >> scripts/lib/mod.py"),
    ("dir-link-new-file", _dir_link, {}, "echo 'import os' > scripts/lib/sitecustomize.py"),
    ("dir-link-subdir", _dir_link, {}, "mkdir scripts/lib/pkg && touch scripts/lib/pkg/x.py"),
    ("dangling-link-created", _dangling_link, {}, "echo 'VALUE = 666' > scripts/later.py"),
    ("args-script", None, {"args": ["../../../scripts/tool.py"]}, "echo x >> scripts/tool.py"),
    ("args-option", None, {"args": ["--script=../../../scripts/tool.py"]},
     "echo x >> scripts/tool.py"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("how", "manifest", "edit"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_editing_linked_code_asks_again(
    site: Site, how: Callable[[Path], None] | None, manifest: dict[str, object], edit: str
) -> None:
    _scripts(site)
    ext = site.extension(site.local, "linked", **manifest)
    if how is not None:
        how(ext)
    site.give()
    trusted = site.corral("ext", "trust", "-y", "linked")
    assert trusted.returncode == 0, trusted.stderr
    first = site.corral(*RUN, f"run `{edit}`")
    assert first.returncode == 0, first.stderr
    assert site.report(ext) is not None  # trusted: it ran in the first session
    (site.data(ext) / "report.json").unlink()
    # The agent's bash changed code the extension runs; the next session must ask.
    again = site.corral(*RUN, "hi")
    assert again.returncode == 1, (again.stdout, again.stderr)
    assert "changed since it was trusted" in again.stderr
    assert again.stderr.strip().endswith(f"run: {COMMAND}")
    assert site.report(ext) is None


def test_the_trust_screen_shows_links_out_as_pinned(site: Site) -> None:
    _scripts(site)
    ext = site.extension(site.local, "linked")
    _file_link(ext)
    _dir_link(ext)
    site.give()
    shown = site.corral("ext", "trust", "-y", "linked")
    assert shown.returncode == 0, shown.stderr
    assert (
        "link out     helper.py -> ../../../scripts/helper.py (pinned: what it points to now)"
        in (shown.stdout)
    )
    assert "link out     lib -> ../../../scripts/lib (pinned" in shown.stdout


def test_the_digest_follows_links_out_to_files_and_directories(site: Site) -> None:
    scripts = _scripts(site)
    ext = site.extension(site.local, "linked")
    _file_link(ext)
    _dir_link(ext)
    _dangling_link(ext)
    spec = load_manifest(ext / "extension.json", "project")
    tree = TrustStore(site.corral_home).digest(spec)
    targets = {e.path: e.payload for e in tree.entries if e.kind.value == "t"}
    assert targets["helper.py"].startswith("file:")
    assert targets["lib"] == "dir"
    assert targets["later.py"] == "missing"
    assert tree.entry("lib/mod.py") is not None  # the directory's tree, under the link
    manifest = json.loads((ext / "extension.json").read_text())
    assert manifest["exec"] == "./squat.py"
    # Nothing else of the project is digested.
    assert not any(str(scripts / "tool.py") in e.path for e in tree.entries)


# -- project MCP servers whose entry runs a script from the repository ------------------


def _mcp_project(base: Path, args: list[str]) -> tuple[Path, Path]:
    home, project = base / "home", base / "home" / "project"
    (project / "mcp").mkdir(parents=True)
    (project / ".corral").mkdir()
    (home / "state").mkdir(parents=True)
    (project / "mcp" / "server.py").write_text("import lib\n")
    (project / "mcp" / "lib.py").write_text("VALUE = 1\n")
    (project / "server.py").write_text("VALUE = 2\n")
    (project / "README.md").write_text("readme\n")
    entry = {"command": sys.executable, "args": args}
    (project / ".corral" / "mcp.json").write_text(json.dumps({"mcpServers": {"srv": entry}}))
    return home, project


#: (id, args of the entry, the bash edit, whether it must ask again)
MCP_CASES = [
    ("script-edited", ["mcp/server.py"], "echo 'import os' >> mcp/server.py", True),
    ("sibling-edited", ["mcp/server.py"], "echo 'VALUE = 666' >> mcp/lib.py", True),
    ("sibling-added", ["mcp/server.py"], "echo 'import os' > mcp/sitecustomize.py", True),
    ("absolute-path", ["{project}/mcp/server.py"], "echo x >> mcp/lib.py", True),
    ("option-form", ["--script={project}/mcp/server.py"], "echo x >> mcp/lib.py", True),
    ("root-script", ["server.py"], "echo 'VALUE = 666' >> server.py", True),
    ("unrelated-edit", ["mcp/server.py"], "echo more >> README.md", False),
]


@pytest.mark.parametrize(
    ("args", "edit", "asks"), [c[1:] for c in MCP_CASES], ids=[c[0] for c in MCP_CASES]
)
async def test_editing_an_mcp_servers_script_asks_again(
    args: list[str], edit: str, asks: bool
) -> None:
    backend = sandbox.select_sandbox("auto")
    if backend.backend != "bwrap":
        pytest.skip("no bwrap backend here")
    base = Path(tempfile.mkdtemp(prefix="corral-mcp-trust-", dir="/var/tmp"))
    try:
        home, project = _mcp_project(base, [])
        entry_args = [a.format(project=project) for a in args]
        entry = {"command": sys.executable, "args": entry_args}
        (project / ".corral" / "mcp.json").write_text(json.dumps({"mcpServers": {"srv": entry}}))
        trust = McpTrust(home)
        (decl,) = load_config(project_config_path(project), Origin.PROJECT)[0]
        trust.trust(decl)
        assert trust.problem(decl) is None
        ws = Workspace(str(project), corral_home=str(home / "corral"), home=str(home))
        bash = BashTool(ws, sandbox=backend, default_timeout=60)

        async def progress(_: str) -> None:
            pass

        with trio.fail_after(90):
            result = await bash.run("c1", {"command": edit}, progress)
        assert not result.is_error, result
        why = trust.problem(decl)
        if asks:
            assert why is not None
            assert "changed since it was trusted" in why
            assert "corral tools mcp trust srv" in why
        else:
            assert why is None
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_mcp_pins_name_the_code(tmp_path: Path) -> None:
    _, project = _mcp_project(tmp_path, ["mcp/server.py", "server.py", "--data=."])
    (decl,) = load_config(project_config_path(project), Origin.PROJECT)[0]
    real = os.path.realpath(project)
    assert code_paths(decl) == [f"{real}/mcp", f"{real}/server.py"]
    assert pin_digest(decl) != entry_digest(decl)
    # A server that runs nothing from the project pins its entry alone (old pins hold).
    entry = {"command": sys.executable, "args": ["-m", "http.server"]}
    (project / ".corral" / "mcp.json").write_text(json.dumps({"mcpServers": {"srv": entry}}))
    (plain,) = load_config(project_config_path(project), Origin.PROJECT)[0]
    assert code_paths(plain) == []
    assert pin_digest(plain) == entry_digest(plain)


def test_a_tool_hosts_modules_outside_its_directory_are_pinned(tmp_path: Path) -> None:
    scripts = tmp_path / "project" / "scripts"
    scripts.mkdir(parents=True)
    (scripts / "tools.py").write_text("VALUE = 1\n")
    host = tmp_path / "project" / ".corral" / "extensions" / "th"
    host.mkdir(parents=True)
    (host / "local.py").write_text("VALUE = 2\n")
    manifest = {
        "name": "th",
        "kind": "tool-host",
        "runtime": "python",
        "config": {"modules": ["local.py", "../../../scripts/tools.py"]},
    }
    (host / "extension.json").write_text(json.dumps(manifest))
    spec = load_manifest(host / "extension.json", "project")
    store = TrustStore(tmp_path / "home")
    before = store.digest(spec).digest
    (scripts / "tools.py").write_text("VALUE = 666\n")  # as the agent's bash would
    assert store.digest(spec).digest != before
