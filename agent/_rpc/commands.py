"""The ``corral rpc`` commands: one tagged Struct per command type, the :data:`Command`
union the server decodes, and the :class:`Response` it answers with.

The seed's ten commands come first, then corral's additions (docs/rpc.md); a new
command is a Struct here, one entry in :data:`Command`, and its case in the server.
"""

from __future__ import annotations

import typing
from typing import Any

import msgspec

from .._providers.base import ReasoningLevel
from .._tools.base import ToolKind

__all__ = [
    "COMMANDS",
    "EXT_OPS",
    "NULL",
    "Abort",
    "Clear",
    "Command",
    "Compact",
    "ExtCommand",
    "ExtEnable",
    "ExtList",
    "ExtOp",
    "ExtPanelClose",
    "ExtPanelKey",
    "ExtReload",
    "GetMessages",
    "GetModels",
    "GetState",
    "GetTools",
    "Hello",
    "ImageIn",
    "Ping",
    "Prompt",
    "Response",
    "SetModel",
    "SetReasoning",
    "ToolsClear",
]

#: An absent id (``null``), as raw JSON.
NULL = msgspec.Raw(b"null")


class _Cmd(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    #: Any JSON value as sent; only strings and numbers are accepted.
    id: msgspec.Raw = NULL


class Hello(_Cmd, frozen=True, tag="hello"):
    token: str | None = None


class ImageIn(msgspec.Struct, frozen=True, kw_only=True):
    mime_type: str = "image/png"
    data: str


class Prompt(_Cmd, frozen=True, tag="prompt"):
    message: str
    images: list[ImageIn] = []
    #: This prompt's reasoning level (corral addition; None: the session's).
    reasoning: ReasoningLevel | None = None


class Abort(_Cmd, frozen=True, tag="abort"):
    """Cancel the running prompt or compaction."""


class Compact(_Cmd, frozen=True, tag="compact"):
    """Summarise the transcript (queued like a prompt)."""


class GetState(_Cmd, frozen=True, tag="get_state"):
    """Snapshot of the runtime."""


class GetMessages(_Cmd, frozen=True, tag="get_messages"):
    """The full transcript."""


class Clear(_Cmd, frozen=True, tag="clear"):
    """Drop the transcript."""


class SetModel(_Cmd, frozen=True, tag="set_model"):
    model: str


class GetModels(_Cmd, frozen=True, tag="get_models"):
    """Models of the current provider."""


class Ping(_Cmd, frozen=True, tag="ping"):
    """Health check."""


class GetTools(_Cmd, frozen=True, tag="get_tools"):
    """Tools the model is offered (corral addition)."""


class ExtList(_Cmd, frozen=True, tag="ext_list"):
    """Status and stats of every extension (corral addition)."""


class ExtCommand(_Cmd, frozen=True, tag="ext_command"):
    name: str
    args: str = ""


class ExtReload(_Cmd, frozen=True, tag="ext_reload"):
    """Reload every extension (corral addition)."""


class ExtEnable(_Cmd, frozen=True, tag="ext_enable"):
    name: str


class ExtPanelKey(_Cmd, frozen=True, tag="ext_panel_key"):
    """A key for an extension's open panel (corral addition)."""

    extension: str
    panel_id: str
    key: str
    text: str = ""


class ExtPanelClose(_Cmd, frozen=True, tag="ext_panel_close"):
    """Close an extension's open panel (corral addition)."""

    extension: str
    panel_id: str


# -- reasoning -------------------------------------------------------------------------


class SetReasoning(_Cmd, frozen=True, tag="set_reasoning"):
    """The reasoning level of the next prompts (corral addition, as ``--reasoning``)."""

    level: ReasoningLevel


class ToolsClear(_Cmd, frozen=True, tag="tools_clear"):
    """Remove every tool of one kind: ``dynamic`` (the catalog too) or ``mcp`` (corral addition)."""

    kind: ToolKind = ToolKind.DYNAMIC


_SeedCommand = (
    Hello | Prompt | Abort | Compact | GetState | GetMessages | Clear | SetModel | GetModels | Ping
)
#: A decoded command: the seed's ten, then corral's additions.
Command = (
    _SeedCommand
    | GetTools
    | ExtList
    | ExtCommand
    | ExtPanelKey
    | ExtPanelClose
    | ExtReload
    | ExtEnable
    | ToolsClear
    | SetReasoning
)
#: Every command type, in documentation order.
COMMANDS: tuple[str, ...] = tuple(
    typing.cast(str, cls.__struct_config__.tag) for cls in typing.get_args(Command)
)
EXT_OPS = (ExtList, ExtCommand, ExtReload, ExtEnable, ExtPanelKey, ExtPanelClose, ToolsClear)
ExtOp = ExtList | ExtCommand | ExtReload | ExtEnable | ExtPanelKey | ExtPanelClose | ToolsClear


class Response(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="response", omit_defaults=True
):
    """The answer to one command; ``id`` is the command's, as raw JSON (``null`` if none)."""

    id: msgspec.Raw
    command: str | None
    success: bool
    data: Any = None
    error: str | None = None
