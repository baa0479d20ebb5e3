"""Trust is explicit: project-local and installed extensions run only as the user pinned them.

The real ``corral`` command, as root and as an unprivileged user, every extension
under bwrap (``--sandbox required``). An extension that started leaves a report in
its data directory (``attacks/squat.py``); one that did not, leaves none.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.sandbox_harness import RUN_TIMEOUT, as_user
from helpers.trust_harness import CHAT, RPC, RUN, Site


def refused_with(proc: subprocess.CompletedProcess[str], command: str, words: str) -> None:
    """``proc`` failed with one line naming ``command`` and saying ``words``."""
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert words in lines[0], lines[0]
    assert lines[0].endswith(f"run: {command}"), lines[0]


@pytest.mark.slow
def test_a_planted_extension_never_starts_until_trusted(site: Site) -> None:
    planted = site.extension(site.local, "planted")
    command = "corral ext trust .corral/extensions/planted"
    refused_with(site.corral(*RUN, "hi"), command, "extension planted (project")
    refused_with(site.corral(*RPC, stdin='{"type": "get_state"}\n'), command, "is not trusted")
    assert site.reports() == []  # it never ran, not even for a moment

    listed = json.loads(site.corral("ext", "list", "--json").stdout.splitlines()[0])
    assert (listed["name"], listed["trust"]) == ("planted", "untrusted")
    assert command in listed["problem"]

    trusted = site.corral("ext", "trust", "-y", "planted")
    assert trusted.returncode == 0, trusted.stderr
    assert "trusted planted" in trusted.stdout
    ran = site.corral(*RUN, "hi")
    assert ran.returncode == 0, ran.stderr
    assert site.reports() == [site.data(planted) / "report.json"]


def _content(d: Path) -> None:
    (d / "squat.py").write_text((d / "squat.py").read_text() + "\n# one more line\n")


def _permissions(d: Path) -> None:
    manifest = json.loads((d / "extension.json").read_text())
    manifest["permissions"] = {"network": True}
    (d / "extension.json").write_text(json.dumps(manifest))


def _added(d: Path) -> None:
    (d / "sitecustomize.py").write_text("import os\n")


def _symlink_swap(d: Path) -> None:
    # The script replaced by a link to an identical copy outside: same bytes run.
    outside = d.parent.parent / "squat-copy.py"
    outside.write_bytes((d / "squat.py").read_bytes())
    (d / "squat.py").unlink()
    (d / "squat.py").symlink_to(outside)


def _mode(d: Path) -> None:
    (d / "squat.py").chmod(0o777)


def _grant_retargeted(d: Path) -> None:
    # Not a byte of the extension changes, but its grant now resolves elsewhere.
    shared = d.parents[3] / "shared"
    shared.unlink()
    shared.symlink_to(d.parents[3] / "other")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (_content, "changed since it was trusted"),
        (_permissions, "changed since it was trusted"),
        (_added, "changed since it was trusted"),
        (_symlink_swap, "changed since it was trusted"),
        (_mode, "changed since it was trusted"),
        (_grant_retargeted, "asks for other permissions than when it was trusted"),
    ],
)
def test_any_change_asks_again(site: Site, change: Callable[[Path], None], words: str) -> None:
    for name in ("notes", "other"):
        (site.home / name).mkdir()
    (site.home / "shared").symlink_to(site.home / "notes")
    ext = site.extension(site.local, "kept", permissions={"read_only": ["~/shared"]})
    assert site.corral("ext", "trust", "-y", "kept").returncode == 0
    change(ext)
    site.give()
    refused_with(site.corral(*RUN, "hi"), "corral ext trust .corral/extensions/kept", words)
    assert site.reports() == []


@pytest.mark.slow
def test_installed_extensions_are_pinned_at_install(site: Site) -> None:
    source = site.extension(site.base / "downloads", "helper", permissions={"env": ["LANG"]})
    installed = site.corral("ext", "install", str(source))
    assert installed.returncode == 0, installed.stderr
    assert "permissions  env:LANG" in installed.stdout
    target = site.corral_home / "extensions" / "helper"
    ran = site.corral(*RUN, "hi")
    assert ran.returncode == 0, ran.stderr
    assert site.report(target) is not None

    (site.data(target) / "report.json").unlink()
    _content(target)  # tampered with after install
    command = "corral ext trust ~/.local/state/corral/extensions/helper"
    refused_with(site.corral(*RUN, "hi"), command, "extension helper (global")
    assert site.report(target) is None
    assert site.corral("ext", "trust", "-y", "helper").returncode == 0
    assert site.corral(*RUN, "hi").returncode == 0
    assert site.report(target) is not None


@pytest.mark.slow
@pytest.mark.parametrize("answer", ["y", "n"])
def test_chat_asks_before_starting(site: Site, answer: str) -> None:
    planted = site.extension(site.local, "planted", description="totally harmless")
    chat = site.corral(*CHAT, stdin=f"{answer}\n/quit\n")
    assert chat.returncode == 0, chat.stderr
    assert "extension planted needs your trust" in chat.stdout
    assert "description  totally harmless" in chat.stdout
    assert "trust planted and start it? [y/N]" in chat.stdout
    if answer == "y":
        assert "trusted planted" in chat.stdout
        assert "extensions: planted" in chat.stdout
        assert site.report(planted) is not None
        assert site.corral(*RUN, "hi").returncode == 0  # the pin was kept
    else:
        assert "not starting planted (corral ext trust .corral/extensions/planted)" in chat.stdout
        assert "extensions: none" in chat.stdout
        assert site.reports() == []


def _read_until(fd: int, needle: bytes | None, deadline: float) -> bytes:
    """Read the terminal until ``needle`` shows (None: until it is closed)."""
    seen = b""
    while needle is None or needle not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {needle!r} in {seen!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: every writer has gone
                chunk = b""
            if not chunk:
                assert needle is None, f"terminal closed before {needle!r}: {seen!r}"
                return seen
            seen += chunk
    return seen


@pytest.mark.parametrize("answer", ["n", "y"])
def test_ext_trust_confirms_on_a_terminal(site: Site, answer: str) -> None:
    site.extension(site.local, "planted")
    main, child = pty.openpty()
    proc = subprocess.Popen(
        site.command("ext", "trust", "planted"),
        stdin=child,
        stdout=child,
        stderr=child,
        env=site.env(),
        cwd=str(site.project),
        **as_user(site.who.uid, site.who.gid),
    )
    os.close(child)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        shown = _read_until(main, b"Trust planted? [y/N]: ", deadline)
        assert b"never trusted" in shown
        os.write(main, answer.encode() + b"\n")
        rest = _read_until(main, None, deadline)
        assert proc.wait(timeout=RUN_TIMEOUT) == (0 if answer == "y" else 1)
        said = b"trusted planted" if answer == "y" else b"planted not trusted"
        assert said in rest, rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)
    state = json.loads(site.corral("ext", "list", "--json").stdout.splitlines()[0])["trust"]
    assert state == ("trusted" if answer == "y" else "untrusted")
