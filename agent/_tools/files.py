"""Built-in file tools ``read``, ``write`` and ``edit``, confined to a workspace.

Every path is opened through :meth:`Workspace.open` (see :mod:`.confine`): resolved
component by component from the working directory's descriptor, so ``..``,
absolute paths and symlinks cannot lead outside it, ``.corral`` directories and
corral's home are never written, and a home directory used as the working
directory is read-only.

Each tool is a typed tool of the builder (see :mod:`.typed`): its arguments are a
msgspec Struct, which gives its schema and its repair-aware decoding. Blocking file
I/O runs in worker threads; outputs are bounded.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import msgspec
import trio
from msgspec import Meta

from supervisor import toolkit

from .._exceptions import ToolError
from .confine import Workspace
from .typed import BuiltinTool

__all__ = ["EditTool", "ReadTool", "WriteTool", "decode_args"]

_MAX_READ_BYTES = 256 * 1024
_MAX_EDIT_BYTES = 8 * 1024 * 1024
_MAX_IMAGE_BYTES = 5 * 1024 * 1024
_IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                ".gif": "image/gif", ".webp": "image/webp"}  # fmt: skip

A = TypeVar("A")
T = TypeVar("T")
_PATH = Meta(description="File path, relative to the cwd.")


def decode_args(args: dict[str, Any], kind: type[A], tool: str) -> A:
    """Convert model-written ``args`` to ``kind`` (the web tools' decoding).

    Raises:
        ToolError: a required argument is missing or has the wrong type.
    """
    try:
        return msgspec.convert(args, kind)
    except msgspec.ValidationError as exc:
        raise ToolError(f"{tool}: invalid arguments: {exc}") from exc


class _Base(BuiltinTool):
    """A file tool: a workspace, and sync work in a thread."""

    def __init__(self, workspace: Workspace, made: toolkit.Tool) -> None:
        super().__init__(made)
        self.workspace = workspace

    def __repr__(self) -> str:
        return f"<{type(self).__name__} root={self.workspace.root!r}>"

    @staticmethod
    async def _in_thread(work: Callable[[], T]) -> T:
        # Cancellation: the work finishes in its worker thread; the result is dropped.
        return await trio.to_thread.run_sync(work)


class ReadArgs(msgspec.Struct, frozen=True, kw_only=True):
    """Arguments of ``read``."""

    path: Annotated[str, _PATH]
    offset: Annotated[int, Meta(description="First line (1-based).")] = 1
    limit: Annotated[int, Meta(description="Maximum number of lines.")] = 2000


@typing.final
class ReadTool(_Base):
    """``read``: a text file's lines (or an image), bounded."""

    def __init__(self, workspace: Workspace) -> None:
        @toolkit.tool(name="read")
        async def read(args: ReadArgs) -> Any:
            """Read a file in the working directory. Text files come back as lines (use
            offset/limit for long files); PNG, JPEG, GIF and WebP come back as images."""
            return await self._in_thread(lambda: self._read(args))

        super().__init__(workspace, read)

    def _read(self, args: ReadArgs) -> str | list[dict[str, Any]]:
        fd, real = self.workspace.open(args.path, os.O_RDONLY, write=False)
        shown = self.workspace.show(real)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(max(_MAX_READ_BYTES, _MAX_IMAGE_BYTES) + 1)
        mime = _IMAGE_TYPES.get(Path(real).suffix.lower())
        if mime is not None:
            if len(data) > _MAX_IMAGE_BYTES:
                raise ToolError(f"{shown}: image larger than {_MAX_IMAGE_BYTES} bytes")
            return [toolkit.image_block(data, mime)]
        if b"\x00" in data[:8192]:
            raise ToolError(f"{shown} looks binary; read only text files and images")
        truncated_bytes = len(data) > _MAX_READ_BYTES
        lines = data[:_MAX_READ_BYTES].decode("utf-8", errors="replace").splitlines()
        first = max(args.offset, 1)
        count = max(args.limit, 1)
        chosen = lines[first - 1 : first - 1 + count]
        text = "\n".join(chosen)
        last = first - 1 + len(chosen)
        if truncated_bytes or last < len(lines) or first > 1:
            more = "+" if truncated_bytes else ""
            text += (
                f"\n[{shown}: lines {first}-{last} of {len(lines)}{more}; "
                "pass offset/limit to read more]"
            )
        return text if chosen else f"[{shown}: no lines at offset {first}]"


class WriteArgs(msgspec.Struct, frozen=True, kw_only=True):
    """Arguments of ``write``."""

    path: Annotated[str, _PATH]
    content: Annotated[str, Meta(description="The whole new content.")]


@typing.final
class WriteTool(_Base):
    """``write``: create or overwrite a file (parent directories are created)."""

    def __init__(self, workspace: Workspace) -> None:
        @toolkit.tool(name="write")
        async def write(args: WriteArgs) -> str:
            """Create or overwrite a file in the working directory with the given content."""
            return await self._in_thread(lambda: self._write(args))

        super().__init__(workspace, write)

    def _write(self, args: WriteArgs) -> str:
        payload = args.content.encode("utf-8")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        fd, real = self.workspace.open(args.path, flags, write=True)
        shown = self.workspace.show(real)
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
        return f"wrote {len(payload)} bytes to {shown}"


class EditArgs(msgspec.Struct, frozen=True, kw_only=True):
    """Arguments of ``edit``."""

    path: Annotated[str, _PATH]
    old_text: Annotated[str, Meta(description="Exact text to replace.")]
    new_text: Annotated[str, Meta(description="Replacement text.")]
    replace_all: Annotated[bool, Meta(description="Replace every occurrence.")] = False


@typing.final
class EditTool(_Base):
    """``edit``: replace an exact text in a file (once, or everywhere on request)."""

    def __init__(self, workspace: Workspace) -> None:
        @toolkit.tool(name="edit")
        async def edit(args: EditArgs) -> str:
            """Replace old_text with new_text in a file. old_text must occur exactly once
            unless replace_all is true; include surrounding lines to make it unique."""
            return await self._in_thread(lambda: self._edit(args))

        super().__init__(workspace, edit)

    def _edit(self, args: EditArgs) -> str:
        if not args.old_text:
            raise ToolError("edit: old_text must not be empty")
        fd, real = self.workspace.open(args.path, os.O_RDWR, write=True)
        shown = self.workspace.show(real)
        with os.fdopen(fd, "r+b") as fh:
            raw = fh.read(_MAX_EDIT_BYTES + 1)
            if len(raw) > _MAX_EDIT_BYTES:
                raise ToolError(f"{shown}: larger than {_MAX_EDIT_BYTES} bytes; edit it with bash")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ToolError(f"{shown} is not UTF-8 text") from exc
            count = text.count(args.old_text)
            if count == 0:
                raise ToolError(f"{shown}: old_text not found; read the file and copy it exactly")
            if count > 1 and not args.replace_all:
                raise ToolError(
                    f"{shown}: old_text occurs {count} times; add surrounding lines to make "
                    "it unique, or set replace_all"
                )
            updated = text.replace(args.old_text, args.new_text).encode("utf-8")
            fh.seek(0)
            fh.write(updated)
            fh.truncate()
        noun = "occurrence" if count == 1 else "occurrences"
        return f"replaced {count} {noun} in {shown}"
