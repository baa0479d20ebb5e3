"""Repair-aware decoding, argument errors and results of the typed tool builder.

Pure, in process: each repair alone, then combined; what is deliberately not
repaired; error messages naming the field; the hand-written form; every result
shape; sync and async functions with ``emit`` and ``state``.
"""

from __future__ import annotations

import base64
import enum
from typing import Annotated, Any, Literal

import msgspec
import pytest

from supervisor._sdk.corral_tools import (
    ArgumentError,
    Outcome,
    Repair,
    ToolError,
    image_block,
    provider_native,
    raw_tool,
    text_block,
    tool,
)


class Mode(enum.Enum):
    FAST = "fast"
    SAFE = "safe"


class Inner(msgspec.Struct):
    x: int
    tags: list[str] = []


class Args(msgspec.Struct, kw_only=True):
    city: str
    days: Annotated[int, msgspec.Meta(ge=1)] = 1
    units: Literal["metric", "imperial"] = "metric"
    mode: Mode = Mode.FAST
    note: str | None = None
    inner: Inner | None = None
    flag: bool = False


@tool
def weather(args: Args) -> str:
    """Weather."""
    return f"{args.city}|{args.days}|{args.note}|{args.flag}"


def decoded(arguments: Any) -> tuple[Args, tuple[Repair, ...]]:
    value, repairs = weather.decode(arguments)
    assert isinstance(value, Args)
    return value, repairs


@pytest.mark.parametrize(
    "arguments",
    [{"city": "Lyon", "days": 2}, '{"city": "Lyon", "days": 2}', b'{"city":"Lyon","days":2}'],
)
def test_valid_input_takes_the_strict_path(arguments: Any) -> None:
    value, repairs = decoded(arguments)
    assert (value.city, value.days, repairs) == ("Lyon", 2, ())


@pytest.mark.parametrize(
    ("raw", "city", "repair"),
    [
        ('```json\n{"city": "Lyon"}\n```', "Lyon", Repair.CODE_FENCE),
        ('```\n{"city": "Lyon"}\n```', "Lyon", Repair.CODE_FENCE),
        ('"{\\"city\\": \\"Lyon\\"}"', "Lyon", Repair.JSON_STRING),
        ('{"city": "Lyon",}', "Lyon", Repair.TRAILING_COMMA),
        (
            '{"city": "Lyon", "inner": {"x": 1, "tags": ["a",\n ],\n},\n}',
            "Lyon",
            Repair.TRAILING_COMMA,
        ),
        ('{"city": "Ly\non"}', "Ly\non", Repair.CONTROL_CHAR),
        ('{"city": "Ly\ton\r"}', "Ly\ton\r", Repair.CONTROL_CHAR),
        ('{"city": "C:\\dir\\sub"}', "C:\\dir\\sub", Repair.INVALID_ESCAPE),
        ('{"city": "it\\\'s"}', "it's", Repair.INVALID_ESCAPE),
        ("{'city': 'Lyon'}", "Lyon", Repair.SINGLE_QUOTES),
        ("{'city': 'say \"hi\"'}", 'say "hi"', Repair.SINGLE_QUOTES),
        ("{'city': 'it\\'s'}", "it's", Repair.SINGLE_QUOTES),
        ('{"city": "Lyon", "flag": True, "note": None}', "Lyon", Repair.PYTHON_LITERAL),
        ('{"city": "Lyon", "days": "3"}', "Lyon", Repair.LOOSE_TYPES),
    ],
)
def test_each_repair_alone(raw: str, city: str, repair: Repair) -> None:
    value, repairs = decoded(raw)
    assert value.city == city
    assert repairs == (repair,)


def test_loose_types_convert_numbers_and_booleans() -> None:
    value, repairs = decoded({"city": "Lyon", "days": "3", "flag": "true"})
    assert (value.days, value.flag, repairs) == (3, True, (Repair.LOOSE_TYPES,))


