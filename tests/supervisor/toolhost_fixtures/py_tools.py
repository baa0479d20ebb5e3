"""Python tool module for the runner tests: tools and every optional hook."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Annotated, Any

import msgspec
from corral_tools import ToolError, provider_native, tool

# Calls of ``meet`` wait here until ``n`` of them run at once: only a runner that
# executes calls concurrently can answer them (a sequential one times out).
_meeting: dict[int, threading.Barrier] = {}
_meeting_lock = threading.Lock()


class EchoArgs(msgspec.Struct, kw_only=True):
    text: Annotated[str, msgspec.Meta(description="what to echo")]
    parts: int = 0


class MeetArgs(msgspec.Struct, kw_only=True):
    n: int
    tag: str


class SizeArgs(msgspec.Struct, kw_only=True):
    size: int


@tool
def echo(args: EchoArgs, emit: Any) -> str:
    """Echo the text, streaming `parts` parts first."""
    for i in range(args.parts):
        emit({"part": i})
    return args.text


@tool
def count(state: dict[str, Any]) -> int:
    """Add one to the state's counter."""
    state["count"] = state.get("count", 0) + 1
    return state["count"]


@tool
def meet(args: MeetArgs) -> str:
    """Wait until n calls run at once."""
    with _meeting_lock:
        barrier = _meeting.setdefault(args.n, threading.Barrier(args.n, timeout=20))
    barrier.wait()
    return args.tag


@tool
def length(args: EchoArgs) -> int:
    """The length of the text."""
    return len(args.text)


@tool
def big(args: SizeArgs) -> str:
    """A result of `size` bytes."""
    return "x" * args.size


@tool
def boom() -> str:
    """Raises."""
    raise RuntimeError("kaboom")


@tool
def refuse() -> str:
    """Fails the way the model should see."""
    raise ToolError("refused on purpose")


@tool
def slurp() -> int:
    """Reads stdin to its end: how many bytes it got (the protocol's are not its)."""
    return len(sys.stdin.buffer.read()) + len(os.read(0, 1024))


@tool
def noisy() -> str:
    """Writes to stdout every way it can."""
    print("noise from print")
    sys.stdout.write("noise from sys.stdout\n")
    os.write(1, b"noise from fd 1\n")
    subprocess.run([sys.executable, "-c", "print('noise from a child')"], check=True)
    return "quiet"


def init(config: dict[str, Any]) -> dict[str, Any]:
    return {"count": int(config.get("start", 0))}


def get_config_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {"start": {"type": "integer"}}}


def get_ui_elements() -> list[Any]:
    return [{"kind": "status", "text": "py tools"}]


def get_tags(config: dict[str, Any], models: list[Any]) -> list[str]:
    return ["py", *(m["id"] for m in models if isinstance(m, dict) and "id" in m)]


def required_tags() -> list[str]:
    return ["tools"]


def format_tool_result(result: Any, state: dict[str, Any]) -> Any:
    if isinstance(result, dict) and result.get("result") == "native":
        return provider_native("openai.responses", [{"type": "input_text", "text": "native"}])
    return f"formatted: {result.get('result') if isinstance(result, dict) else result}"


def format_tool_call_preview(tool_name: str, arguments: dict[str, Any]) -> str:
    return f"py preview of {tool_name}"


def to_display_format(text: str, result: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"markdown": f"**{text}**", "count": state.get("count")}
