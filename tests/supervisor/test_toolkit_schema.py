"""The typed tool builder's schemas (``supervisor/_sdk/corral_tools.py``).

Pure: the schema is generated from msgspec Structs in process; stability is also
checked across two fresh interpreters with different hash seeds.
"""

from __future__ import annotations

import enum
import json
import os
import subprocess
import sys
from typing import Annotated, Any, Literal

import msgspec
import pytest

from supervisor._sdk.corral_tools import Tool, raw_tool, tool
from supervisor.lowlevel import SDK_DIR


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Point(msgspec.Struct):
    """A point on the map."""

    x: float
    y: float


class Args(msgspec.Struct, kw_only=True):
    city: Annotated[str, msgspec.Meta(description="the city, e.g. Lyon")]
    klass: str = msgspec.field(name="class", default="economy")
    units: Literal["metric", "imperial"] = "metric"
    color: Color = Color.RED
    level: Level | None = None
    days: Annotated[int, msgspec.Meta(ge=1, le=14, description="how many days")] = 3
    where: Point | None = None
    stops: list[Point] = []


class Tree(msgspec.Struct):
    name: str
    children: list[Tree] = []


class Forest(msgspec.Struct):
    trees: list[Tree]
    biggest: Tree | None = None


@tool
def forecast(args: Args) -> str:
    """Weather forecast for a city.

    The second paragraph is not part of the description.
    """
    return args.city


def test_names_descriptions_and_required() -> None:
    schema = forecast.schema
    assert schema["type"] == "object"
    assert list(schema["properties"]) == [
        "city",
        "class",
        "units",
        "color",
        "level",
        "days",
        "where",
        "stops",
    ]
    assert schema["required"] == ["city"]
    assert schema["properties"]["city"] == {"description": "the city, e.g. Lyon", "type": "string"}
    assert schema["properties"]["class"] == {"type": "string", "default": "economy"}
    assert schema["properties"]["days"] == {
        "description": "how many days",
        "type": "integer",
        "minimum": 1,
        "maximum": 14,
        "default": 3,
    }


def test_enums_from_literal_and_enum_classes() -> None:
    props = forecast.schema["properties"]
    assert props["units"] == {"enum": ["imperial", "metric"], "default": "metric"}  # sorted
    assert props["color"] == {"enum": ["green", "red"], "default": "red"}
    assert props["level"] == {"anyOf": [{"enum": [1, 2]}, {"type": "null"}], "default": None}


def test_nested_structs_are_inlined_without_titles_or_refs() -> None:
    props = forecast.schema["properties"]
    point = {
        "description": "A point on the map.",
        "type": "object",
        "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
        "required": ["x", "y"],
    }
    assert props["where"] == {"anyOf": [point, {"type": "null"}], "default": None}
    assert props["stops"] == {"type": "array", "items": point, "default": []}
    text = json.dumps(forecast.schema)
    assert "$ref" not in text
    assert "$defs" not in text
    assert "title" not in text


def test_recursion_keeps_a_ref_only_where_it_must() -> None:
    @tool
    def grow(args: Tree) -> None:
        """Grow a tree."""

    assert grow.schema == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#"}, "default": []},
        },
        "required": ["name"],
    }

    @tool
    def plant(args: Forest) -> None:
        """Plant a forest."""

    tree = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}, "default": []},
        },
        "required": ["name"],
    }
    assert plant.schema["properties"]["trees"] == {"type": "array", "items": tree}
    assert plant.schema["$defs"] == {"Tree": tree}


STABLE = """
import sys
sys.path.insert(0, {tests!r})
from test_toolkit_schema import forecast, Forest
from supervisor._sdk.corral_tools import tool
import msgspec
@tool
def plant(args: Forest) -> None: pass
sys.stdout.buffer.write(msgspec.json.encode([forecast.spec(), plant.spec()]))
"""


def test_schema_bytes_are_stable_across_interpreters() -> None:
    code = STABLE.format(tests=os.path.dirname(__file__))
    outputs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, env=env, timeout=60, check=True
        )
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0])[0] == forecast.spec()


def test_spec_name_and_description() -> None:
    assert forecast.spec()["name"] == "forecast"
    assert forecast.spec()["description"] == "Weather forecast for a city."
    renamed = tool(name="weather-v2", description="Explicit.")(forecast._fn)
    assert (renamed.name, renamed.description) == ("weather-v2", "Explicit.")
    assert isinstance(renamed, Tool)


def test_a_tool_without_arguments_has_an_empty_object_schema() -> None:
    @tool
    def now(emit: Any, state: Any) -> str:
        return "now"

    assert now.schema == {"type": "object", "properties": {}}
    assert now.call({}).result == "now"


def not_a_struct(args: dict[str, Any]) -> None:
    pass


class Pair(msgspec.Struct, array_like=True):
    a: int


def array_args(args: Pair) -> None:
    pass


def extra_param(args: Args, verbose: bool = False) -> None:
    pass


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (not_a_struct, "annotate 'args' with a msgspec.Struct"),
        (array_args, "array_like"),
        (extra_param, "unsupported parameter 'verbose'"),
    ],
)
def test_bad_tool_functions_are_refused_at_definition(fn: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        tool(fn)


@pytest.mark.parametrize("name", ["", "1abc", "has space", "dot.ted", "é", "x" * 65])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="tool name"):
        tool(name=name)(forecast._fn)


ONE_OF = {
    "type": "object",
    "properties": {
        "target": {"oneOf": [{"$ref": "#/$defs/File"}, {"type": "string", "format": "uri"}]}
    },
    "required": ["target"],
    "$defs": {"File": {"type": "object", "properties": {"path": {"type": "string"}}}},
}


def test_hand_written_form_keeps_its_schema_as_given() -> None:
    @raw_tool(schema=ONE_OF, description="Open a file or a URL.")
    def open_target(args: dict[str, Any], emit: Any) -> str:
        return json.dumps(args["target"])

    assert open_target.spec() == {
        "name": "open_target",
        "description": "Open a file or a URL.",
        "parameters": ONE_OF,
    }
    assert open_target.args_type is None
    assert open_target.call({"target": {"path": "/x"}}).result == '{"path": "/x"}'


@pytest.mark.parametrize("schema", [{"type": "array"}, {"properties": {}}, ["type", "object"]])
def test_hand_written_form_needs_an_object_schema(schema: Any) -> None:
    with pytest.raises(ValueError, match="JSON object schema"):
        raw_tool(schema=schema)


def test_sdk_module_imports_stdlib_only_until_a_typed_tool_is_built() -> None:
    code = (
        f"import sys; sys.path.insert(0, {SDK_DIR!r}); import corral_tools; "
        "print(sorted(m for m in ('msgspec', 'asyncio', 'inspect') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "[]"


class AllOptional(msgspec.Struct):
    tag: str | None = None


def test_an_all_optional_object_has_no_empty_required_list() -> None:
    @tool
    def find(args: AllOptional) -> None:
        """Find."""

    assert find.schema == {
        "type": "object",
        "properties": {"tag": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}},
    }


def test_only_plain_functions_become_tools() -> None:
    with pytest.raises(TypeError, match="not a plain"):
        raw_tool(schema={"type": "object"})(print)