def test_repairs_combined_are_all_reported_in_a_stable_order() -> None:
    raw = "```json\n{'city': 'Ly\non', 'days': '4', 'flag': True, 'note': 'C:\\tmp\\x',}\n```"
    value, repairs = decoded(raw)
    assert (value.city, value.days, value.flag) == ("Ly\non", 4, True)
    assert value.note == "C:\tmp\\x"  # \t is a valid escape; \x is kept literally
    assert repairs == (
        Repair.CODE_FENCE,
        Repair.TRAILING_COMMA,
        Repair.CONTROL_CHAR,
        Repair.INVALID_ESCAPE,
        Repair.SINGLE_QUOTES,
        Repair.PYTHON_LITERAL,
        Repair.LOOSE_TYPES,
    )
    stringified = msgspec.json.encode(raw).decode()  # the whole thing as a JSON string
    _, again = decoded(stringified)
    assert again[0] is Repair.JSON_STRING
    assert set(again) == {Repair.JSON_STRING, *repairs}


def test_text_inside_strings_is_never_rewritten() -> None:
    raw = '{"city": "a, } True None \'q\' ,]", "note": "x",}'
    value, repairs = decoded(raw)
    assert value.city == "a, } True None 'q' ,]"
    assert repairs == (Repair.TRAILING_COMMA,)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ('{"city": "Lyon"', "not valid JSON"),  # truncated: never completed
        ('Here you go: {"city": "Lyon"}', "not valid JSON"),  # prose around it
        ('{"city": "Lyon"} // done', "not valid JSON"),
        ("", "not valid JSON"),
        (b"\xff\xfe", "not valid UTF-8"),
        ("[1, 2]", "expected an object, got [1, 2]"),
        ('"just text"', 'expected an object, got "just text"'),
        ('"\\"{\\\\\\"city\\\\\\": 1}\\""', 'expected an object, got "{\\"city\\": 1}"'),
    ],
)
def test_what_is_not_repaired_is_an_error_on_the_whole_arguments(raw: Any, problem: str) -> None:
    outcome = weather.call(raw)
    assert not outcome.ok
    assert (outcome.error or "").startswith(f"arguments: {problem}")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"city": 3}, "city: expected a string, got 3"),
        ({}, "city: required field is missing"),
        ({"city": "x", "days": 0}, "days: expected an integer >= 1, got 0"),
        ({"city": "x", "days": "many"}, 'days: expected an integer, got "many"'),
        (
            {"city": "x", "units": "kelvin"},
            'units: expected one of "imperial", "metric", got "kelvin"',
        ),
        ({"city": "x", "mode": "warp"}, 'mode: expected one of "fast", "safe", got "warp"'),
        ({"city": "x", "note": 5}, "note: expected a string or null, got 5"),
        ({"city": "x", "inner": {}}, "inner.x: required field is missing"),
        (
            {"city": "x", "inner": {"x": 1, "tags": ["a", 2]}},
            "inner.tags[1]: expected a string, got 2",
        ),
        ({"city": "x", "inner": []}, "inner: expected an object or null, got []"),
        ({"city": "x" * 100, "days": ["y" * 100]}, 'days: expected an integer, got ["yyyy'),
    ],
)
def test_argument_errors_name_the_field_and_what_was_expected(
    arguments: dict[str, Any], message: str
) -> None:
    outcome = weather.call(arguments)
    assert outcome.error is not None
    assert outcome.error.startswith(message)
    assert len(outcome.error) < 120
    assert outcome.to_wire() == {"success": False, "error": outcome.error}
    with pytest.raises(ArgumentError) as info:
        weather.decode(arguments)
    assert info.value.path == message.split(":", 1)[0]


def test_an_error_after_repairs_still_reports_them() -> None:
    outcome = weather.call('{"city": 3,}')
    assert outcome.error == "city: expected a string, got 3"
    assert outcome.repairs == (Repair.TRAILING_COMMA,)
    assert outcome.to_wire() == {
        "success": False,
        "error": "city: expected a string, got 3",
        "repairs": ["trailing_comma"],
    }


