"""corral_tools: turn typed Python functions into model-callable tools.

The arguments of a tool are a :class:`msgspec.Struct`; its JSON Schema is generated
from the Struct (wire names from ``msgspec.field(name=...)``, descriptions from
``Annotated[..., msgspec.Meta(description=...)]``, enums from ``Literal`` or
:class:`enum.Enum`, optional fields from defaults or ``T | None``)::

    from typing import Annotated, Literal
    import msgspec
    from corral_tools import tool

    class Args(msgspec.Struct, kw_only=True):
        city: Annotated[str, msgspec.Meta(description="city name")]
        units: Literal["metric", "imperial"] = "metric"

    @tool
    def weather(args: Args) -> str:
        \"\"\"Current weather for a city.\"\"\"
        return f"{args.city}: 21 degrees ({args.units})"

    weather.call({"city": "Lyon"}).to_wire()
    # {'success': True, 'result': 'Lyon: 21 degrees (metric)'}

A tool function takes the arguments first, then optionally ``emit`` (a callback
sending a streaming ``part`` to the caller) and ``state`` (the host's JSON state
object, mutable), recognised by name. It may be ``async``. It returns text, a list
of content blocks (:func:`text_block`, :func:`image_block`) or any JSON value; it
raises :class:`ToolError` for a failure the model should see. For a schema that
reflection cannot express (``oneOf``, ``$ref``) use :func:`raw_tool`: you give the
schema and the function gets the arguments as a dict, with the same dispatch.

Decoding is repair-aware: valid arguments take the strict msgspec path; what small
models get wrong (see :class:`Repair`) is repaired and reported in
:attr:`Outcome.repairs`; anything else becomes an error result naming the field,
e.g. ``city: expected a string, got 3``. Truncated JSON is never completed: a cut-off
``content`` argument must not be written as if it were whole.

:func:`run` makes a standalone tool program (``--describe`` / ``--call``).

The module imports only the standard library at import time; msgspec is imported
when a typed tool is built or arguments need decoding, so a host of raw tools
starts without it.
"""

from __future__ import annotations

import _thread
import sys

# Not typing, json, enum or collections: a tool host imports this module before it
# answers init, and each of them costs a start a sizeable share of the interpreter's own.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import enum
    from collections.abc import Callable, Sequence
    from typing import IO, Any, Final, NoReturn, final, overload

    import msgspec
else:

    def final(cls):
        return cls

    def overload(fn):
        return fn


__all__ = [
    "ArgumentError",
    "Emit",
    "Outcome",
    "Repair",
    "Tool",
    "ToolError",
    "image_block",
    "provider_native",
    "raw_tool",
    "run",
    "text_block",
    "tool",
]

if TYPE_CHECKING:
    JSONObject = dict[str, Any]
    Emit = Callable[[Any], None]
else:  # the same, as far as the runtime cares (without importing typing)
    from _collections_abc import Callable  # collections.abc, which imports collections

    JSONObject = dict
    Emit = Callable[[object], None]
"""``emit(payload)`` sends ``payload`` as a streaming ``part`` of the running call."""

_CO_COROUTINE: Final = 0x80  # inspect.CO_COROUTINE, without importing inspect
_EXTRA_PARAMS: Final = ("emit", "state")
_MAX_NAME: Final = 64
_VALUE_EXCERPT: Final = 60


if TYPE_CHECKING:

    class Repair(enum.Enum):
        """A fix applied to a model's arguments before they decoded."""

        CODE_FENCE = "code_fence"  # ```json ... ``` around the object
        JSON_STRING = "json_string"  # a JSON string holding the object
        TRAILING_COMMA = "trailing_comma"  # {"a": 1,}
        CONTROL_CHAR = "control_char"  # a raw newline / tab inside a string
        INVALID_ESCAPE = "invalid_escape"  # "C:\dir", "it\'s": the backslash is kept literally
        SINGLE_QUOTES = "single_quotes"  # {'a': 'b'} (Python repr)
        PYTHON_LITERAL = "python_literal"  # True / False / None outside strings
        LOOSE_TYPES = "loose_types"  # "3" for an integer, "true" for a boolean

