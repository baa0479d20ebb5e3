"""A session's working directory: copied from a directory, written from inline files,
or unpacked from a tar that travelled through Ray; and removed afterwards.

All functions are blocking file-system work: run them in a worker thread.

A copy keeps symbolic links as links (never followed: a link in a dataset that
points at ``~/.ssh`` stays a link, which the confined tools refuse to follow out of
the workspace) and leaves out what is not a regular file, a directory or a link
(a FIFO would block the copy, a device has no place in a workspace).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import stat
import sys
import tarfile
from pathlib import Path, PurePosixPath

__all__ = ["MAX_PACKED", "copy_workspace", "pack_dir", "remove_tree", "unpack", "write_files"]

#: Largest directory (bytes, uncompressed) that travels through Ray in one task.
MAX_PACKED = 64 * 1024 * 1024


def _copy_regular(src: str, dst: str) -> str:
    # copytree calls this for every entry that is not a directory (links are
    # recreated before it is reached): copy only what is a regular file *now*.
    if stat.S_ISREG(os.lstat(src).st_mode):
        return str(shutil.copy2(src, dst, follow_symlinks=False))
    return dst


def copy_workspace(src: str, dst: Path) -> None:
    """Copy the directory ``src`` to ``dst`` (which must not exist)."""
    shutil.copytree(src, dst, symlinks=True, copy_function=_copy_regular)


def write_files(files: dict[str, str], dst: Path) -> None:
    """Create ``dst`` with ``files`` (relative path -> UTF-8 text) in it.

    The paths were checked when the task was (relative, no ``..``); every file is
    created new (``O_EXCL``, no link followed) in a directory only we have written.
    """
    dst.mkdir(mode=0o700)
    for name, text in files.items():
        target = dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with open(fd, "wb") as fh:
            fh.write(text.encode("utf-8"))


def _size(src: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(src):
        for name in files:
            with contextlib.suppress(OSError):
                info = os.lstat(os.path.join(root, name))
                if stat.S_ISREG(info.st_mode):
                    total += info.st_size
    return total


def pack_dir(src: str, *, limit: int = MAX_PACKED) -> bytes:
    """``src`` as an uncompressed tar (regular files, directories, links).

    Raises:
        ValueError: the directory holds more than ``limit`` bytes of files.
    """
    size = _size(src)
    if size > limit:
        raise ValueError(
            f"{src}: the directory holds more than the {limit / 2**20:g} MiB of files that "
            f"travel with a task ({size} bytes); put it on a path every node sees "
            "(--ray-shared-paths)"
        )

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return info if info.isreg() or info.isdir() or info.issym() else None

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(src, arcname=".", recursive=True, filter=keep)
    return buffer.getvalue()


def unpack(data: bytes, dst: Path) -> None:
    """Unpack a :func:`pack_dir` tar into ``dst`` (created).

    Only directories, regular files (their mode's permission bits kept, so that an
    extension's program stays executable) and symbolic links are made; a name that
    is absolute or holds ``..`` is refused. Links are made last, so that nothing
    is ever written through one: a link is data here, as in a copy.

    Raises:
        ValueError: the tar holds a name outside ``dst``.
    """
    dst.mkdir(mode=0o700, parents=True, exist_ok=True)
    links: list[tuple[Path, str]] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        for member in tar.getmembers():
            name = PurePosixPath(member.name)
            if name.is_absolute() or ".." in name.parts:
                raise ValueError(f"{member.name!r}: not a name inside the directory")
            parts = [part for part in name.parts if part != "."]
            if not parts:
                continue
            target = dst.joinpath(*parts)
            if member.isdir():
                target.mkdir(mode=0o700 | (member.mode & 0o755), parents=True, exist_ok=True)
            elif member.isreg():
                target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(target, flags, 0o600 | (member.mode & 0o755))
                source = tar.extractfile(member)
                with open(fd, "wb") as out:
                    if source is not None:
                        shutil.copyfileobj(source, out)
            elif member.issym():
                links.append((target, member.linkname))
    for target, link in links:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.symlink(link, target)


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything in it, also directories a tool made read-only."""

    def retry(function: object, failed: str, _exc: object) -> None:
        parent = os.path.dirname(failed)
        with contextlib.suppress(OSError):
            os.chmod(parent, stat.S_IRWXU)
            if os.path.isdir(failed) and not os.path.islink(failed):
                os.chmod(failed, stat.S_IRWXU)
                shutil.rmtree(failed, ignore_errors=True)
            else:
                os.unlink(failed)

    if not (path.exists() or path.is_symlink()):
        return
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry)
    else:  # ``onerror`` is deprecated from 3.12 on
        shutil.rmtree(path, onerror=retry)
