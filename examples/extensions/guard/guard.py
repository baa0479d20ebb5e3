#!/usr/bin/env python3
"""guard: event subscriptions and all three interceptors, written with the corral_ext SDK.

* Observes session_start, turn_start, tool_call, turn_end and assistant_message and
  writes one audit line per event to stderr (the host keeps it in the extension log).
* ``tool_call``: a ``bash`` command containing ``rm -rf`` is refused; any other
  ``bash`` command is rewritten to ``echo GUARDED: <command>`` (other argument keys
  are kept); other tools pass untouched.
* ``turn_start``: always allowed.
* ``assistant_message``: every ``SECRET`` in the user-visible text becomes
  ``[redacted]`` (the transcript keeps the original).
* ``/guard`` shows how many calls were blocked / rewritten / redacted.
"""

from __future__ import annotations

import shlex
import threading
from typing import Any

from corral_ext import (
    AssistantMessageDecision,
    Extension,
    Response,
    ToolCallDecision,
    TurnStartDecision,
    display,
)

DANGER_PATTERN = "rm -rf"
SECRET = "SECRET"

ext = Extension("guard", "1.0.0")
ext.subscribe("session_start", "turn_start", "tool_call", "turn_end", "assistant_message")

_lock = threading.Lock()
counts = {"blocked": 0, "rewritten": 0, "redacted": 0}


def _bump(key: str) -> None:
    with _lock:
        counts[key] += 1


@ext.on_event
def audit(frame: dict[str, Any]) -> None:
    """One audit line per observed lifecycle event."""
    details = " ".join(f"{k}={v!r}" for k, v in frame.items() if k not in ("type", "event"))
    ext.log(f"event {frame.get('event')} {details}".rstrip())


@ext.intercept_tool_call
def vet_tool_call(tool_name: str, args: dict[str, Any]) -> ToolCallDecision:
    """Refuse ``rm -rf`` in bash, neuter every other bash command, pass other tools."""
    command = args.get("command")
    if tool_name != "bash" or not isinstance(command, str):
        return ToolCallDecision()
    if DANGER_PATTERN in command:
        _bump("blocked")
        ext.log(f"BLOCKED bash: {command}")
        return ToolCallDecision(
            block=True, reason=f'refused: matches danger pattern "{DANGER_PATTERN}"'
        )
    _bump("rewritten")
    # Quoted, so that a command like "ls; rm x" is echoed, not run after the echo.
    return ToolCallDecision(
        modified_args={**args, "command": f"echo GUARDED: {shlex.quote(command)}"}
    )


@ext.intercept_turn_start
def vet_turn_start(step: int) -> TurnStartDecision:
    """Turns are always allowed; the hook is here to show the shape."""
    return TurnStartDecision()


@ext.intercept_assistant_message
def vet_assistant_message(text: str) -> AssistantMessageDecision:
    """Redact every ``SECRET`` in what the user sees."""
    if SECRET not in text:
        return AssistantMessageDecision()
    _bump("redacted")
    return AssistantMessageDecision(replace_text=text.replace(SECRET, "[redacted]"))


@ext.command("guard", "show what the guard blocked, rewrote and redacted")
def guard_command(args: str) -> Response:
    """``/guard``: the counters so far."""
    with _lock:
        snapshot = dict(counts)
    return display(
        "guard: blocked={blocked} rewritten={rewritten} redacted={redacted}".format(**snapshot)
    )


if __name__ == "__main__":
    ext.run()
