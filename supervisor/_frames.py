"""Wire frames of the extension protocol (NDJSON over stdio).

Every frame of the seed protocol is a :class:`msgspec.Struct` tagged on ``"type"``.
Frames the extension sends form :data:`ExtFrame`; frames the host sends form
:data:`HostFrame`. Unknown fields are tolerated (peers may extend frames); unknown
frame types are reported by :func:`decode_ext_frame` as :class:`FrameError` with
``kind="unknown_type"`` so the caller can log and skip them.

One module-level encoder and decoder are built once and reused.
"""

from __future__ import annotations

import typing
from typing import Any, Literal

import msgspec

__all__ = [
    "PROTOCOL_VERSION",
    "CommandInvoked",
    "CommandResponse",
    "ContentBlock",
    "Event",
    "EventIntercept",
    "EventInterceptResponse",
    "ExtFrame",
    "FrameError",
    "Hello",
    "HelloAck",
    "HostFrame",
    "ImageBlock",
    "Notify",
    "PanelClose",
    "PanelKey",
    "PanelRender",
    "PanelSpec",
    "Ready",
    "RegisterCommand",
    "RegisterTool",
    "Shutdown",
    "ShutdownAck",
    "Subscribe",
    "TextBlock",
    "ToolCall",
    "ToolResult",
    "decode_ext_frame",
    "encode_frame",
]

PROTOCOL_VERSION = 1

NotifyLevel = Literal["info", "success", "warn", "error"]
#: What a ``notify`` frame may say: the seed's levels, and ``warning`` for ``warn``
#: (docs/rpc.md listed it; extensions written from it keep working).
NotifyLevelIn = NotifyLevel | Literal["warning"]
CommandAction = Literal["prompt", "insert", "display", "noop", "open_panel"]
#: What a ``command_response`` may say: an action, or none at all (``""`` or null, a
#: Go extension's zero value), which is ``noop``.
CommandActionIn = CommandAction | Literal[""] | None


