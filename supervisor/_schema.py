"""A small JSON Schema check: a tool host's ``config`` against its ``get_config_schema``.

corral checks a tool host's ``config`` before ``init`` with the schema the host
declares. Config schemas are small and plain, so this checks the common subset of
JSON Schema (draft 2020-12 and older): ``type``, ``enum``, ``const``, ``properties``,
``required``, ``additionalProperties``, ``items``, ``minItems`` / ``maxItems``,
``minLength`` / ``maxLength``, ``minimum`` / ``maximum`` (and their exclusive forms),
``allOf`` / ``anyOf`` / ``oneOf``. Other keywords (``$ref``, ``pattern``, ``format``
...) are not checked: the host's own ``init`` is the last word. The schema comes
from the host, so it is treated as untrusted data: malformed parts are skipped,
depth is bounded, and the problems reported are capped.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["check_schema"]

#: Deepest schema nesting followed (a hostile schema may nest without end).
_MAX_DEPTH = 32
#: At most this many problems are reported.
_MAX_PROBLEMS = 10

_NUMERIC = (
    ("minimum", ">="),
    ("maximum", "<="),
    ("exclusiveMinimum", ">"),
    ("exclusiveMaximum", "<"),
)
_OPS: Mapping[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}
_TYPES: Mapping[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}


def check_schema(value: Any, schema: Any, where: str = "config") -> list[str]:
    """What is wrong with ``value`` under ``schema``: ``"config.port: expected an integer"``.

    Returns:
        The problems found (at most 10), each naming the place; empty when it fits.
    """
    problems: list[str] = []
    _check(value, schema, where, problems, 0)
    return problems[:_MAX_PROBLEMS]


def _type_ok(value: Any, name: str) -> bool:
    kinds = _TYPES.get(name)
    if kinds is None:
        return True  # an unknown type name is the schema's problem, not the config's
    if isinstance(value, bool) and name in ("number", "integer"):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, kinds)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _check(value: Any, schema: Any, where: str, problems: list[str], depth: int) -> None:
    if len(problems) >= _MAX_PROBLEMS or depth > _MAX_DEPTH or not isinstance(schema, dict):
        return
    before = len(problems)
    kind = schema.get("type")
    names = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else None
    if names is not None and not any(_type_ok(value, n) for n in names if isinstance(n, str)):
        expected = " or ".join(n for n in names if isinstance(n, str))
        problems.append(f"{where}: expected {expected}, got {_show(value)}")
        return
    if "const" in schema and value != schema["const"]:
        problems.append(f"{where}: must be {_show(schema['const'])}, got {_show(value)}")
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        listed = ", ".join(_show(e) for e in enum[:10])
        problems.append(f"{where}: expected one of {listed}, got {_show(value)}")
    _bounds(value, schema, where, problems)
    if isinstance(value, dict):
        _object(value, schema, where, problems, depth)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                _check(item, items, f"{where}[{index}]", problems, depth + 1)
    if len(problems) == before:
        _combinations(value, schema, where, problems, depth)


def _bounds(value: Any, schema: dict[str, Any], where: str, problems: list[str]) -> None:
    def limit(key: str) -> float | None:
        bound = schema.get(key)
        ok = isinstance(bound, int | float) and not isinstance(bound, bool)
        return bound if ok else None

    if isinstance(value, int | float) and not isinstance(value, bool):
        for key, word in _NUMERIC:
            bound = limit(key)
            if bound is not None and not _OPS[word](value, bound):
                problems.append(f"{where}: must be {word} {bound:g}, got {_show(value)}")
    sized = (
        ("minLength", "maxLength", "characters")
        if isinstance(value, str)
        else ("minItems", "maxItems", "items")
        if isinstance(value, list)
        else None
    )
    if sized is not None:
        low, high = limit(sized[0]), limit(sized[1])
        if low is not None and len(value) < low:
            problems.append(f"{where}: must have at least {low:g} {sized[2]}, got {len(value)}")
        if high is not None and len(value) > high:
            problems.append(f"{where}: must have at most {high:g} {sized[2]}, got {len(value)}")


def _object(
    value: dict[str, Any], schema: dict[str, Any], where: str, problems: list[str], depth: int
) -> None:
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = schema.get("required")
    for name in required if isinstance(required, list) else ():
        if isinstance(name, str) and name not in value:
            problems.append(f"{where}.{name}: required, missing")
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in props:
            _check(item, props[key], f"{where}.{key}", problems, depth + 1)
        elif extra is False:
            problems.append(f"{where}.{key}: not allowed (not in the schema's properties)")
        elif isinstance(extra, dict):
            _check(item, extra, f"{where}.{key}", problems, depth + 1)


def _combinations(
    value: Any, schema: dict[str, Any], where: str, problems: list[str], depth: int
) -> None:
    for key in ("allOf", "anyOf", "oneOf"):
        options = schema.get(key)
        if not isinstance(options, list) or not options:
            continue
        results = [_nested(value, option, where, depth) for option in options[:16]]
        fits = sum(1 for r in results if not r)
        if key == "allOf":
            problems.extend(p for r in results for p in r)
        elif key == "anyOf" and fits == 0:
            problems.append(f"{where}: fits none of the anyOf choices ({results[0][0]})")
        elif key == "oneOf" and fits != 1:
            why = "none" if fits == 0 else f"{fits}, not exactly one,"
            problems.append(f"{where}: fits {why} of the oneOf choices")


def _nested(value: Any, schema: Any, where: str, depth: int) -> list[str]:
    """The problems of ``value`` under one choice of a combination."""
    found: list[str] = []
    _check(value, schema, where, found, depth + 1)
    return found
