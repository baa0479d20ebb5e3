"""Class 4 of the second review: one list of credential stores, hidden everywhere.

The ``bash`` sandbox used to hide a shorter list than the grant rules refuse
(browser profiles, ``gh``'s ``hosts.yml``, cargo's credentials, the vault token,
shell histories, ``/etc/shadow`` as root, other users' homes were readable). Now
there is one list (:func:`sandbox.credential_paths`); these tests enumerate it:
every entry is planted with a secret in a fake home, as a directory and as a
file, and must be invisible to a real ``bash`` under bubblewrap, refused as a
grant (read-only, without ``unsafe``), and refused by the file tools.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import sandbox
from agent import TextContent
from agent._tools.bash import BashTool
from agent._tools.confine import Workspace
from agent._tools.files import ReadTool
from sandbox import HOME_STORES, SYSTEM_STORES, Permissions, PermissionsError

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend")


class Home:
    """A fake home with every credential store planted, a project, corral's home."""

    def __init__(self, base: Path, as_dirs: bool | None) -> None:
        """``as_dirs``: plant each store as a directory, or as a file; None: none."""
        self.home = base / "alice"
        self.project = self.home / "project"
        self.corral_home = self.home / ".local" / "state" / "corral"
        self.project.mkdir(parents=True)
        self.corral_home.mkdir(parents=True)
        self.secrets: dict[str, str] = {}
        for i, entry in enumerate(HOME_STORES if as_dirs is not None else ()):
            secret = f"SECRET-{i}-{uuid.uuid4().hex[:8]}"
            self.secrets[entry] = secret
            where = self.home / entry
            if as_dirs:
                where.mkdir(parents=True, exist_ok=True)
                (where / "token").write_text(secret + "\n")
            else:
                where.parent.mkdir(parents=True, exist_ok=True)
                where.write_text(secret + "\n")

    def bash(self) -> BashTool:
        backend = sandbox.select_sandbox("auto")
        if backend.backend != "bwrap":
            pytest.skip("no bwrap backend here")
        ws = Workspace(str(self.project), corral_home=str(self.corral_home), home=str(self.home))
        return BashTool(ws, sandbox=backend, default_timeout=60, output_limit=1 << 20)


def _base() -> Path:
    # Not /tmp: the shell has a private one.
    return Path(tempfile.mkdtemp(prefix="corral-creds-", dir="/var/tmp"))


@pytest.fixture(params=["as-dirs", "as-files"])
def planted(request: pytest.FixtureRequest) -> Iterator[Home]:
    base = _base()
    try:
        yield Home(base, as_dirs=request.param == "as-dirs")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def bare() -> Iterator[Home]:
    """A home with no store of its own (what the machine holds is still there)."""
    base = _base()
    try:
        yield Home(base, as_dirs=None)
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def _sh(tool: BashTool, command: str) -> str:
    async def progress(_: str) -> None:
        pass

    with trio.fail_after(90):
        result = await tool.run("c1", {"command": command}, progress)
    return " ".join(b.text for b in result.content if isinstance(b, TextContent))


def test_the_list_is_well_formed() -> None:
    for entry in HOME_STORES:
        assert not entry.startswith("/"), entry
        assert ".." not in entry.split("/"), entry
        others = [o for o in HOME_STORES if o != entry]
        assert not any(entry.startswith(o + "/") for o in others), f"{entry} is inside another"
    assert len(set(HOME_STORES)) == len(HOME_STORES)
    for path in SYSTEM_STORES:
        assert path.startswith("/"), path
    # What the issue names, at least.
    for needed in (
        ".ssh", ".gnupg", ".aws", ".config/gcloud", ".azure", ".oci", ".kube", ".docker",
        ".netrc", ".git-credentials", ".config/gh", ".config/glab-cli", ".cargo/credentials.toml",
        ".npmrc", ".pypirc", ".vault-token", ".terraform.d", ".m2/settings.xml",
        ".gradle/gradle.properties", ".password-store", ".local/share/keyrings", ".mozilla",
        ".config/google-chrome", ".bash_history", ".zsh_history", ".python_history",
        ".node_repl_history", ".psql_history", ".mysql_history",
    ):  # fmt: skip
        assert needed in HOME_STORES, needed
    for needed in ("/etc/shadow", "/etc/gshadow"):
        assert needed in SYSTEM_STORES


async def test_every_home_store_is_hidden_from_bash(planted: Home) -> None:
    # One shell looks at every entry: a leak prints the entry's name.
    lines = [
        f'if grep -rqs -- {secret} "$H/{entry}"; then echo "LEAK {entry}"; fi'
        for entry, secret in planted.secrets.items()
    ]
    script = f"H={planted.home}\n" + "\n".join(lines) + "\necho checked"
    out = await _sh(planted.bash(), script)
    assert out.rstrip().endswith("checked"), out
    assert [line for line in out.splitlines() if line.startswith("LEAK")] == []
    # Outside the sandbox the same files are there (the test planted real secrets).
    entry, secret = next(iter(planted.secrets.items()))
    where = planted.home / entry
    assert secret in (where / "token" if where.is_dir() else where).read_text()