else:
    # Repair (the class above) is made at its first use: only repairs need it, and they
    # import msgspec, which imports enum anyway. Its values are its names in lower case.
    _REPAIR_NAMES = (
        "CODE_FENCE",
        "JSON_STRING",
        "TRAILING_COMMA",
        "CONTROL_CHAR",
        "INVALID_ESCAPE",
        "SINGLE_QUOTES",
        "PYTHON_LITERAL",
        "LOOSE_TYPES",
    )
    _repair_lock = _thread.allocate_lock()

    def _repair_enum():
        global Repair
        with _repair_lock:  # one class, even when two calls repair at once
            if "Repair" not in globals():
                import enum

                members = [(name, name.lower()) for name in _REPAIR_NAMES]
                Repair = enum.Enum("Repair", members, module=__name__, qualname="Repair")
                Repair.__doc__ = "A fix applied to a model's arguments before they decoded."
        return Repair

    def __getattr__(name):
        if name == "Repair":
            return _repair_enum()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ToolError(Exception):
    """A failure the model should see: the call returns ``success: false``.

    Args:
        message: the error text given to the model.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ArgumentError(ToolError):
    """The arguments do not fit the tool's schema, even after repair.

    Attributes:
        path: where the problem is (``city``, ``inner.tags[0]``; ``arguments`` for
            the whole object).
        problem: what is wrong there (``expected a string, got 3``).
        repairs: repairs applied before the problem was found.
    """

    def __init__(self, path: str, problem: str, repairs: tuple[Repair, ...] = ()) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
        self.repairs = repairs


# --- results ------------------------------------------------------------------


def text_block(text: str) -> JSONObject:
    """A ``{"type": "text"}`` content block."""
    return {"type": "text", "text": text}


def image_block(data: bytes | str, mime_type: str = "image/png") -> JSONObject:
    """A ``{"type": "image"}`` content block; raw ``bytes`` are base64-encoded here."""
    if isinstance(data, bytes | bytearray | memoryview):
        import base64

        data = base64.b64encode(data).decode("ascii")
    return {"type": "image", "mime_type": mime_type, "data": data}


def provider_native(format: str, content: Any) -> JSONObject:
    """The explicit ``provider_native_tool_result`` envelope ``format_tool_result`` may return.

    Args:
        format: ``"openai.chat_completions"`` or ``"openai.responses"``.
        content: the provider's own tool-output value, passed to it unchanged.
    """
    return {"type": "provider_native_tool_result", "format": format, "content": content}


@final
class Outcome:
    """What one call produced: a result or an error text, and the repairs applied.

    Attributes:
        result: the JSON-able result (text, content blocks or any JSON) when it succeeded.
        error: the error text the model sees, or None when it succeeded.
        repairs: what was repaired in the arguments (empty on the strict path).
    """

    __slots__ = ("error", "repairs", "result")

    def __init__(
        self, result: Any = None, error: str | None = None, repairs: tuple[Repair, ...] = ()
    ) -> None:
        self.result = result
        self.error = error
        self.repairs = repairs

    @property
    def ok(self) -> bool:
        """True when the call succeeded."""
        return self.error is None

    def to_wire(self) -> JSONObject:
        """The tool-host result shape: ``{success, result}`` or ``{success: false, error}``.

        Repairs are listed under ``repairs`` (an extra field peers may ignore).
        """
        wire: JSONObject = (
            {"success": True, "result": self.result}
            if self.error is None
            else {"success": False, "error": self.error}
        )
        if self.repairs:
            wire["repairs"] = [r.value for r in self.repairs]
        return wire

    def __repr__(self) -> str:
        return f"Outcome(result={self.result!r}, error={self.error!r}, repairs={self.repairs!r})"


def _jsonable(value: Any) -> Any:
    """A tool's return value as JSON builtins (Structs, bytes, enums converted)."""
    if value is None:
        return ""
    if isinstance(value, str | int | float | bool):
        return value
    msgspec = sys.modules.get("msgspec")
    # Without msgspec loaded no Struct can be in there; json.dumps reports the rest.
    return value if msgspec is None else msgspec.to_builtins(value)


# --- tools ----------------------------------------------------------------------


