"""The sandbox's ``/etc``: small files are copies, cached by identity, never stale.

The cache (:class:`sandbox._etc.EtcCopies`) is driven with files of our own; the
last tests read the real ``/etc`` through a real bwrap.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import msgspec
import pytest
from helpers.sandbox_harness import run_planned

from sandbox import LaunchRequest, select_sandbox
from sandbox._bwrap import BwrapSandbox
from sandbox._etc import EtcCopies


def _place(
    copies: EtcCopies, real: Path, dest: str = "/etc/x"
) -> tuple[list[str], dict[str, bytes]]:
    """The arguments for ``real``, and what each copied destination would hold."""
    fds: list[int] = []
    try:
        args = copies.place(str(real), dest, fds)
        content = {}
        for i, a in enumerate(args):
            if a == "--file":
                fd = int(args[i + 1])
                assert fd in fds
                content[args[i + 2]] = os.read(fd, 1 << 20)
        return args, content
    finally:
        for fd in fds:
            os.close(fd)


def test_a_small_file_is_copied_with_its_mode(tmp_path: Path) -> None:
    f = tmp_path / "hosts"
    f.write_bytes(b"127.0.0.1 localhost\n")
    f.chmod(0o644)
    args, content = _place(EtcCopies(), f)
    assert content == {"/etc/x": b"127.0.0.1 localhost\n"}
    assert args[:3] == ["--perms", "0644", "--file"]
    assert args[4:] == ["/etc/x"]


def test_each_spawn_gets_its_own_descriptor_from_the_start(tmp_path: Path) -> None:
    f = tmp_path / "hosts"
    f.write_bytes(b"abc")
    copies = EtcCopies()
    assert _place(copies, f)[1] == {"/etc/x": b"abc"}
    assert _place(copies, f)[1] == {"/etc/x": b"abc"}  # cached, read again in full


def test_a_rewrite_of_the_same_size_and_mtime_is_noticed(tmp_path: Path) -> None:
    f = tmp_path / "hosts"
    f.write_bytes(b"old content")
    copies = EtcCopies()
    assert _place(copies, f)[1] == {"/etc/x": b"old content"}
    st = f.stat()
    time.sleep(0.05)  # past the file system's timestamp granularity
    f.write_bytes(b"new content")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # only the change time tells
    assert _place(copies, f)[1] == {"/etc/x": b"new content"}


def test_a_file_swapped_by_rename_is_noticed(tmp_path: Path) -> None:
    f = tmp_path / "hosts"
    f.write_bytes(b"first")
    copies = EtcCopies()
    assert _place(copies, f)[1] == {"/etc/x": b"first"}
    other = tmp_path / "other"
    other.write_bytes(b"swapd")
    st = f.stat()
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    other.rename(f)
    assert _place(copies, f)[1] == {"/etc/x": b"swapd"}


def test_a_file_turned_into_a_symlink_is_not_copied(tmp_path: Path) -> None:
    f = tmp_path / "hosts"
    f.write_bytes(b"first")
    copies = EtcCopies()
    _place(copies, f)
    secret = tmp_path / "secret"
    secret.write_bytes(b"s3cret")
    f.unlink()
    f.symlink_to(secret)
    # Opened without following: bound by name, as before copies existed.
    args, content = _place(copies, f)
    assert content == {}
    assert args == ["--ro-bind-try", str(f), "/etc/x"]


def test_what_is_not_a_small_readable_file_is_bound(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.write_bytes(b"root only")
    private.chmod(0o600)  # a copy would belong to the sandbox's user: keep the owner
    big = tmp_path / "big"
    big.write_bytes(b"x" * (1024 * 1024 + 1))
    copies = EtcCopies()
    for path in (private, big, tmp_path / "missing"):
        assert _place(copies, path) == (["--ro-bind-try", str(path), "/etc/x"], {})


def test_a_directory_is_bound(tmp_path: Path) -> None:
    d = tmp_path / "ld.so.conf.d"
    d.mkdir()
    (d / "a.conf").write_bytes(b"/opt/a\n")
    assert _place(EtcCopies(), d) == (["--ro-bind-try", str(d), "/etc/x"], {})


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
