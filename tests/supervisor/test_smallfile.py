"""Files a cloned repository or an extension's directory holds are hostile.

:func:`read_small_file` refuses a FIFO, a device, a socket, a directory or a file
past its cap at once (never waiting for a writer, never reading without end), and
the trust digest of a directory holding such things never opens them. Every call
that could hang runs in an abandonable thread under ``trio.fail_after``, so a
regression fails instead of hanging the suite.
"""

from __future__ import annotations

import errno
import os
import platform
import threading
import time
from pathlib import Path

import pytest
import trio
from helpers.hostile import SPECIAL, make_special

from supervisor import DirectoryUnhashable
from supervisor.lowlevel import (
    SMALL_FILE_MAX,
    DigestLimits,
    FileRefused,
    digest_tree,
    read_small_file,
)


def _rchar() -> int:
    """Bytes this thread has read with read(2) and its kin, all told."""
    text = Path("/proc/thread-self/io").read_text()
    return int(text.split("rchar:")[1].split()[0])


@pytest.mark.parametrize("kind", list(SPECIAL))
async def test_a_special_or_huge_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "extension.json"
    words = make_special(kind, path)
    with trio.fail_after(10), pytest.raises(FileRefused) as info:
        await trio.to_thread.run_sync(read_small_file, path, abandon_on_cancel=True)
    assert info.value.reason.startswith(words)
    assert info.value.strerror == info.value.reason  # an `except OSError` quoting strerror
    assert info.value.filename == str(path)
    assert str(info.value) == f"{path}: {info.value.reason}"


def test_a_file_past_the_cap_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    make_special("sparse-2GiB", path)
    before = _rchar()
    with pytest.raises(FileRefused, match=r"is larger than 1 MiB \(2147483648 bytes\)"):
        read_small_file(path)
    assert _rchar() - before < 4096  # /proc/thread-self/io itself, never the file


_OPENAT = {"x86_64": 257, "aarch64": 56}.get(platform.machine())


def _blocked_in_open(thread: threading.Thread) -> bool:
    """``thread`` waits in ``openat`` (for a FIFO's partner)."""
    syscall = Path(f"/proc/self/task/{thread.native_id}/syscall").read_text().split()
    return bool(syscall) and syscall[0] == str(_OPENAT)


@pytest.mark.skipif(_OPENAT is None, reason="openat's number on this machine is not listed")
def test_a_special_file_is_refused_without_being_opened(tmp_path: Path) -> None:
    # A FIFO's opener for writing waits until someone opens it for reading: the
    # refusal must not be that someone (nor, for a device, call its driver's open:
    # /dev/watchdog is armed by an open).
    fifo = tmp_path / "extension.json"
    os.mkfifo(fifo)
    link = tmp_path / "link.json"
    link.symlink_to(fifo)
    for path in (fifo, link):
        opened = threading.Event()

        def write(opened: threading.Event = opened) -> None:
            os.close(os.open(fifo, os.O_WRONLY))
            opened.set()

        writer = threading.Thread(target=write)
        writer.start()
        try:
            deadline = time.monotonic() + 10
            while not _blocked_in_open(writer):
                assert time.monotonic() < deadline, "the writer never reached its open"
                time.sleep(0.001)
            with pytest.raises(FileRefused, match="is a FIFO"):
                read_small_file(path)
            assert not opened.wait(0.3), "read_small_file opened the FIFO"
        finally:
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # let the writer go
            writer.join(10)
        assert opened.is_set()


def test_the_cap_is_inclusive_and_contents_come_back_whole(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 1000)
    assert read_small_file(path, 1000) == b"x" * 1000
    with pytest.raises(FileRefused, match="is larger than 999 bytes"):
        read_small_file(path, 999)
    path.write_bytes(b"")
    assert read_small_file(path) == b""
    path.write_bytes(b"y" * SMALL_FILE_MAX)
    assert len(read_small_file(path)) == SMALL_FILE_MAX


def test_a_pseudo_file_of_size_zero_is_read_to_its_end_and_capped() -> None:
    # /proc files say size 0 and hand out a page per read: read on to the end.
    status = Path("/proc/self/status")
    assert status.stat().st_size == 0
    assert b"\nVmPeak:" in read_small_file(status)
    with pytest.raises(FileRefused, match="is larger than 10 bytes"):
        read_small_file(status, 10)


def test_links_are_followed_unless_told_and_the_target_is_checked(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("{}")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert read_small_file(tmp_path / "link") == b"{}"
    with pytest.raises(OSError, match="symbolic links") as info:
        read_small_file(tmp_path / "link", follow_symlinks=False)
    assert info.value.errno == errno.ELOOP
    (tmp_path / "fifo").symlink_to(tmp_path / "pipe")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(FileRefused, match="FIFO"):
        read_small_file(tmp_path / "fifo")
    with pytest.raises(FileNotFoundError):
        read_small_file(tmp_path / "missing")


def test_a_check_refuses_with_its_own_reason(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("{}")
    with pytest.raises(FileRefused, match="not mine") as info:
        read_small_file(path, check=lambda st: "not mine" if st.st_size else None)
    assert info.value.errno == errno.EPERM
    assert read_small_file(path, check=lambda st: None) == b"{}"


# --- the trust digest of a directory holding such files ----------------------------


@pytest.mark.parametrize("kind", ["fifo", "socket", "link-to-dev-zero", "link-to-dev-null"])
async def test_a_digest_records_special_files_and_never_opens_them(
    tmp_path: Path, kind: str
) -> None:
    ext = tmp_path / "ext"
    ext.mkdir()
    (ext / "extension.json").write_text("{}")
    make_special(kind, ext / "thing")
    with trio.fail_after(10):
        tree = await trio.to_thread.run_sync(digest_tree, str(ext), abandon_on_cancel=True)
    entry = tree.entry("thing")
    assert entry is not None
    if kind.startswith("link"):  # the link, then what it leads to outside: not a file
        assert tree.entries[tree.entries.index(entry) + 1].payload == "other"
    else:
        assert entry.kind.value == "o"
    assert tree.files == 1


def test_a_digest_refuses_a_file_past_its_byte_bound_unread(tmp_path: Path) -> None:
    ext = tmp_path / "ext"
    ext.mkdir()
    (ext / "extension.json").write_text("{}")
    make_special("sparse-2GiB", ext / "blob")
    before = _rchar()
    with pytest.raises(DirectoryUnhashable, match="more than 256 MiB of files"):
        digest_tree(str(ext))
    assert _rchar() - before < 1 << 20  # the directory listing, never the 256 MiB before
    with pytest.raises(DirectoryUnhashable, match="more than 1 bytes of files"):
        digest_tree(str(ext), DigestLimits(max_bytes=1))