def _check_name(name: str) -> str:
    valid = (
        0 < len(name) <= _MAX_NAME
        and name.isascii()
        and (name[0].isalpha() or name[0] == "_")
        and all(c.isalnum() or c in "_-" for c in name)
    )
    if not valid:
        raise ValueError(f"tool name {name!r} must be 1-{_MAX_NAME} ASCII letters, digits, _ or -")
    return name


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


@final
class Tool:
    """A model-callable tool: name, description, argument schema, and its function.

    Build one with :func:`tool` or :func:`raw_tool`; hosts call :meth:`call`.

    Attributes:
        name: the tool's name.
        description: what the model is told it does.
        schema: the JSON Schema (an object schema) of its arguments.
        args_type: the msgspec Struct of the arguments, or None for a raw tool.
    """

    __slots__ = (
        "_convert",
        "_decoder",
        "_errors",
        "_fn",
        "_has_args",
        "_is_async",
        "_wants",
        "args_type",
        "description",
        "name",
        "schema",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None,
        description: str | None,
        schema: JSONObject,
        args_type: type[msgspec.Struct] | None,
    ) -> None:
        code = getattr(fn, "__code__", None)
        if code is None:
            raise TypeError(f"{fn!r} is not a plain (async) function")
        name = name if name is not None else fn.__name__
        self.name = _check_name(name)
        self.description = description if description is not None else _first_paragraph(fn.__doc__)
        self.schema = schema
        self.args_type = args_type
        self._fn = fn
        params = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        self._has_args = bool(params) and params[0] not in _EXTRA_PARAMS
        extra = params[1:] if self._has_args else params
        unknown = [p for p in extra if p not in _EXTRA_PARAMS]
        if unknown:
            raise TypeError(
                f"tool {name!r}: unsupported parameter {unknown[0]!r}; "
                "a tool function takes (args[, emit][, state])"
            )
        self._wants = tuple(p for p in extra if p in _EXTRA_PARAMS)
        self._is_async = bool(code.co_flags & _CO_COROUTINE)
        self._decoder: msgspec.json.Decoder[Any] | None = None
        self._convert: Callable[..., Any] = _drop
        self._errors: tuple[type[Exception], ...] = ()
        if args_type is not None:
            import msgspec

            # Bound once: the strict path is the hot path (see bench/bench_toolkit.py).
            self._decoder = msgspec.json.Decoder(args_type)
            self._convert = msgspec.convert
            self._errors = (msgspec.ValidationError, msgspec.DecodeError)

    def __repr__(self) -> str:
        kind = "raw" if self.args_type is None else self.args_type.__name__
        return f"<Tool {self.name!r} ({kind})>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (tests, composition)."""
        return self._fn(*args, **kwargs)

    @property
    def takes_state(self) -> bool:
        """Whether the function declares a ``state`` parameter: a tool without one
        can neither read nor change the host's state (a host serves it as stateless)."""
        return "state" in self._wants

    def spec(self) -> JSONObject:
        """The tool's spec: ``{"name", "description", "parameters"}``."""
        return {"name": self.name, "description": self.description, "parameters": self.schema}

    def decode(self, arguments: Any) -> tuple[Any, tuple[Repair, ...]]:
        """Decode ``arguments`` (a dict, or JSON text as str/bytes); strict first, then repaired.

        Returns:
            The arguments (a Struct, or a dict for a raw tool) and the repairs applied.

        Raises:
            ArgumentError: the arguments do not fit, even after repair.
        """
        decoder = self._decoder
        if decoder is not None:
            try:
                if type(arguments) is dict:
                    return self._convert(arguments, decoder.type), ()
                return decoder.decode(arguments), ()
            except self._errors:
                pass  # the slow path finds out what is wrong, and repairs what it can
            except TypeError:
                pass  # neither a dict nor JSON text: the slow path says what it is
        elif isinstance(arguments, dict):
            return arguments, ()
        return _decode_repaired(arguments, self.args_type, self.schema)

    def call(self, arguments: Any, *, emit: Emit | None = None, state: Any = None) -> Outcome:
        """Decode the arguments and run the function.

        Args:
            arguments: a dict, or JSON text (str/bytes) as the model produced it.
            emit: receives each streaming part the tool sends (default: dropped).
            state: the state object handed to a tool that takes ``state`` (default: ``{}``).

        Returns:
            The outcome; argument errors and :class:`ToolError` are error outcomes.

        Raises:
            Exception: whatever else the tool function raised (a bug, not a result).
        """
        bound = self._bind(arguments, emit, state)
        if isinstance(bound, Outcome):
            return bound
        run, repairs = bound
        try:
            value = run()
            if self._is_async:
                import asyncio

                value = asyncio.run(value)
        except ToolError as exc:
            return Outcome(error=exc.message, repairs=repairs)
        return Outcome(result=_jsonable(value), repairs=repairs)

    async def acall(self, arguments: Any, *, emit: Any = None, state: Any = None) -> Outcome:
        """:meth:`call` for a caller with an event loop: an ``async`` tool function is
        awaited in the caller's loop (trio or asyncio) instead of a loop of its own.

        The same dispatch: repair-aware decoding, ``emit`` and ``state`` handed to the
        function that takes them (``emit`` as the caller gives it: an in-process host
        may pass an async callable to functions written for it), :class:`ToolError`
        as an error outcome.

        Raises:
            Exception: whatever else the tool function raised (a bug, not a result).
        """
        bound = self._bind(arguments, emit, state)
        if isinstance(bound, Outcome):
            return bound
        run, repairs = bound
        try:
            value = run()
            if self._is_async:
                value = await value
        except ToolError as exc:
            return Outcome(error=exc.message, repairs=repairs)
        return Outcome(result=_jsonable(value), repairs=repairs)

    def _bind(
        self, arguments: Any, emit: Any, state: Any
    ) -> Outcome | tuple[Callable[[], Any], tuple[Repair, ...]]:
        """The decoded call, ready to run, and the repairs; or the argument error."""
        try:
            args, repairs = self.decode(arguments)
        except ArgumentError as exc:
            return Outcome(error=exc.message, repairs=exc.repairs)
        extra: JSONObject = {}
        for param in self._wants:
            if param == "emit":
                extra["emit"] = emit if emit is not None else _drop
            else:
                extra["state"] = state if state is not None else {}
        fn, has_args = self._fn, self._has_args
        return (lambda: fn(args, **extra) if has_args else fn(**extra)), repairs


