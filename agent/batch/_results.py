"""Results: one JSON object per line of ``RESULTS.jsonl``, one per task.

::

    {"id": "t1", "status": "done", "answer": "All tests pass.", "stop": "end_turn",
     "steps": 3, "usage": {"input": 812, "output": 95, ...},
     "tool_calls": [{"name": "bash", "source": "builtin", "args": {...}, "is_error": false}],
     "extensions": [{"name": "chaos", "state": "running", "crashes": 1, "restarts": 1, ...}],
     "duration": 1.93, "started": "2026-11-28T10:00:00Z", "node": "local:4711",
     "attempts": 1, "error": null, "meta": null}

``status`` is ``done`` (the model answered), ``error`` (the session could not
start, the model failed, a turn was blocked, the step limit was reached),
``timeout`` (the task's ``timeout`` passed) or ``cancelled`` (the batch was
stopped while it ran).
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from .._events import UsageTotals

__all__ = ["ExtensionReport", "Result", "Status", "ToolCallRecord", "result_decoder"]


class Status(enum.Enum):
    """How a task ended."""

    #: The model answered (``stop`` is ``end_turn``, or ``length`` when cut off).
    DONE = "done"
    #: It could not start, the model failed, a turn was blocked, or steps ran out.
    ERROR = "error"
    #: Its ``timeout`` passed; the session was stopped.
    TIMEOUT = "timeout"
    #: The batch was stopped while it ran (Ctrl-C); ``--resume`` runs it again.
    CANCELLED = "cancelled"


class ToolCallRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call of the session, as the model asked for it and how it ended."""

    name: str
    #: ``builtin`` or the name of the extension that serves the tool.
    source: str = ""
    args: dict[str, Any] = {}
    #: The arguments that ran, when an extension rewrote them.
    ran_args: dict[str, Any] | None = None
    #: The extension that blocked the call (it did not run).
    blocked_by: str | None = None
    is_error: bool = False
    #: The start of the error text, for failed calls.
    error: str | None = None


class ExtensionReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one extension went through in the session."""

    name: str
    #: Its state when the session ended (``running``, ``quarantined``, ``failed``...).
    state: str
    sandboxed: bool = False
    crashes: int = 0
    restarts: int = 0
    quarantined: bool = False
    #: Tool calls it served, failed and timed out.
    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    #: Why it is not running, or what its last crash said.
    problem: str = ""


class Result(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one task: a line of the results file."""

    id: str
    status: Status
    #: The last answer of the model, as the user would see it.
    answer: str = ""
    #: How the last model call ended (``end_turn``, ``length``, ``error``, ...).
    stop: str | None = None
    #: Model calls made.
    steps: int = 0
    usage: UsageTotals = UsageTotals()
    tool_calls: list[ToolCallRecord] = []
    extensions: list[ExtensionReport] = []
    #: Seconds from the start of the session to its end.
    duration: float = 0.0
    #: When the session started (UTC, ISO 8601).
    started: str = ""
    #: Where it ran: ``local:<pid>``, or ``ray:<node id>:<pid>``.
    node: str = ""
    #: Runs it took (more than 1 when a worker or node was lost and it ran again).
    attempts: int = 1
    error: str | None = None
    #: The transcript's file, when ``--transcripts`` was given.
    transcript: str | None = None
    #: The task's ``meta``, as given.
    meta: Any = None


#: Decodes one results line.
result_decoder = msgspec.json.Decoder(Result)
