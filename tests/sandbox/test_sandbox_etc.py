"""The sandbox's ``/etc``: one bind of a mirror of the listed entries, never stale.

The mirror (:class:`sandbox._etc.EtcMirror`) is driven with an ``/etc`` of our
own; the last tests read the real ``/etc`` through a real bwrap.
"""

from __future__ import annotations

import mmap
import os
import shutil
import sys
import time
from pathlib import Path

import msgspec
import pytest
from helpers.sandbox_harness import run_planned

from sandbox import LaunchRequest, Permissions, select_sandbox
from sandbox._bwrap import BwrapSandbox
from sandbox._etc import _RECHECK, EtcMirror


class Etc:
    """A source ``/etc`` under ``tmp_path``, its mirror, and what a sandbox would see."""

    def __init__(self, tmp_path: Path) -> None:
        self.src = tmp_path / "etc"
        self.src.mkdir()
        self.system = tmp_path / "usr"
        self.system.mkdir()
        self.base = tmp_path / "base"
        self.base.mkdir(mode=0o700)
        self.mirror = EtcMirror(
            lambda: str(self.base), source=str(self.src), system=(str(self.system),)
        )

    def see(self, *names: str) -> tuple[list[str], dict[str, object]]:
        """The binds beyond the mirror's, and the mirror as bound: each path's
        content (bytes and mode), link text or ``"dir"``."""
        fds: list[int] = []
        try:
            args = self.mirror.place(names, fds)
            assert args[0] == "--ro-bind-fd"
            assert args[2] == "/etc"
            assert fds == [int(args[1])]
            root = os.readlink(f"/proc/self/fd/{fds[0]}")
            assert Path(root).parent == self.base
            seen: dict[str, object] = {}
            for here, dirs, files in os.walk(root):
                for name in [*dirs, *files]:
                    path = os.path.join(here, name)
                    rel = os.path.relpath(path, root)
                    st = os.lstat(path)
                    if os.path.islink(path):
                        seen[rel] = ("link", os.readlink(path))
                    elif os.path.isdir(path):
                        seen[rel] = "dir"
                    else:
                        seen[rel] = (Path(path).read_bytes(), st.st_mode & 0o7777)
            return args[3:], seen
        finally:
            for fd in fds:
                os.close(fd)


def test_files_and_links_are_in_the_mirror_with_their_modes(tmp_path: Path) -> None:
    etc = Etc(tmp_path)
    (etc.src / "hosts").write_bytes(b"127.0.0.1 localhost\n")
    (etc.src / "hosts").chmod(0o644)
    (etc.src / "default").mkdir()
    (etc.src / "default" / "locale").write_bytes(b"LANG=C.UTF-8\n")
    (etc.src / "default" / "locale").chmod(0o640 | 0o004)
    zone = etc.system / "UTC"
    zone.write_bytes(b"TZif")
    (etc.src / "localtime").symlink_to(zone)  # into the system directories: a link
    run = tmp_path / "run"
    run.mkdir()
    (run / "resolv.conf").write_bytes(b"nameserver 127.0.0.53\n")
    (etc.src / "resolv.conf").symlink_to(run / "resolv.conf")  # elsewhere: the content
    (etc.src / "passwd").write_bytes(b"root:x:0:0::/root:/bin/sh\n")  # not listed
    binds, seen = etc.see("hosts", "default/locale", "localtime", "resolv.conf", "missing")
    assert binds == []
    assert seen == {
        "hosts": (b"127.0.0.1 localhost\n", 0o644),
        "default": "dir",
        "default/locale": (b"LANG=C.UTF-8\n", 0o644),
        "localtime": ("link", str(zone)),
        "resolv.conf": (b"nameserver 127.0.0.53\n", 0o644),
    }


def test_a_rewrite_of_the_same_size_and_mtime_is_noticed(tmp_path: Path) -> None:
    etc = Etc(tmp_path)
    f = etc.src / "hosts"
    f.write_bytes(b"old content")
    assert etc.see("hosts")[1]["hosts"] == (b"old content", 0o644)
    st = f.stat()
    time.sleep(0.05)  # past the file system's timestamp granularity
    f.write_bytes(b"new content")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # only the change time tells
    assert etc.see("hosts")[1]["hosts"] == (b"new content", 0o644)


def test_a_file_swapped_by_rename_is_noticed(tmp_path: Path) -> None:
    etc = Etc(tmp_path)
    f = etc.src / "hosts"
    f.write_bytes(b"first")
    assert etc.see("hosts")[1]["hosts"] == (b"first", 0o644)
    other = tmp_path / "other"
    other.write_bytes(b"swapd")
    st = f.stat()
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    other.rename(f)
    assert etc.see("hosts")[1]["hosts"] == (b"swapd", 0o644)
    f.unlink()  # gone: gone from the mirror too
    assert etc.see("hosts")[1] == {}


