"""Client side of the tool-host wire (seed ``tool-host-protocol.md``, v1).

The client writes :class:`Request` lines; the host answers each with an
:class:`OkResponse` or :class:`ErrorResponse`, after zero or more :class:`HostEvent`
lines (streaming ``part`` s) carrying the same id. Host messages are told apart by
their keys (``ok`` or ``event``), not by a tag, so :func:`decode_host_message`
decodes one permissive Struct and builds the typed message from it. Unknown extra
fields are ignored everywhere (peers may extend the protocol); a line that is not a
usable message raises :class:`HostWireError` saying why. Whether a response's id
belongs to a pending call is the caller's business.

The helpers at the end read the values of particular methods: the tool list of
``get_tool_schemas``, the ``{success, result}`` / ``{success: false, error}`` shape
of ``execute_tool`` (and its result as content blocks) and the text-or-envelope
answer of ``format_tool_result``.
"""

from __future__ import annotations

import enum
import typing
from typing import Any, Final, final

import msgspec

from ._frames import ContentBlock, TextBlock, excerpt

__all__ = [
    "OPTIONAL_METHODS",
    "TOOLHOST_PROTOCOL_VERSION",
    "ErrorInfo",
    "ErrorResponse",
    "EventBody",
    "ExecuteValue",
    "HostErrorType",
    "HostEvent",
    "HostMessage",
    "HostWireError",
    "Method",
    "NativeFormat",
    "OkResponse",
    "ProviderNativeToolResult",
    "Request",
    "Result",
    "SchemaProblem",
    "ToolSchema",
    "WireErrorKind",
    "decode_execute_value",
    "decode_formatted_result",
    "decode_host_message",
    "decode_tool_schemas",
    "encode_request",
    "json_excerpt",
    "native_text",
    "result_content",
]

TOOLHOST_PROTOCOL_VERSION: Final = 1


class Method(enum.StrEnum):
    """The methods of protocol v1."""

    INIT = "init"  # required: ({config}) -> state
    GET_TOOL_SCHEMAS = "get_tool_schemas"  # required: ({state}) -> [schema]
    EXECUTE_TOOL = "execute_tool"  # required: ({tool_name, arguments, state}) -> result
    GET_CONFIG_SCHEMA = "get_config_schema"  # () -> object schema
    GET_UI_ELEMENTS = "get_ui_elements"  # () -> [object]
    GET_TAGS = "get_tags"  # ({config, models}) -> [string]
    REQUIRED_TAGS = "required_tags"  # () -> [string]
    FORMAT_TOOL_RESULT = "format_tool_result"  # ({result, state}) -> string | envelope
    FORMAT_TOOL_CALL_PREVIEW = "format_tool_call_preview"  # ({tool_name, arguments, state})
    TO_DISPLAY_FORMAT = "to_display_format"  # ({text, result, state}) -> object


OPTIONAL_METHODS: Final = frozenset(Method) - {
    Method.INIT,
    Method.GET_TOOL_SCHEMAS,
    Method.EXECUTE_TOOL,
}


class HostErrorType(enum.StrEnum):
    """``error.type`` values corral's own runners send; other hosts may send any text."""

    UNKNOWN_METHOD = "UnknownMethod"  # the host does not provide the method: stop asking
    INVALID_REQUEST = "InvalidRequest"  # not JSON, not an object, bad method/params
    UNSUPPORTED_VERSION = "UnsupportedVersion"  # v is not 1
    NOT_INITIALIZED = "NotInitialized"  # init has not succeeded yet
    INVALID_CONFIG = "InvalidConfig"  # config (modules) missing or wrong
    UNKNOWN_TOOL = "UnknownTool"  # execute_tool for a name the host lacks
    INVALID_RESULT = "InvalidResult"  # a tool or hook returned something unusable
    REQUEST_TOO_LARGE = "RequestTooLarge"  # the request line was over the host's limit
    RESULT_TOO_LARGE = "ResultTooLarge"  # the answer would be over the 16 MiB limit


class NativeFormat(enum.StrEnum):
    """Formats of the ``provider_native_tool_result`` envelope corral passes through."""

    OPENAI_CHAT_COMPLETIONS = "openai.chat_completions"
    OPENAI_RESPONSES = "openai.responses"