def _drop(payload: Any) -> None:
    """The default ``emit``: parts go nowhere."""


@overload
def tool(
    fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> Tool: ...


@overload
def tool(  # noqa: F811  (overload is typing's, to the type checker)
    fn: None = None, *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(  # noqa: F811
    fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator: a typed function becomes a :class:`Tool`.

    The first parameter's annotation (a msgspec Struct) gives the schema; a function
    without it takes no arguments. Usable bare (``@tool``) or with options.

    Args:
        fn: the function (when used bare).
        name: the tool's name (default: the function's).
        description: what the model is told (default: the docstring's first paragraph).

    Raises:
        TypeError: the arguments are not annotated with a (non array-like) Struct, or
            the function takes parameters other than the arguments, ``emit`` and ``state``.
        ValueError: the name is not a valid tool name.
    """

    def build(fn: Callable[..., Any]) -> Tool:
        args_type = _args_type(fn)
        schema = (
            {"type": "object", "properties": {}} if args_type is None else struct_schema(args_type)
        )
        return Tool(fn, name=name, description=description, schema=schema, args_type=args_type)

    return build if fn is None else build(fn)


def raw_tool(
    *, schema: JSONObject, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]:
    """Decorator: the hand-written form, for what reflection cannot express.

    The function receives the arguments as a dict (JSON-level repairs still apply;
    checking them against ``schema`` is the function's business) plus ``emit`` /
    ``state`` as for :func:`tool`.

    Args:
        schema: the JSON Schema of the arguments; must be an object schema.
        name: the tool's name (default: the function's).
        description: what the model is told (default: the docstring's first paragraph).

    Raises:
        ValueError: ``schema`` is not an object schema, or the name is invalid.
    """
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ValueError(f"schema must be a JSON object schema (type: object), not {schema!r:.80}")

    def build(fn: Callable[..., Any]) -> Tool:
        return Tool(fn, name=name, description=description, schema=schema, args_type=None)

    return build


def _args_type(fn: Callable[..., Any]) -> type[msgspec.Struct] | None:
    code = getattr(fn, "__code__", None)
    if code is None:
        return None  # Tool() says what is wrong with it
    params = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    if not params or params[0] in _EXTRA_PARAMS:
        return None
    import typing

    import msgspec

    hint = typing.get_type_hints(fn).get(params[0])
    if not (isinstance(hint, type) and issubclass(hint, msgspec.Struct)):
        raise TypeError(
            f"tool {fn.__name__!r}: annotate {params[0]!r} with a msgspec.Struct "
            f"(got {hint!r}); use raw_tool() for a hand-written schema"
        )
    if hint.__struct_config__.array_like:
        raise TypeError(f"tool {fn.__name__!r}: {hint.__name__} is array_like; tools take objects")
    return hint


# --- schema ---------------------------------------------------------------------


def struct_schema(args_type: type[msgspec.Struct]) -> JSONObject:
    """The inlined JSON Schema of a Struct.

    Every definition is inlined where it is used; ``$ref`` remains only where a type
    refers to itself (``#`` for the arguments type, ``#/$defs/Name`` otherwise). The
    titles msgspec derives from class names are dropped. The result depends only on
    the type, so the same Struct always gives the same bytes.
    """
    import msgspec

    raw = msgspec.json.schema(args_type)
    defs: dict[str, JSONObject] = raw.get("$defs", {})
    root = args_type.__name__
    kept: dict[str, JSONObject] = {}

    def inline(node: Any, stack: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [inline(item, stack) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = ref.removeprefix("#/$defs/")
            rest = {k: inline(v, stack) for k, v in node.items() if k != "$ref"}
            if target in stack:  # recursion: the only place a $ref survives
                if target != root and target not in kept:
                    kept[target] = {}  # reserve, then fill (may recurse further)
                    kept[target] = inline(_untitled(defs[target]), (target,))
                return {"$ref": "#" if target == root else ref, **rest}
            return {**inline(_untitled(defs[target]), (*stack, target)), **rest}
        # msgspec writes "required": [] for all-optional objects; draft-04 forbids it.
        return {k: inline(v, stack) for k, v in node.items() if not (k == "required" and v == [])}

    schema: JSONObject = inline({"$ref": f"#/$defs/{root}"}, ())
    if kept:
        schema["$defs"] = {name: kept[name] for name in sorted(kept)}
    return schema


def _untitled(definition: JSONObject) -> JSONObject:
    return {k: v for k, v in definition.items() if k != "title"}


# --- repair-aware decoding --------------------------------------------------------


def _decode_repaired(
    arguments: Any, args_type: type[msgspec.Struct] | None, schema: JSONObject
) -> tuple[Any, tuple[Repair, ...]]:
    """The slow path: repair the JSON text, decode it, convert it; or say what is wrong."""
    import msgspec

    if not TYPE_CHECKING:
        _repair_enum()  # defines Repair for the functions below
    repairs: list[Repair] = []
    obj = arguments
    if isinstance(obj, str | bytes | bytearray):
        obj = _parse_json(obj, repairs)
        if isinstance(obj, str):  # a JSON string holding the object (unwrapped once)
            inner = [*repairs, Repair.JSON_STRING]
            try:
                obj = _parse_json(obj, inner)
            except ArgumentError:
                pass  # just text: reported below as what it is
            else:
                repairs = inner
    if not isinstance(obj, dict):
        raise ArgumentError("arguments", f"expected an object, got {_show(obj)}", tuple(repairs))
    if args_type is None:
        return obj, tuple(repairs)
    try:
        return msgspec.convert(obj, args_type), tuple(repairs)
    except msgspec.ValidationError:
        pass
    try:
        value = msgspec.convert(obj, args_type, strict=False)
    except msgspec.ValidationError as exc:
        path, problem = _describe(str(exc), obj, schema)
        raise ArgumentError(path, problem, tuple(repairs)) from None
    return value, (*repairs, Repair.LOOSE_TYPES)


def _parse_json(raw: str | bytes | bytearray, repairs: list[Repair]) -> Any:
    import msgspec

    if isinstance(raw, bytes | bytearray):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise ArgumentError("arguments", "not valid UTF-8", tuple(repairs)) from None
    text = raw.strip()
    if text.startswith("```"):
        first_newline = text.find("\n")
        body = text[first_newline + 1 :] if first_newline >= 0 else ""
        text = body.rstrip().removesuffix("```").strip()
        repairs.append(Repair.CODE_FENCE)
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        first_error = str(exc)
    fixed, found = _repair_text(text)
    try:
        value = msgspec.json.decode(fixed)
    except msgspec.DecodeError:
        raise ArgumentError(
            "arguments", f"not valid JSON ({first_error})", tuple(repairs)
        ) from None
    repairs.extend(r for r in Repair if r in found)  # a stable order
    return value


_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_LITERALS: Final = {"True": "true", "False": "false", "None": "null"}


def _repair_text(text: str) -> tuple[str, set[Repair]]:
    """Rewrite near-JSON into JSON; returns the text and the kinds of fixes made.

    One pass over the text that knows where strings are, so nothing inside a string
    is touched except what makes it a valid JSON string.
    """
    import re

    outside = re.compile(r"[\"',]|\b(?:True|False|None)\b")
    inside = {'"': re.compile(r'["\\\x00-\x1f]'), "'": re.compile(r"['\"\\\x00-\x1f]")}
    out: list[str] = []
    found: set[Repair] = set()
    i, n = 0, len(text)
    while i < n:
        m = outside.search(text, i)
        if m is None:
            out.append(text[i:])
            break
        out.append(text[i : m.start()])
        token = m.group()
        i = m.end()
        if token in _LITERALS:
            out.append(_LITERALS[token])
            found.add(Repair.PYTHON_LITERAL)
        elif token == ",":
            rest = text[i:].lstrip()
            if rest[:1] in ("}", "]"):
                found.add(Repair.TRAILING_COMMA)
            else:
                out.append(",")
        else:
            if token == "'":
                found.add(Repair.SINGLE_QUOTES)
            i = _repair_string(text, i, token, inside[token], out, found)
    return "".join(out), found


def _repair_string(
    text: str, i: int, quote: str, special: Any, out: list[str], found: set[Repair]
) -> int:
    """Copy the string starting after its opening ``quote`` as a JSON string; returns the end."""
    out.append('"')
    n = len(text)
    while i < n:
        m = special.search(text, i)
        if m is None:
            out.append(text[i:])
            return n
        out.append(text[i : m.start()])
        c = m.group()
        i = m.end()
        if c == quote:
            out.append('"')
            return i
        if c == '"':  # inside a single-quoted string
            out.append('\\"')
        elif c == "\\":
            nxt = text[i : i + 1]
            if nxt == "u" and _is_hex4(text[i + 1 : i + 5]):
                out.append("\\u")
                i += 1
            elif nxt and nxt in '"\\/bfnrt':
                out.append("\\" + nxt)
                i += 1
            elif nxt == "'":
                out.append("'")
                i += 1
                if quote == '"':
                    found.add(Repair.INVALID_ESCAPE)
            else:
                out.append("\\\\")
                found.add(Repair.INVALID_ESCAPE)
        else:
            out.append(_ESCAPES.get(c) or f"\\u{ord(c):04x}")
            found.add(Repair.CONTROL_CHAR)
    return n


def _is_hex4(s: str) -> bool:
    return len(s) == 4 and all(c in "0123456789abcdefABCDEF" for c in s)


# --- error messages ------------------------------------------------------------------

_TYPE_WORDS: Final = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "object": "an object",
    "array": "an array",
    "null": "null",
}


def _describe(message: str, obj: Any, schema: JSONObject) -> tuple[str, str]:
    """Turn msgspec's validation message into ``(path, problem)`` in the model's terms."""
    text, _, where = message.partition(" - at `")
    path = where.rstrip("`") if where else "$"
    steps = _path_steps(path)
    if text.startswith("Object missing required field `"):
        field = text.removeprefix("Object missing required field `").rstrip("`")
        return _join([*steps, field]), "required field is missing"
    shown = _show(_walk(obj, steps))
    if text.startswith("Invalid enum value"):
        options = _walk_schema(schema, steps).get("enum")
        allowed = ", ".join(_show(o) for o in options) if isinstance(options, list) else "?"
        return _join(steps), f"expected one of {allowed}, got {shown}"
    if text.startswith("Expected `"):
        expected = text.removeprefix("Expected `")
        kind, _, rest = expected.partition("`")
        words = " or ".join(_TYPE_WORDS.get(k.strip(), k.strip()) for k in kind.split("|"))
        bound = rest.split(", got", 1)[0].strip()
        return _join(steps), f"expected {words}{' ' + bound if bound else ''}, got {shown}"
    return _join(steps), f"{text[:1].lower()}{text[1:]}"


def _path_steps(path: str) -> list[str | int]:
    steps: list[str | int] = []
    for part in path.removeprefix("$").replace("[", ".[").split("."):
        if part.startswith("[") and part.endswith("]") and part[1:-1].isdigit():
            steps.append(int(part[1:-1]))
        elif part:
            steps.append(part)
    return steps


def _join(steps: Sequence[str | int]) -> str:
    text = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps).lstrip(".")
    return text or "arguments"


def _walk(obj: Any, steps: Sequence[str | int]) -> Any:
    for step in steps:
        try:
            obj = obj[step]
        except (KeyError, IndexError, TypeError):
            return None
    return obj


def _walk_schema(schema: JSONObject, steps: Sequence[str | int]) -> JSONObject:
    node: Any = schema
    for step in steps:
        if not isinstance(node, dict):
            return {}
        options = node.get("anyOf")
        if isinstance(options, list):  # T | None: follow the non-null branch
            node = next((o for o in options if o.get("type") != "null"), {})
        node = node.get("items") if isinstance(step, int) else node.get("properties", {}).get(step)
    return node if isinstance(node, dict) else {}


def _show(value: Any) -> str:
    import json

    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _VALUE_EXCERPT else text[: _VALUE_EXCERPT - 1] + "…"


# --- standalone tool programs -----------------------------------------------------------

_USAGE: Final = "usage: {prog} --describe | --call  (arguments as JSON on stdin)\n"


def run(
    one: Tool,
    argv: Sequence[str] | None = None,
    *,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
) -> NoReturn:
    """Be a standalone tool program (the seed's ``toolkit.Run``); exits the process.

    ``--describe`` prints the tool's spec (:meth:`Tool.spec`) as JSON. ``--call``
    reads the arguments as JSON on stdin (repair-aware) and writes ``{"data": result}``
    (exit 0) or ``{"error": text}`` (exit 1); anything else prints the usage (exit 2).
    During the call ``print()`` goes to stderr, and so do streamed parts (as
    ``{"part": payload}`` lines), so stdout holds exactly one JSON document.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    inp = stdin if stdin is not None else sys.stdin.buffer
    out = stdout if stdout is not None else sys.stdout.buffer
    if args == ["--describe"]:
        out.write(_dumps(one.spec()))
        out.flush()
        raise SystemExit(0)
    if args != ["--call"]:
        sys.stderr.write(_USAGE.format(prog=sys.argv[0] or one.name))
        raise SystemExit(2)
    saved, sys.stdout = sys.stdout, sys.stderr
    try:
        outcome = one.call(inp.read(), emit=_part_to_stderr)
    except Exception as exc:
        import traceback

        traceback.print_exc(file=sys.stderr)
        outcome = Outcome(error=f"{type(exc).__name__}: {exc}")
    finally:
        sys.stdout = saved
    if outcome.repairs:
        sys.stderr.write(f"{one.name}: repaired arguments: {_repair_names(outcome.repairs)}\n")
    try:
        data = _dumps({"data": outcome.result} if outcome.ok else {"error": outcome.error})
    except (TypeError, ValueError) as exc:
        outcome = Outcome(error=f"the result is not JSON: {exc}")
        data = _dumps({"error": outcome.error})
    out.write(data)
    out.flush()
    raise SystemExit(0 if outcome.ok else 1)


def _repair_names(repairs: Sequence[Repair]) -> str:
    return ", ".join(r.value for r in repairs)


def _part_to_stderr(payload: Any) -> None:
    import json

    sys.stderr.write(json.dumps({"part": payload}, ensure_ascii=False, default=repr) + "\n")


def _dumps(value: Any) -> bytes:
    import json

    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode() + b"\n"
