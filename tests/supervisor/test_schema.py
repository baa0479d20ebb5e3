"""The config check against a tool host's schema (pure: the JSON Schema subset)."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor._schema import check_schema

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "modules": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
        "port": {"type": "integer", "minimum": 1, "exclusiveMaximum": 65536},
        "mode": {"enum": ["fast", "safe"]},
        "ratio": {"type": ["number", "null"]},
        "nested": {
            "type": "object",
            "properties": {"on": {"type": "boolean"}},
            "additionalProperties": False,
        },
        "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    },
    "required": ["modules"],
}


@pytest.mark.parametrize(
    ("config", "problems"),
    [
        ({"modules": ["a.py"]}, []),
        ({"modules": ["a.py"], "port": 8080, "mode": "safe", "ratio": None, "either": 3}, []),
        ({}, ["config.modules: required, missing"]),
        ({"modules": "a.py"}, ["config.modules: expected array, got 'a.py'"]),
        ({"modules": []}, ["config.modules: must have at least 1 items, got 0"]),
        ({"modules": [""]}, ["config.modules[0]: must have at least 1 characters, got 0"]),
        ({"modules": ["a"], "port": 70000}, ["config.port: must be < 65536, got 70000"]),
        ({"modules": ["a"], "port": 2.5}, ["config.port: expected integer, got 2.5"]),
        ({"modules": ["a"], "port": True}, ["config.port: expected integer, got True"]),
        (
            {"modules": ["a"], "mode": "slow"},
            ["config.mode: expected one of 'fast', 'safe', got 'slow'"],
        ),
        ({"modules": ["a"], "nested": {"on": 1}}, ["config.nested.on: expected boolean, got 1"]),
        (
            {"modules": ["a"], "nested": {"off": 1}},
            ["config.nested.off: not allowed (not in the schema's properties)"],
        ),
        ({"modules": ["a"], "either": []}, ["config.either: fits none of the oneOf choices"]),
    ],
)
def test_problems_name_the_place_and_what_was_expected(
    config: dict[str, Any], problems: list[str]
) -> None:
    assert check_schema(config, SCHEMA) == problems


def test_a_hostile_schema_cannot_hang_or_flood_the_check() -> None:
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(10_000):  # nested far past the depth bound
        deep = {"type": "object", "properties": {"a": deep}}
    value: dict[str, Any] = {}
    cursor = value
    for _ in range(100):
        cursor["a"] = {}
        cursor = cursor["a"]
    assert check_schema(value, deep) == []
    many = {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(1000)}}
    assert len(check_schema({f"k{i}": i for i in range(1000)}, many)) == 10
    # Junk where a schema should be is skipped, not trusted and not crashed on.
    assert check_schema({"a": 1}, {"properties": "junk", "required": 5, "type": 7}) == []