def test_an_entry_copied_through_a_link_to_elsewhere_is_looked_at_every_time(
    tmp_path: Path,
) -> None:
    # Nothing watches where the link leads: an edit there reaches the next spawn all the
    # same, however soon after the last.
    etc = Etc(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "resolv.conf").write_bytes(b"nameserver 127.0.0.53\n")
    (etc.src / "resolv.conf").symlink_to(run / "resolv.conf")
    (etc.src / "hosts").write_bytes(b"127.0.0.1 localhost\n")
    assert etc.see("hosts", "resolv.conf")[1]["resolv.conf"] == (b"nameserver 127.0.0.53\n", 0o644)
    (run / "resolv.conf").write_bytes(b"nameserver 192.0.2.1\n")
    assert etc.see("hosts", "resolv.conf")[1]["resolv.conf"] == (b"nameserver 192.0.2.1\n", 0o644)


def test_directories_on_the_way_made_or_swapped_later_are_noticed(tmp_path: Path) -> None:
    etc = Etc(tmp_path)
    assert etc.see("default/locale")[1] == {}
    (etc.src / "default").mkdir()
    (etc.src / "default" / "locale").write_bytes(b"LANG=C.UTF-8\n")
    assert etc.see("default/locale")[1]["default/locale"] == (b"LANG=C.UTF-8\n", 0o644)
    # The directory renamed away and another made in its place, with a file of the
    # same size and times: the old directory's watch must not be what is trusted.
    st = (etc.src / "default" / "locale").stat()
    (etc.src / "default").rename(etc.src / "default.old")
    (etc.src / "default").mkdir()
    (etc.src / "default" / "locale").write_bytes(b"LANG=de_DE.U8\n")
    os.utime(etc.src / "default" / "locale", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert etc.see("default/locale")[1]["default/locale"] == (b"LANG=de_DE.U8\n", 0o644)


def test_a_write_through_a_shared_mapping_reaches_the_mirror_within_a_second(
    tmp_path: Path,
) -> None:
    # The kernel reports no change for it (only its times tell): every entry is looked
    # at again at least once a second.
    etc = Etc(tmp_path)
    f = etc.src / "hosts"
    f.write_bytes(b"127.0.0.1 old\n")
    # (Opened before the watch starts: its close for writing would be reported.)
    with f.open("r+b") as fh, mmap.mmap(fh.fileno(), 0) as mapped:
        assert etc.see("hosts")[1]["hosts"] == (b"127.0.0.1 old\n", 0o644)
        time.sleep(0.05)  # past the file system's timestamp granularity
        mapped[10:13] = b"new"
        time.sleep(_RECHECK + 0.05)
        assert etc.see("hosts")[1]["hosts"] == (b"127.0.0.1 new\n", 0o644)


def test_a_directory_of_files_and_links_is_copied_and_kept_in_step(tmp_path: Path) -> None:
    etc = Etc(tmp_path)
    d = etc.src / "ld.so.conf.d"
    d.mkdir()
    (d / "a.conf").write_bytes(b"/opt/a\n")
    (d / "b.conf").symlink_to("/nowhere/b.conf")  # links are shown as they are
    assert etc.see("ld.so.conf.d")[1] == {
        "ld.so.conf.d": "dir",
        "ld.so.conf.d/a.conf": (b"/opt/a\n", 0o644),
        "ld.so.conf.d/b.conf": ("link", "/nowhere/b.conf"),
    }
    # A file edited in place (the directory's times do not change) is noticed.
    st = (d / "a.conf").stat()
    time.sleep(0.05)
    (d / "a.conf").write_bytes(b"/opt/A\n")
    os.utime(d / "a.conf", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert etc.see("ld.so.conf.d")[1]["ld.so.conf.d/a.conf"] == (b"/opt/A\n", 0o644)
    (d / "b.conf").unlink()
    (d / "c.conf").write_bytes(b"/opt/c\n")
    assert sorted(etc.see("ld.so.conf.d")[1]) == [
        "ld.so.conf.d",
        "ld.so.conf.d/a.conf",
        "ld.so.conf.d/c.conf",
    ]


def test_a_copied_directory_is_not_copied_again_while_nothing_in_it_changes(
    tmp_path: Path,
) -> None:
    # Each copy of /etc/alternatives (hundreds of links) cost a spawn ~30-240 ms here:
    # one was taken again at the first full look after the first copy, for nothing.
    etc = Etc(tmp_path)
    d = etc.src / "ld.so.conf.d"
    d.mkdir()
    (d / "a.conf").write_bytes(b"/opt/a\n")
    (d / "b.conf").symlink_to("/nowhere/b.conf")
    (etc.src / "hosts").write_bytes(b"127.0.0.1 old\n")
    etc.see("ld.so.conf.d", "hosts")
    copied = (etc.base / "etc-0" / "ld.so.conf.d").stat().st_ino
    (etc.src / "hosts").write_bytes(b"127.0.0.1 new\n")  # a change: every entry is looked at
    assert etc.see("ld.so.conf.d", "hosts")[1]["hosts"] == (b"127.0.0.1 new\n", 0o644)
    assert (etc.base / "etc-0" / "ld.so.conf.d").stat().st_ino == copied
    (d / "a.conf").write_bytes(b"/opt/A\n")  # and a change inside it still is copied
    assert etc.see("ld.so.conf.d", "hosts")[1]["ld.so.conf.d/a.conf"] == (b"/opt/A\n", 0o644)


def test_what_cannot_be_copied_is_bound_over_an_empty_placeholder(tmp_path: Path) -> None:
    etc = Etc(tmp_path)
    private = etc.src / "private"
    private.write_bytes(b"root only")
    private.chmod(0o600)  # a copy would lose the owner that limits its readers
    big = etc.src / "big"
    big.write_bytes(b"x" * (1024 * 1024 + 1))
    nested = etc.src / "certs"
    (nested / "java").mkdir(parents=True)
    binds, seen = etc.see("private", "big", "certs")
    assert binds == [
        *("--ro-bind-try", str(private), "/etc/private"),
        *("--ro-bind-try", str(big), "/etc/big"),
        *("--ro-bind-try", str(nested), "/etc/certs"),
    ]
    assert seen == {"private": (b"", 0o444), "big": (b"", 0o444), "certs": "dir"}
    private.chmod(0o644)  # readable by all now: copied from the next spawn on
    binds, seen = etc.see("private", "big", "certs")
    assert seen["private"] == (b"root only", 0o644)
    assert "/etc/private" not in binds


def test_a_replaced_mirror_is_never_bound(tmp_path: Path) -> None:
    etc = Etc(tmp_path)
    (etc.src / "hosts").write_bytes(b"127.0.0.1 localhost\n")
    etc.see("hosts")
    (mirror,) = etc.base.iterdir()
    shutil.rmtree(mirror)
    mirror.mkdir()
    (mirror / "hosts").write_bytes(b"203.0.113.9 api.example.com\n")  # planted
    assert etc.see("hosts")[1] == {"hosts": (b"127.0.0.1 localhost\n", 0o644)}
    # A mirror turned into a symlink is not followed either.
    shutil.rmtree(mirror)
    (tmp_path / "planted").mkdir()
    mirror.symlink_to(tmp_path / "planted")
    assert etc.see("hosts")[1] == {"hosts": (b"127.0.0.1 localhost\n", 0o644)}
    assert not (tmp_path / "planted" / "hosts").exists()


def test_with_a_mount_point_inside_etc_the_mirror_is_shown_part_by_part(tmp_path: Path) -> None:
    # A grant of /etc/fonts (the headless browser's) needs a mount point bwrap can
    # create: /etc is then the root's own directory, holding the mirror's parts.
    etc = Etc(tmp_path)
    (etc.src / "hosts").write_bytes(b"127.0.0.1 localhost\n")
    (etc.src / "default").mkdir()
    (etc.src / "default" / "locale").write_bytes(b"LANG=C.UTF-8\n")
    (etc.src / "conf.d").mkdir()
    (etc.src / "conf.d" / "a.conf").write_bytes(b"a\n")
    (etc.src / "localtime").symlink_to(etc.system / "UTC")
    fds: list[int] = []
    names = ("hosts", "default/locale", "conf.d", "localtime")
    try:
        args = etc.mirror.place(names, fds, under=["/etc/fonts", "/etc/default/x", "/opt"])
        assert "/etc" not in args  # no bind of the whole mirror
        files = {args[i + 2]: os.read(int(args[i + 1]), 100) for i, a in enumerate(args)
                 if a == "--file"}  # fmt: skip
        assert files == {
            "/etc/default/locale": b"LANG=C.UTF-8\n",
            "/etc/hosts": b"127.0.0.1 localhost\n",
        }
        assert args[args.index("/etc/default") - 1] == "--dir"  # spread: it holds a mount point
        assert args[args.index("/etc/conf.d") - 2] == "--ro-bind-fd"  # none inside: bound whole
        assert args[args.index("/etc/localtime") - 2 :][:2] == [
            "--symlink",
            str(etc.system / "UTC"),
        ]
        assert sorted(fds) == sorted(
            int(args[i + 1]) for i, a in enumerate(args) if a.endswith(("-fd", "--file"))
        )
    finally:
        for fd in fds:
            os.close(fd)


@pytest.fixture
def bwrap() -> BwrapSandbox:
    backend = select_sandbox("required")
    assert isinstance(backend, BwrapSandbox)
    return backend


READ_ETC = """
import errno, json, os, sys
out = {}
for name in sys.argv[1:]:
    path = "/etc/" + name
    if not os.path.lexists(path):
        continue
    with open(path, "rb") as f:
        data = f.read()
    try:
        open(path, "ab").close()
        writable = True
    except OSError as exc:
        writable = errno.errorcode[exc.errno]
    out[name] = [data.hex(), os.stat(path).st_mode & 0o7777, writable]
out["passwd"] = os.path.exists("/etc/passwd")
print(json.dumps(out))
"""


def test_the_sandbox_sees_the_hosts_etc_read_only(bwrap: BwrapSandbox, tmp_path: Path) -> None:
    names = ["hosts", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "default/locale"]
    ext = tmp_path / "ext"
    ext.mkdir()
    request = LaunchRequest(
        name="etc",
        argv=[sys.executable, "-c", READ_ETC, *names],
        env={"PATH": "/usr/bin:/bin"},
        ext_dir=str(ext),
        data_dir=None,
        interpreter=sys.executable,
    )
    returncode, out, err = run_planned(bwrap, request)
    assert returncode == 0, err
    seen = msgspec.json.decode(out)
    assert seen.pop("passwd") is False
    expected = [n for n in names if os.path.exists(f"/etc/{n}")]
    assert sorted(seen) == sorted(expected)
    for name in expected:
        data, mode, writable = seen[name]
        real = os.path.realpath(f"/etc/{name}")
        assert bytes.fromhex(data) == Path(real).read_bytes(), name
        assert mode == os.stat(real).st_mode & 0o7777, name
        assert writable in ("EROFS", "EACCES"), name


@pytest.mark.parametrize("network", [False, True])
def test_etc_costs_bwrap_one_bind(bwrap: BwrapSandbox, tmp_path: Path, network: bool) -> None:
    # Each mount or file bwrap makes costs it time at every start: the listed /etc
    # entries are one bind of the mirror, plus one per entry that cannot be copied
    # (none of the files and links; here a directory holding directories at most).
    ext = tmp_path / "ext"
    ext.mkdir()
    request = LaunchRequest(
        name="etc",
        argv=["/bin/true"],
        env={},
        ext_dir=str(ext),
        data_dir=None,
        permissions=Permissions(network=network),
    )
    plan = bwrap.plan(request)
    try:
        argv = plan.argv[: plan.argv.index("--")]
        assert "--file" not in argv
        etc = [argv[i + 2] for i, a in enumerate(argv) if a.startswith("--") and
               i + 2 < len(argv) and argv[i + 2].startswith("/etc")]  # fmt: skip
        assert etc[0] == "/etc"
        assert argv[argv.index("/etc") - 2] in ("--ro-bind-fd", "--ro-bind")
        for dest in etc[1:]:
            assert os.path.isdir(dest), dest
            assert not os.path.islink(dest), dest
    finally:
        bwrap.cleanup(plan)


def test_every_backend_of_a_process_binds_the_same_mirror(tmp_path: Path) -> None:
    # A host may hold several backends (one per session); the first one's sandboxes
    # must keep their /etc when another plans (it was made anew, emptied under them).
    ext = tmp_path / "ext"
    ext.mkdir()
    request = LaunchRequest(name="etc", argv=["/bin/true"], env={}, ext_dir=str(ext), data_dir=None)
    probed = select_sandbox("required")
    assert isinstance(probed, BwrapSandbox)
    first, second = BwrapSandbox(probed.config), BwrapSandbox(probed.config)
    running = first.plan(request)  # its sandbox would have this /etc bound
    try:
        source = running.argv[running.argv.index("/etc") - 1]
        bound = f"/proc/self/fd/{source}" if source.isdigit() else source
        shown = sorted(os.listdir(bound))
        assert "ld.so.cache" in shown
        second.cleanup(second.plan(request))
        assert sorted(os.listdir(bound)) == shown
    finally:
        first.cleanup(running)
