"""The one state-file helper: locked, replaced atomically, read only if private.

Real files, and real processes for concurrent writers. Its users (both trust
stores, the JSON catalog, session rewrites) have their own tests; these pin what
they all rely on.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from supervisor.lowlevel import StateFile, StateFileRefused


def test_replace_writes_a_private_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "state" / "x.json"
    state = StateFile(path)
    with state.locked():
        state.replace(b'{"a": 1}\n')
        state.replace(b'{"a": 2}\n')
    assert path.read_bytes() == b'{"a": 2}\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.json", "x.json.lock"]
    assert stat.S_IMODE((path.parent / "x.json.lock").stat().st_mode) == 0o600
    assert state.read() == b'{"a": 2}\n'


def test_replace_refuses_a_symlink_at_the_target(tmp_path: Path) -> None:
    # The rename would replace the link itself; the file it points at would stay
    # stale. Refused, and both are left as they were.
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(b"old\n")
    path = tmp_path / "x.json"
    path.symlink_to(elsewhere)
    with pytest.raises(StateFileRefused, match="symbolic link") as info:
        StateFile(path).replace(b"new\n")
    assert info.value.filename == str(path)
    assert path.is_symlink()
    assert elsewhere.read_bytes() == b"old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.json", "x.json"]


def test_the_lock_file_can_be_named(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "trust.json", lock=tmp_path / "trust.lock")
    with state.locked():
        with pytest.raises(BlockingIOError):
            StateFile(tmp_path / "other", lock=tmp_path / "trust.lock").hold()
        state.replace(b"{}\n")
    fd = StateFile(tmp_path / "other", lock=tmp_path / "trust.lock").hold()
    os.close(fd)
    assert not (tmp_path / "trust.json.lock").exists()


def test_hold_does_not_wait_and_lasts_as_long_as_its_descriptor(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "s.jsonl")
    fd = state.hold()
    try:
        with pytest.raises(BlockingIOError):
            StateFile(tmp_path / "s.jsonl").hold()
    finally:
        os.close(fd)
    os.close(StateFile(tmp_path / "s.jsonl").hold())


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        (lambda p: (p.write_text("{}"), p.chmod(0o664)), "others may write it"),
        (lambda p: (p.write_text("{}"), p.chmod(0o646)), "others may write it"),
        (lambda p: p.mkdir(), "is a directory, not a regular file"),
        (lambda p: os.mkfifo(p), "is a FIFO (named pipe), not a regular file"),
        (lambda p: p.write_bytes(b"x" * 2048), "is larger than 1024 bytes"),
    ],
)
def test_read_refuses_what_is_not_a_private_regular_file(
    tmp_path: Path, setup: object, words: str
) -> None:
    path = tmp_path / "x.json"
    setup(path)  # type: ignore[operator]
    with pytest.raises(StateFileRefused) as info:
        StateFile(path, limit=1024).read()
    assert words in info.value.reason
    assert info.value.strerror == info.value.reason  # callers quote strerror
    assert str(info.value) == f"{path}: {info.value.reason}"


def test_read_never_follows_a_link_and_a_missing_file_is_none(tmp_path: Path) -> None:
    assert StateFile(tmp_path / "missing.json").read() is None
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    with pytest.raises(OSError, match="symbolic links"):
        StateFile(tmp_path / "link.json").read()
    (tmp_path / "big.json").write_bytes(b"x" * ((1 << 20) + 1))
    with pytest.raises(StateFileRefused, match="is larger than 1 MiB"):
        StateFile(tmp_path / "big.json", limit=1 << 20).read()


_WRITER = textwrap.dedent(
    """
    import sys
    from supervisor.lowlevel import StateFile

    state = StateFile(sys.argv[1])
    for _ in range(int(sys.argv[2])):
        with state.locked():
            count = int(state.read() or b"0")
            state.replace(b"%d\\n" % (count + 1))
    """
)


def test_two_processes_updating_one_file_lose_no_update(tmp_path: Path) -> None:
    # Each holds the lock across its read and its replace: 2 x 150 increments, 300.
    path = tmp_path / "state" / "counter"
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), "150"]) for _ in range(2)
    ]
    try:
        assert [w.wait(timeout=60) for w in writers] == [0, 0]
    finally:
        for w in writers:
            if w.poll() is None:
                w.kill()
                w.wait()
    assert path.read_bytes() == b"300\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["counter", "counter.lock"]
