"""Opening a path to bind without following any symlink: the walk and its one-call form."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from sandbox._pin import PathKind, real_path, walk


@pytest.mark.parametrize("ancestors", [True, False])
def test_a_real_path_opens_as_itself(tmp_path: Path, ancestors: bool) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "f").write_text("x")
    for path, kind in ((tmp_path / "a" / "b", PathKind.DIR), (tmp_path / "a" / "f", PathKind.FILE)):
        walked = walk(str(path), ancestors=ancestors)
        try:
            st = os.stat(path)
            assert (walked.dev, walked.ino, walked.kind) == (st.st_dev, st.st_ino, kind)
            assert os.fstat(walked.fd).st_ino == st.st_ino
            assert bool(walked.ancestors) == ancestors
        finally:
            os.close(walked.fd)


@pytest.mark.parametrize("ancestors", [True, False])
def test_a_symlink_anywhere_is_refused_and_named(tmp_path: Path, ancestors: bool) -> None:
    (tmp_path / "real" / "inner").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "last").symlink_to(tmp_path / "real" / "inner")
    for path, culprit in (
        (tmp_path / "link" / "inner", tmp_path / "link"),
        (tmp_path / "real" / "last", tmp_path / "real" / "last"),
        (Path("/proc/self/cwd"), Path("/proc/self")),
    ):
        with pytest.raises(OSError, match="symlink") as caught:
            walk(str(path), ancestors=ancestors)
        assert caught.value.errno == errno.ELOOP
        assert caught.value.filename == str(culprit)
    with pytest.raises(FileNotFoundError):
        walk(str(tmp_path / "missing"), ancestors=ancestors)


def test_real_path_is_realpath(tmp_path: Path) -> None:
    (tmp_path / "real" / "dir").mkdir(parents=True)
    (tmp_path / "real" / "file").write_text("x")
    (tmp_path / "link").symlink_to("real")
    (tmp_path / "real" / "chain").symlink_to("../link/dir")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "deeper")
    for name in (
        "real/dir", "link/dir", "link/file", "real/chain", "link/../real", "missing/x",
        "dangling", "link/missing",
    ):  # fmt: skip
        path = str(tmp_path / name)
        assert real_path(path) == os.path.realpath(path), name