# --- messages ---------------------------------------------------------------------


class Request(msgspec.Struct, frozen=True, kw_only=True):
    """A client request: ``{"v": 1, "id", "method", "params"}``."""

    v: int = TOOLHOST_PROTOCOL_VERSION
    id: str
    method: str
    params: dict[str, Any] = msgspec.field(default_factory=dict)


class Result(msgspec.Struct, frozen=True, kw_only=True):
    """The ``result`` of a successful response; ``state`` is present when round-tripped."""

    value: Any = None
    state: dict[str, Any] | None = None


#: The start and the end of a host's stack that its log keeps (characters).
_STACK_END = 2000


class ErrorInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The ``error`` of a failed response."""

    type: str = "Error"
    detail: str = ""
    stack: str = ""


class EventBody(msgspec.Struct, frozen=True, kw_only=True):
    """The ``event`` of a streaming message; ``type == "part"`` carries a partial chunk."""

    type: str
    payload: Any = None


class OkResponse(msgspec.Struct, frozen=True, kw_only=True):
    """``{"v", "id", "ok": true, "result": {value, state?}}``."""

    v: int = TOOLHOST_PROTOCOL_VERSION
    id: str
    result: Result = Result()


class ErrorResponse(msgspec.Struct, frozen=True, kw_only=True):
    """``{"v", "id", "ok": false, "error": {type, detail, stack}}``."""

    v: int = TOOLHOST_PROTOCOL_VERSION
    id: str
    error: ErrorInfo = ErrorInfo()

    def describe(self) -> str:
        """``type: detail`` (or the type alone), for logs and results."""
        return f"{self.error.type}: {self.error.detail}" if self.error.detail else self.error.type

    def logged(self) -> str:
        """:meth:`describe` and the host's ``stack``, for the host's log (never for the
        model): a long stack keeps its first and last :data:`_STACK_END` characters."""
        stack = self.error.stack.strip()
        if len(stack) > 2 * _STACK_END:
            cut = len(stack) - 2 * _STACK_END
            stack = f"{stack[:_STACK_END]}\n[{cut} characters]\n{stack[-_STACK_END:]}"
        return f"{self.describe()}\n{stack}" if stack else self.describe()


class HostEvent(msgspec.Struct, frozen=True, kw_only=True):
    """``{"v", "id", "event": {type, payload}}``, sent before the response of its call."""

    v: int = TOOLHOST_PROTOCOL_VERSION
    id: str
    event: EventBody


HostMessage = OkResponse | ErrorResponse | HostEvent


class _Incoming(msgspec.Struct, frozen=True, kw_only=True):
    """Every key a host message may have; which ones are set decides its kind."""

    v: int | None = None
    id: str | None = None
    ok: bool | None = None
    result: Result | None = None
    error: ErrorInfo | None = None
    event: EventBody | None = None


class WireErrorKind(enum.Enum):
    """Why a host line is not a usable message."""

    JSON = "json"  # not valid JSON, or not a JSON object
    NO_ID = "no_id"  # no string id: it cannot be matched to a call
    VERSION = "version"  # v is missing or is not 1
    SHAPE = "shape"  # neither a response nor an event, or a field of the wrong type


@final
class HostWireError(Exception):
    """A line from a tool host that is not a usable message.

    Attributes:
        kind: why (see :class:`WireErrorKind`).
        detail: what exactly is wrong, for logs.
        excerpt: the start of the offending line.
        message_id: the line's id when one could be read (the caller may fail that call).
        version: the line's ``v`` when one could be read.
    """

    def __init__(
        self,
        kind: WireErrorKind,
        detail: str,
        excerpt: str,
        *,
        message_id: str | None = None,
        version: object = None,
    ) -> None:
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind
        self.detail = detail
        self.excerpt = excerpt
        self.message_id = message_id
        self.version = version


_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder(_Incoming)
_any_decoder: Final = msgspec.json.Decoder()


def encode_request(request: Request) -> bytes:
    """One request as a JSON line, with its newline."""
    return _encoder.encode(request) + b"\n"


def decode_host_message(line: bytes) -> HostMessage:
    """Decode one line a tool host sent.

    Raises:
        HostWireError: the line is not JSON, has no string id, a ``v`` other than 1,
            or is neither a response nor an event.
    """
    try:
        msg = _decoder.decode(line)
    except msgspec.ValidationError as exc:
        raise _diagnose(line, str(exc)) from None
    except msgspec.DecodeError:
        raise HostWireError(WireErrorKind.JSON, "not valid JSON", excerpt(line)) from None
    if msg.id is None:
        raise HostWireError(WireErrorKind.NO_ID, "no id", excerpt(line), version=msg.v)
    if msg.v != TOOLHOST_PROTOCOL_VERSION:
        raise _version_error(line, msg.id, msg.v)
    if msg.ok is True:
        return OkResponse(v=msg.v, id=msg.id, result=msg.result or Result())
    if msg.ok is False:
        error = msg.error or ErrorInfo(detail="the host gave no error details")
        return ErrorResponse(v=msg.v, id=msg.id, error=error)
    if msg.event is not None:
        return HostEvent(v=msg.v, id=msg.id, event=msg.event)
    raise HostWireError(
        WireErrorKind.SHAPE,
        "neither a response (no 'ok') nor an event (no 'event')",
        excerpt(line),
        message_id=msg.id,
        version=msg.v,
    )


def _version_error(line: bytes, message_id: str, version: object) -> HostWireError:
    return HostWireError(
        WireErrorKind.VERSION,
        f"protocol version {version!r}, expected {TOOLHOST_PROTOCOL_VERSION}",
        excerpt(line),
        message_id=message_id,
        version=version,
    )


def _diagnose(line: bytes, problem: str) -> HostWireError:
    """The slow path, only for bad lines: say what exactly is wrong."""
    try:
        obj = _any_decoder.decode(line)
    except msgspec.DecodeError:  # validation can stop before the JSON breaks
        return HostWireError(WireErrorKind.JSON, "not valid JSON", excerpt(line))
    if not isinstance(obj, dict):
        return HostWireError(WireErrorKind.JSON, "not a JSON object", excerpt(line))
    raw_id, version = obj.get("id"), obj.get("v")
    if not isinstance(raw_id, str):
        detail = "no id" if raw_id is None else f"id must be a string, not {raw_id!r:.40}"
        return HostWireError(WireErrorKind.NO_ID, detail, excerpt(line), version=version)
    if type(version) is not int or version != TOOLHOST_PROTOCOL_VERSION:
        return _version_error(line, raw_id, version)
    return HostWireError(
        WireErrorKind.SHAPE, problem, excerpt(line), message_id=raw_id, version=version
    )


# --- method values ------------------------------------------------------------------


class ToolSchema(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of ``get_tool_schemas``: ``parameters`` is a JSON object schema.

    Hosts name the schema ``parameters``, ``input_schema`` or ``schema``; this holds
    it as ``parameters`` whichever it was. ``stateless`` (corral's extension, the
    runners say it) promises that the tool neither reads nor changes the state: its
    calls go without one, beside the others.
    """

    name: str
    description: str = ""
    parameters: dict[str, Any]
    stateless: bool = False


