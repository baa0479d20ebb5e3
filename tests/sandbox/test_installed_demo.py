"""The installed corral runs its demo under bwrap, wherever pip put it.

``pip install .`` ships the example extensions inside the venv's site-packages, so
the venv holds an extension's directory and may not be shown whole; a tool
directory may sit under the user's home or be reached through a linked
directory. Each layout installs the wheel into a fresh venv and runs the demo
with ``--sandbox required``, as root and as an unprivileged user (``who``); the
virtual environment borrows only the *dependencies* of the test environment (a
``.pth`` line; ``.pth`` files inside those directories are not processed, so the
editable corral there stays invisible).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.paths import REPO
from helpers.sandbox_harness import Identity, as_user

from agent._version import __version__

PIP = [sys.executable, "-m", "pip", "--no-input", "--disable-pip-version-check"]

#: Where the venv goes (relative to a fresh base, which is also ``$HOME``), and the
#: name it is run by: a plain venv, a pipx-style tool directory in the home, and a
#: uv-style one reached through a linked directory.
LAYOUTS = {
    "venv": ("venv", "venv"),
    "pipx": (".local/share/pipx/venvs/corral", ".local/share/pipx/venvs/corral"),
    "linked": ("real/uv/tools/corral", "link/uv/tools/corral"),
}


def _into(out: Path) -> list[str]:
    return ["-w", str(out), str(REPO)]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [*PIP, "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", *_into(out)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (found,) = out.glob("corral-*.whl")  # nothing fetched: no index is needed
    assert found.name.startswith(f"corral-{__version__}-")  # pyproject reads agent/_version.py
    return found


@pytest.fixture
def base(who: Identity) -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix="corral-installed-"))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _install(wheel: Path, base: Path, layout: str, who: Identity) -> Path:
    """A fresh venv holding the wheel, owned by ``who``; its path as it is run by."""
    real, named = LAYOUTS[layout]
    venv = base / real
    venv.parent.mkdir(parents=True, exist_ok=True)
    if named != real:
        (base / "link").symlink_to(base / "real")
    subprocess.run([who.python, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [*PIP, "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = [p for p in who.pythonpath.split(os.pathsep) if p and Path(p) != REPO]
    (Path(purelib) / "corral-test-deps.pth").write_text("\n".join(deps) + "\n")
    for path in (base, *base.rglob("*")):
        os.lchown(path, who.uid, who.gid)
    return base / named


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_installed_demo_passes_under_bwrap(
    wheel: Path, base: Path, who: Identity, layout: str
) -> None:
    venv = _install(wheel, base, layout, who)
    outside = base / "elsewhere"
    outside.mkdir()
    os.chown(outside, who.uid, who.gid)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(base), "LANG": "C.UTF-8"}
    done = subprocess.run(
        [str(venv / "bin" / "corral"), "demo", "--sandbox", "required"],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        **as_user(who.uid, who.gid),
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "demo finished: every step went as expected" in done.stdout
    assert "hello-py 1.0.0 — running" in done.stdout, output[-3000:]
    assert "UNSANDBOXED" not in output
    assert "execvp" not in output
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import agent; print(agent.__file__)"],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        **as_user(who.uid, who.gid),
    ).stdout.strip()
    assert where.startswith(str(venv)), where  # the installed corral, not the checkout