@raw_tool(
    schema={
        "type": "object",
        "properties": {"n": {"oneOf": [{"type": "integer"}, {"type": "string"}]}},
    }
)
def handwritten(args: dict[str, Any], state: dict[str, Any]) -> str:
    """Hand-written."""
    if not isinstance(args.get("n"), int | str):
        raise ToolError("n: expected an integer or a string")
    state["seen"] = args["n"]
    return f"n={args['n']}"


def test_hand_written_form_gets_the_dict_and_the_same_repairs() -> None:
    state: dict[str, Any] = {}
    assert handwritten.call({"n": 3}, state=state).result == "n=3"
    assert state == {"seen": 3}
    outcome = handwritten.call("{'n': 'x',}")
    assert (outcome.result, outcome.repairs) == (
        "n=x",
        (Repair.TRAILING_COMMA, Repair.SINGLE_QUOTES),
    )
    assert handwritten.call({"n": 1.5}).error == "n: expected an integer or a string"
    assert handwritten.call("[1]").error == "arguments: expected an object, got [1]"


class Report(msgspec.Struct):
    name: str
    mode: Mode
    raw: bytes


@tool
def shapes(args: Inner) -> Any:
    """Returns a different shape for each x."""
    match args.x:
        case 0:
            return "text"
        case 1:
            return None
        case 2:
            return [text_block("a"), image_block(b"\x89PNG", "image/png")]
        case 3:
            return Report(name="r", mode=Mode.SAFE, raw=b"\x00\x01")
        case 4:
            return {"n": 1, "items": [1, 2]}
        case 5:
            raise ToolError("five is refused")
        case _:
            raise KeyError("unexpected")


@pytest.mark.parametrize(
    ("x", "wire"),
    [
        (0, {"success": True, "result": "text"}),
        (1, {"success": True, "result": ""}),
        (
            2,
            {
                "success": True,
                "result": [
                    {"type": "text", "text": "a"},
                    {
                        "type": "image",
                        "mime_type": "image/png",
                        "data": base64.b64encode(b"\x89PNG").decode(),
                    },
                ],
            },
        ),
        (3, {"success": True, "result": {"name": "r", "mode": "safe", "raw": "AAE="}}),
        (4, {"success": True, "result": {"n": 1, "items": [1, 2]}}),
        (5, {"success": False, "error": "five is refused"}),
    ],
)
def test_results_become_the_wire_shape(x: int, wire: dict[str, Any]) -> None:
    assert shapes.call({"x": x}).to_wire() == wire


def test_other_exceptions_propagate_to_the_host() -> None:
    with pytest.raises(KeyError, match="unexpected"):
        shapes.call({"x": 9})


def test_image_block_takes_base64_text_as_is() -> None:
    assert image_block("AAE=", "image/jpeg") == {
        "type": "image",
        "mime_type": "image/jpeg",
        "data": "AAE=",
    }


def test_provider_native_envelope() -> None:
    assert provider_native("openai.chat_completions", [{"type": "text", "text": "t"}]) == {
        "type": "provider_native_tool_result",
        "format": "openai.chat_completions",
        "content": [{"type": "text", "text": "t"}],
    }


@tool
async def countdown(args: Inner, emit: Any, state: dict[str, Any]) -> str:
    """Async, streams parts, keeps state."""
    for i in range(args.x, 0, -1):
        emit({"left": i})
    state["runs"] = state.get("runs", 0) + 1
    return "liftoff"


def test_async_functions_with_emit_and_state() -> None:
    parts: list[Any] = []
    state: dict[str, Any] = {"runs": 1}
    outcome = countdown.call({"x": 3}, emit=parts.append, state=state)
    assert isinstance(outcome, Outcome)
    assert (outcome.result, outcome.error) == ("liftoff", None)
    assert parts == [{"left": 3}, {"left": 2}, {"left": 1}]
    assert state == {"runs": 2}
    # Without a caller's emit or state the parts are dropped and the state is fresh.
    assert countdown.call({"x": 2}).result == "liftoff"


def test_the_function_stays_callable_directly() -> None:
    assert weather(Args(city="Nice")) == "Nice|1|None|False"