class SchemaProblem(msgspec.Struct, frozen=True, kw_only=True):
    """An entry of ``get_tool_schemas`` that was skipped, and why."""

    index: int
    name: str | None
    detail: str


class _RawSchema(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str = ""
    parameters: Any = None
    input_schema: Any = None
    schema: Any = None
    stateless: Any = None  # only ``true`` counts: anything else is "may use the state"


class ExecuteValue(msgspec.Struct, frozen=True, kw_only=True):
    """The value of ``execute_tool``: ``{success, result}`` or ``{success: false, error}``.

    ``repairs`` lists what corral's runners repaired in the arguments (their extension).
    """

    success: bool
    result: Any = None
    error: str = ""
    repairs: list[str] = []


class ProviderNativeToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """The explicit envelope ``format_tool_result`` may return instead of text."""

    type: str = "provider_native_tool_result"
    format: NativeFormat
    content: Any = None


def decode_tool_schemas(value: Any) -> tuple[list[ToolSchema], list[SchemaProblem]]:
    """Read the value of ``get_tool_schemas``: the usable tools and the skipped entries.

    An entry is skipped when it is not an object with a string ``name``, or when its
    schema is not a JSON object schema (``type: object``).

    Raises:
        HostWireError: the value is not a list at all (kind ``SHAPE``).
    """
    if not isinstance(value, list):
        detail = f"get_tool_schemas answered {type(value).__name__}, not a list"
        raise HostWireError(WireErrorKind.SHAPE, detail, json_excerpt(value))
    tools: list[ToolSchema] = []
    problems: list[SchemaProblem] = []
    for index, entry in enumerate(value):
        name = entry.get("name") if isinstance(entry, dict) else None
        name = name if isinstance(name, str) else None
        try:
            raw = msgspec.convert(entry, _RawSchema)
        except msgspec.ValidationError as exc:
            problems.append(SchemaProblem(index=index, name=name, detail=str(exc)))
            continue
        schema = next(
            (s for s in (raw.parameters, raw.input_schema, raw.schema) if s is not None), None
        )
        if not isinstance(schema, dict) or schema.get("type") != "object":
            detail = f"schema is not a JSON object schema (type: object): {json_excerpt(schema)}"
            problems.append(SchemaProblem(index=index, name=raw.name, detail=detail))
            continue
        tools.append(
            ToolSchema(
                name=raw.name,
                description=raw.description,
                parameters=schema,
                stateless=raw.stateless is True,
            )
        )
    return tools, problems


def decode_execute_value(value: Any) -> ExecuteValue:
    """Read the value of ``execute_tool``.

    Raises:
        HostWireError: it is not ``{success: bool, ...}`` (kind ``SHAPE``).
    """
    try:
        return msgspec.convert(value, ExecuteValue)
    except msgspec.ValidationError as exc:
        detail = f"execute_tool value is not {{success, result|error}}: {exc}"
        raise HostWireError(WireErrorKind.SHAPE, detail, json_excerpt(value)) from None


def decode_formatted_result(value: Any) -> str | ProviderNativeToolResult | None:
    """Read the value of ``format_tool_result``.

    Returns:
        None when the host had no opinion (``null``: render it the default way); the
        explicit ``provider_native_tool_result`` envelope of a known format; otherwise
        text (a string as is, any other value as compact JSON: compatibility text).
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and value.get("type") == "provider_native_tool_result":
        try:
            return msgspec.convert(value, ProviderNativeToolResult)
        except msgspec.ValidationError:
            pass  # an unknown format is compatibility text like any other object
    return _encoder.encode(value).decode()


def result_content(result: Any) -> list[ContentBlock]:
    """A successful ``execute_tool`` result as content blocks.

    Text is one text block (``null``: an empty one); a list of ``{"type": "text"}`` /
    ``{"type": "image"}`` blocks is those blocks; any other JSON is its compact text.
    """
    if isinstance(result, str):
        return [TextBlock(text=result)]
    if result is None:
        return [TextBlock(text="")]
    if isinstance(result, list) and result and all(_is_block(b) for b in result):
        try:
            return msgspec.convert(result, list[ContentBlock])
        except msgspec.ValidationError:
            pass  # not quite blocks: shown as the JSON it is
    return [TextBlock(text=_encoder.encode(result).decode())]


def _is_block(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") in ("text", "image")


def native_text(content: Any) -> str:
    """The text of a ``provider_native_tool_result``'s content, for every other provider:
    a string as is, a list of parts with ``text`` joined by lines, anything else as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        if texts and len(texts) == len(content) and all(isinstance(t, str) for t in texts):
            return "\n".join(typing.cast(list[str], texts))
    return _encoder.encode(content).decode()


def json_excerpt(value: Any, limit: int = 120) -> str:
    """A short printable excerpt of ``value`` as JSON (its ``repr`` if it is not JSON)."""
    try:
        raw = _encoder.encode(value)
    except (TypeError, ValueError):
        raw = repr(value).encode()
    return excerpt(raw, limit)