class _Frame(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every frame: tagged on ``type``, unknown fields ignored."""


# --- content blocks ---------------------------------------------------------


class TextBlock(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="text"):
    """A text block of a tool result."""

    text: str = ""


class ImageBlock(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="image"):
    """An image block of a tool result; ``data`` is base64."""

    mime_type: str = "image/png"
    data: str = ""


ContentBlock = TextBlock | ImageBlock


# --- extension -> host -------------------------------------------------------


class Hello(_Frame, frozen=True, tag="hello"):
    """First frame an extension sends."""

    name: str
    version: str = ""
    capabilities: list[str] = []


class RegisterCommand(_Frame, frozen=True, tag="register_command"):
    """Registers a slash command."""

    name: str
    description: str = ""


class RegisterTool(_Frame, frozen=True, tag="register_tool"):
    """Registers a model-callable tool; ``schema`` is a JSON object schema."""

    name: str
    description: str = ""
    schema: Any = None


class Ready(_Frame, frozen=True, tag="ready"):
    """All initial registrations are flushed."""


class ToolResult(_Frame, frozen=True, tag="tool_result"):
    """Reply to a :class:`ToolCall`."""

    id: str
    content: list[ContentBlock] = []
    is_error: bool = False


class Subscribe(_Frame, frozen=True, tag="subscribe"):
    """Events to observe and events to intercept."""

    events: list[str] = []
    intercept: list[str] = []


class EventInterceptResponse(_Frame, frozen=True, tag="event_intercept_response"):
    """Reply to an :class:`EventIntercept`; every field defaults to "allow, unchanged"."""

    id: str
    block: bool = False
    reason: str = ""
    modified_args: Any = None
    replace_text: str | None = None


class PanelSpec(msgspec.Struct, frozen=True, kw_only=True):
    """The panel a ``command_response`` with action ``open_panel`` opens: ``id`` is the
    extension's own name for it; ``lines`` are drawn as given, one row each."""

    id: str
    title: str = ""
    # Null is an empty list: a Go extension's nil slice without ``omitempty``.
    lines: list[str] | None = None
    footer: str = ""


class CommandResponse(_Frame, frozen=True, tag="command_response"):
    """Reply to a :class:`CommandInvoked` (``action``: see :attr:`taken_action`)."""

    id: str
    action: CommandActionIn = "noop"
    prompt: str = ""
    insert: str = ""
    display: str = ""
    error: str = ""
    open_panel: PanelSpec | None = None

    @property
    def taken_action(self) -> CommandAction:
        """The action to take: no action (``""`` or null) is ``noop``."""
        return self.action or "noop"


class Notify(_Frame, frozen=True, tag="notify"):
    """One-way note for the user (``level``: see :attr:`seed_level`)."""

    message: str = ""
    level: NotifyLevelIn = "info"

    @property
    def seed_level(self) -> NotifyLevel:
        """The level by the seed's name (``warning`` is ``warn``)."""
        return "warn" if self.level == "warning" else self.level


class PanelRender(_Frame, frozen=True, tag="panel_render"):
    """One-way: draw the open panel ``panel_id`` again (a non-empty ``title`` replaces
    the title; ``lines`` and ``footer`` replace theirs)."""

    panel_id: str
    title: str = ""
    lines: list[str] | None = None
    footer: str = ""


class PanelClose(_Frame, frozen=True, tag="panel_close", omit_defaults=True):
    """One-way, both ways: the extension closes its panel, or the host tells it the
    panel was closed (by the user, a newer panel, the host that cannot show one:
    ``reason``, a corral addition)."""

    panel_id: str
    reason: str = ""


class ShutdownAck(_Frame, frozen=True, tag="shutdown_ack"):
    """The extension is about to exit."""


ExtFrame = (
    Hello
    | RegisterCommand
    | RegisterTool
    | Ready
    | ToolResult
    | Subscribe
    | EventInterceptResponse
    | CommandResponse
    | Notify
    | PanelRender
    | PanelClose
    | ShutdownAck
)


# --- host -> extension -------------------------------------------------------


class HelloAck(_Frame, frozen=True, tag="hello_ack"):
    """Sent right after a valid ``hello``."""

    protocol_version: int = PROTOCOL_VERSION
    corral_version: str = ""
    # Seed-compatible alias: extensions written for the seed read ``zot_version``.
    zot_version: str = ""
    provider: str = ""
    model: str = ""
    cwd: str = ""
    #: The extension's own directory (read-only in a sandbox); omitted when unknown.
    extension_dir: str | msgspec.UnsetType = msgspec.UNSET
    #: Where it may persist its state (``$CORRAL_DATA_DIR``); omitted when
    #: ``permissions.data_dir`` is false.
    data_dir: str | msgspec.UnsetType = msgspec.UNSET


class CommandInvoked(_Frame, frozen=True, tag="command_invoked"):
    """The user ran one of the extension's commands."""

    id: str
    name: str
    args: str = ""


class ToolCall(_Frame, frozen=True, tag="tool_call"):
    """The model called one of the extension's tools."""

    id: str
    name: str
    args: Any = msgspec.field(default_factory=dict)


class Event(_Frame, frozen=True, tag="event", omit_defaults=True):
    """One-way lifecycle notification."""

    event: str
    step: int | None = None
    tool_id: str | None = None
    tool_name: str | None = None
    tool_args: Any = None
    stop: str | None = None
    text: str | None = None


class EventIntercept(_Frame, frozen=True, tag="event_intercept", omit_defaults=True):
    """Gives the extension a chance to block or rewrite an event."""

    id: str
    event: str
    step: int | None = None
    tool_id: str | None = None
    tool_name: str | None = None
    tool_args: Any = None
    text: str | None = None


class PanelKey(_Frame, frozen=True, tag="panel_key", omit_defaults=True):
    """A key pressed while the extension's panel has the focus: a name (``up``,
    ``enter``...), or ``rune`` with the character in ``text``."""

    panel_id: str
    key: str
    text: str = ""


class Shutdown(_Frame, frozen=True, tag="shutdown"):
    """Asks the extension to acknowledge and exit."""


HostFrame = (
    HelloAck | CommandInvoked | ToolCall | Event | EventIntercept | PanelKey | PanelClose | Shutdown
)


# --- codec --------------------------------------------------------------------


class FrameError(Exception):
    """A line from an extension that is not a valid frame.

    Attributes:
        kind: ``"json"`` (not JSON / not an object), ``"unknown_type"`` or ``"invalid"``
            (a known type with wrong fields).
        excerpt: the first bytes of the offending line, for logs.
        frame_type: the ``type`` field when one could be read.
        frame_id: the ``id`` field when one could be read.
    """

    def __init__(
        self,
        kind: str,
        detail: str,
        excerpt: str,
        *,
        frame_type: str | None = None,
        frame_id: str | None = None,
    ) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.excerpt = excerpt
        self.frame_type = frame_type
        self.frame_id = frame_id


#: The ``type`` tags of the frames an extension sends, read off the union.
_EXT_TYPES = frozenset(cls.__struct_config__.tag for cls in typing.get_args(ExtFrame))

_encoder = msgspec.json.Encoder()
_ext_decoder: msgspec.json.Decoder[ExtFrame] = msgspec.json.Decoder(ExtFrame)
_any_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder()

#: :func:`decode_ext_frame` without the diagnosis, for the hot path: raises
#: ``msgspec.DecodeError`` (``ValidationError`` is one too) on a bad line, and
#: :func:`decode_ext_frame` then tells what is wrong with it.
decode_ext_bare = _ext_decoder.decode
#: :func:`encode_frame` without the newline, for the hot path (it adds it itself).
encode_bare = _encoder.encode


def encode_frame(frame: HostFrame | ExtFrame) -> bytes:
    """Encode one frame as a JSON line (with the trailing newline)."""
    buf = _encoder.encode(frame)
    return buf + b"\n"


def excerpt(line: bytes, limit: int = 120) -> str:
    """A short printable excerpt of a raw line, for logs and errors."""
    text = line[:limit].decode("utf-8", "replace")
    return text + ("…" if len(line) > limit else "")


def decode_ext_frame(line: bytes) -> ExtFrame:
    """Decode one line sent by an extension.

    Raises:
        FrameError: the line is not JSON, not an object, has an unknown ``type`` or
            wrong field types.
    """
    try:
        return _ext_decoder.decode(line)
    except msgspec.ValidationError as exc:
        # Slow path, only for bad frames: find out what exactly is wrong.
        try:
            obj = _any_decoder.decode(line)
        except msgspec.DecodeError:
            raise FrameError("json", "not valid JSON", excerpt(line)) from None
        if not isinstance(obj, dict):
            raise FrameError("json", "not a JSON object", excerpt(line)) from None
        ftype = obj.get("type")
        fid = obj.get("id")
        fid = str(fid) if isinstance(fid, str | int) else None
        if not isinstance(ftype, str):
            raise FrameError(
                "invalid", "missing string field 'type'", excerpt(line), frame_id=fid
            ) from None
        if ftype not in _EXT_TYPES:
            raise FrameError(
                "unknown_type",
                f"unknown frame type {ftype!r}",
                excerpt(line),
                frame_type=ftype,
                frame_id=fid,
            ) from None
        raise FrameError(
            "invalid", str(exc), excerpt(line), frame_type=ftype, frame_id=fid
        ) from None
    except msgspec.DecodeError:
        raise FrameError("json", "not valid JSON", excerpt(line)) from None
