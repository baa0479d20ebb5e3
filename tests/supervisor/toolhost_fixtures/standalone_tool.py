"""A standalone tool program (corral_tools.run) for the run() tests."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from corral_tools import ToolError, run, tool


class Args(msgspec.Struct, kw_only=True):
    a: int
    b: int = 0
    mode: Literal["add", "fail", "raise", "noisy", "unjson"] = "add"


@tool
def add(args: Args, emit: Any) -> Any:
    """Add two integers."""
    if args.mode == "fail":
        raise ToolError("asked to fail")
    if args.mode == "raise":
        raise ZeroDivisionError("oops")
    if args.mode == "unjson":
        return {"n": float("nan")}
    if args.mode == "noisy":
        print("printed by the tool")
        emit({"step": 1})
    return args.a + args.b


if __name__ == "__main__":
    run(add)