async def test_readable_system_stores_are_hidden_from_bash(bare: Home) -> None:
    readable = [p for p in SYSTEM_STORES if os.path.exists(p) and os.access(p, os.R_OK)]
    if os.geteuid() == 0:
        assert "/etc/shadow" in readable  # the case the review found
    checks = [
        f'if [ -d {p} ]; then echo "{p} $(ls -A {p} | wc -l)"; '
        f'else echo "{p} $(cat {p} 2>/dev/null | wc -c)"; fi'
        for p in readable
    ]
    out = await _sh(bare.bash(), "\n".join([*checks, "echo checked"]))
    assert out.rstrip().endswith("checked"), out
    for p in readable:
        assert f"{p} 0" in out.splitlines(), (p, out)


@pytest.fixture
def other_home() -> Iterator[Path]:
    """As root: another user's home with a key in it (removed afterwards)."""
    if os.geteuid() != 0:
        pytest.skip("only root can plant another user's home here")
    where = Path("/home") / f"corral-other-{uuid.uuid4().hex[:8]}"
    (where / ".ssh").mkdir(parents=True)
    (where / ".ssh" / "id_ed25519").write_text("OTHER-USER-KEY\n")
    (where / "notes.txt").write_text("OTHER-USER-NOTES\n")
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


async def test_other_users_homes_are_hidden_from_bash(other_home: Path, bare: Home) -> None:
    out = await _sh(bare.bash(), f"cat {other_home}/notes.txt {other_home}/.ssh/*; ls -A /root")
    assert "OTHER-USER" not in out
    assert str(other_home) in sandbox.other_homes(str(bare.home))


def test_unprivileged_root_home_is_a_store() -> None:
    if os.geteuid() == 0:
        pytest.skip("as root, /root is the user's own home")
    assert "/root" in sandbox.credential_paths(os.path.expanduser("~"))


def _grant(home: Path, path: str) -> str:
    ext = home.parent / "ext"
    ext.mkdir(exist_ok=True)
    with pytest.raises(PermissionsError) as caught:
        sandbox.validate_permissions(
            Permissions(read_only=[path]),
            str(ext),
            home=str(home),
            corral_home=str(home / ".local" / "state" / "corral"),
        )
    return str(caught.value)


def test_every_store_is_refused_as_a_grant(planted: Home) -> None:
    for entry in HOME_STORES:
        why = _grant(planted.home, f"~/{entry}")
        assert "holds credentials" in why, (entry, why)
        assert "permissions.unsafe" in why, (entry, why)
    for path in SYSTEM_STORES:
        if os.path.exists(path):
            why = _grant(planted.home, path)
            assert "holds credentials" in why, (path, why)
    # A folder holding one is refused too: ~/.config holds gh's hosts.yml.
    assert "contains" in _grant(planted.home, "~/.config")


def test_another_users_home_is_refused_as_a_grant(other_home: Path, bare: Home) -> None:
    assert "holds credentials" in _grant(bare.home, str(other_home))


async def test_file_tools_refuse_stores(planted: Home) -> None:
    # Confined tools cannot reach the home anyway; unconfined (a trusted setup) they
    # still refuse every store, by the same list.
    ws = Workspace(
        str(planted.project), confine=False, corral_home=str(planted.corral_home),
        home=str(planted.home),
    )  # fmt: skip
    tool = ReadTool(ws)

    async def progress(_: str) -> None:
        pass

    for entry in (".config/gh", ".cargo/credentials.toml", ".vault-token", ".bash_history"):
        where = planted.home / entry
        path = str(where / "token") if where.is_dir() else str(where)
        result = await tool.run("c1", {"path": path}, progress)
        text = " ".join(b.text for b in result.content if isinstance(b, TextContent))
        assert result.is_error, (entry, text)
        assert "holds credentials" in text
        assert planted.secrets[entry] not in text


async def test_working_in_another_users_home_hides_that_users_stores(
    other_home: Path, bare: Home
) -> None:
    # Root in alice's project: the project is visible (it is the workspace), her keys
    # are not, to bash nor to the file tools.
    project = other_home / "project"
    project.mkdir()
    (project / "code.py").write_text("print('hi')\n")
    backend = sandbox.select_sandbox("auto")
    if backend.backend != "bwrap":
        pytest.skip("no bwrap backend here")
    ws = Workspace(str(project), corral_home=str(bare.corral_home), home=str(bare.home))
    tool = BashTool(ws, sandbox=backend, default_timeout=60)
    out = await _sh(tool, "cat code.py ../.ssh/id_ed25519; echo new > made.txt && cat made.txt")
    assert "print('hi')" in out
    assert "OTHER-USER-KEY" not in out
    assert (project / "made.txt").read_text() == "new\n"

    async def progress(_: str) -> None:
        pass

    ws = Workspace(
        str(project), confine=False, corral_home=str(bare.corral_home), home=str(bare.home)
    )
    result = await ReadTool(ws).run("c1", {"path": "../.ssh/id_ed25519"}, progress)
    assert result.is_error
    text = " ".join(b.text for b in result.content if isinstance(b, TextContent))
    assert "holds credentials" in text
