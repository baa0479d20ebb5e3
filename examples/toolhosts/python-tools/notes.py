"""notes: an example tool module for corral's Python tool-host runner.

Three tools built with corral_tools (the typed builder):

* ``add_note`` / ``list_notes`` keep the notes in the host's state, which the
  client sends with every call and gets back updated (state round-trip);
* ``countdown`` streams one ``part`` per tick before its final answer;

and two optional hooks: ``get_config_schema`` (the ``max_notes`` setting, read by
``init``) and ``format_tool_call_preview`` (the one-line preview of a call).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import msgspec
from corral_tools import Emit, ToolError, tool


class AddNote(msgspec.Struct, kw_only=True):
    text: Annotated[str, msgspec.Meta(min_length=1, description="the note")]
    tag: Annotated[str | None, msgspec.Meta(description="an optional tag")] = None


class ListNotes(msgspec.Struct, kw_only=True):
    tag: Annotated[str | None, msgspec.Meta(description="only notes with this tag")] = None


class Countdown(msgspec.Struct, kw_only=True):
    start: Annotated[int, msgspec.Meta(ge=1, le=10, description="seconds to count down")] = 3
    interval_ms: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 200


@tool
def add_note(args: AddNote, state: dict[str, Any]) -> str:
    """Remember a short note for later in this session."""
    notes = state.setdefault("notes", [])
    if len(notes) >= state.get("max_notes", 20):
        raise ToolError(f"there are already {len(notes)} notes; that is the limit")
    notes.append({"text": args.text, "tag": args.tag})
    return f"noted ({len(notes)} so far)"


@tool
def list_notes(args: ListNotes, state: dict[str, Any]) -> str:
    """List the notes taken so far, optionally only those with one tag."""
    notes = [n for n in state.get("notes", []) if args.tag is None or n["tag"] == args.tag]
    if not notes:
        return "no notes"
    return "\n".join(f"- {n['text']}" + (f" [{n['tag']}]" if n["tag"] else "") for n in notes)


@tool
def countdown(args: Countdown, emit: Emit) -> str:
    """Count down, reporting each tick as it happens."""
    for left in range(args.start, 0, -1):
        emit({"left": left})
        time.sleep(args.interval_ms / 1000)
    return "liftoff"


def init(config: dict[str, Any]) -> dict[str, Any]:
    """The initial state: no notes yet, and the configured limit."""
    return {"notes": [], "max_notes": int(config.get("max_notes", 20))}


def get_config_schema() -> dict[str, Any]:
    """The settings this module reads from the host's config."""
    return {
        "type": "object",
        "properties": {
            "max_notes": {"type": "integer", "minimum": 1, "description": "at most this many notes"}
        },
    }


def format_tool_call_preview(tool_name: str, arguments: dict[str, Any]) -> str | None:
    """``add note: "buy milk"`` instead of the raw JSON; None leaves other tools alone."""
    if tool_name == "add_note":
        return f'add note: "{str(arguments.get("text", ""))[:40]}"'
    return None


def get_ui_elements() -> list[dict[str, str]]:
    """What a UI may show about this host (``corral ext list --json``, RPC ``ext_list``)."""
    return [{"kind": "status", "text": "notes live in this session's state"}]
