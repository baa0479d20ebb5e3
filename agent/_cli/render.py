"""Showing agent events to people (and, with ``--json``, to programs).

:class:`HumanRenderer` prints assistant text as it streams, tool calls and their
results in one line each, blocked turns and errors with their reason, and
extension notes with the extension's name in brackets on every line. Whatever
came from an extension, a model or a tool is made terminal-safe first
(:mod:`~agent._cli.safe_text`). :class:`JsonRenderer` writes one event per line,
exactly as ``corral rpc`` would (the data unchanged; JSON escapes it).
"""

from __future__ import annotations

import json
import typing
from typing import Any, TextIO

import msgspec

from .._events import (
    AgentEvent,
    AssistantMessage,
    AssistantStart,
    CompactDone,
    ErrorEvent,
    ExtDisplay,
    ExtNotify,
    ExtStatus,
    TextDelta,
    ToolCallEvent,
    ToolProgress,
    ToolResultEvent,
    TurnEnd,
    Usage,
    UserMessage,
    wire_event,
)
from .._messages import TextContent
from .safe_text import StreamSanitizer, visible, visible_lines

__all__ = ["HumanRenderer", "JsonRenderer", "Style", "clip"]

_encoder = msgspec.json.Encoder()


def clip(text: str, limit: int = 200) -> str:
    """``text`` on one line, at most ``limit`` characters, made terminal-safe."""
    flat = " ".join(text.split())
    flat = flat if len(flat) <= limit else flat[: limit - 1] + "…"
    return visible(flat)


@typing.final
class Style:
    """ANSI styling that turns itself off when colour is not wanted."""

    _CODES: typing.ClassVar[dict[str, str]] = {
        "bold": "1",
        "dim": "2",
        "red": "31",
        "green": "32",
        "yellow": "33",
        "blue": "34",
        "magenta": "35",
        "cyan": "36",
    }

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __repr__(self) -> str:
        return f"<Style enabled={self.enabled}>"

    def __call__(self, text: str, *styles: str) -> str:
        """``text`` wrapped in the escape codes of ``styles``."""
        if not self.enabled or not styles:
            return text
        codes = ";".join(self._CODES[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"


_LEVEL_STYLE = {"info": "blue", "success": "green", "warn": "yellow", "error": "red"}


@typing.final
class HumanRenderer:
    """Prints events for a person reading a terminal."""

    def __init__(
        self,
        out: TextIO,
        *,
        color: bool | None = None,
        show_user: bool = False,
        show_usage: bool = False,
    ) -> None:
        self._out = out
        enabled = color if color is not None else bool(getattr(out, "isatty", lambda: False)())
        self.style = Style(enabled)
        self._show_user = show_user
        self._show_usage = show_usage
        self._mid_line = False
        self._streamed = False
        self._text = StreamSanitizer()
        self.last_stop: str | None = None

    def __repr__(self) -> str:
        return f"<HumanRenderer color={self.style.enabled}>"

    async def emit(self, event: AgentEvent) -> None:
        """:data:`~agent.Emit`-compatible wrapper around :meth:`show`.

        Cancellation: not a checkpoint.
        """
        self.show(event)

    def line(self, text: str) -> None:
        """Print one line, ending a streamed line first; ``text`` must be safe already."""
        self._break()
        self._out.write(text + "\n")
        self._out.flush()

    def note(self, extension: str, text: str, *styles: str) -> None:
        """An extension's note, ``[name] text``, with the prefix on every line of it.

        ``text`` is the extension's own (it is made terminal-safe here), so no line
        of it can pass for another extension's or for corral's.
        """
        prefix = self.style(f"[{visible(extension)}]", "bold", *styles)
        for part in visible_lines(text):
            self.line(f"{prefix} {part}".rstrip())

    def _break(self) -> None:
        if self._mid_line:
            self._out.write("\n")
            self._mid_line = False

    def show(self, event: AgentEvent) -> None:
        """Print ``event``."""
        s = self.style
        if isinstance(event, TextDelta):
            if not self._streamed:
                self._break()
                self._out.write(s("●", "cyan") + " ")
                self._streamed = True
            shown = self._text.feed(event.delta)
            self._out.write(shown)
            if shown:
                self._mid_line = not shown.endswith("\n")
            self._out.flush()
        elif isinstance(event, AssistantStart):
            self._streamed = False
            self._text = StreamSanitizer()
        elif isinstance(event, AssistantMessage):
            held = self._text.flush()
            if held:
                self._out.write(held)
                self._mid_line = True
            self._break()
        elif isinstance(event, UserMessage):
            if self._show_user:
                text = "\n".join(visible_lines(text_of_blocks(event.content)))
                self.line(s("you ›", "bold", "green") + " " + text)
        elif isinstance(event, ToolCallEvent):
            self._tool_call(event)
        elif isinstance(event, ToolProgress):
            self.line(s(f"    … {clip(event.text, 160)}", "dim"))
        elif isinstance(event, ToolResultEvent):
            body = clip(" ".join(b.text for b in event.content if isinstance(b, TextContent)))
            if event.is_error:
                self.line(s("  ✗ ", "red") + s(body or "(error)", "red"))
            else:
                self.line(s("  ← ", "green") + (body or "(no output)"))
        elif isinstance(event, TurnEnd):
            self._turn_end(event)
        elif isinstance(event, Usage):
            if self._show_usage:
                self.line(s(f"  [tokens in {event.input} out {event.output}]", "dim"))
        elif isinstance(event, ErrorEvent):
            self.line(s(f"! {visible(event.message)}", "red"))
        elif isinstance(event, CompactDone):
            self.line(s(f"(compacted the transcript into {len(event.summary)} characters)", "dim"))
        elif isinstance(event, ExtNotify):
            self.note(event.extension, event.message, _LEVEL_STYLE.get(event.level, "blue"))
        elif isinstance(event, ExtDisplay):
            self.note(event.extension, event.text, "magenta")
        elif isinstance(event, ExtStatus):
            self._status(event)

    def _tool_call(self, event: ToolCallEvent) -> None:
        """The call; a rewrite shows the args that run, and names who rewrote them."""
        s = self.style
        name = visible(event.name)
        if event.blocked_by is not None:
            who = s(f"(blocked by [{visible(event.blocked_by)}])", "red", "bold")
            self.line(s(f"  → {name}", "yellow") + f" {who} " + s(_args(event.args), "dim"))
        elif event.ran_args is not None:
            names = ", ".join(f"[{visible(n)}]" for n in event.rewritten_by)
            who = s(f"(rewritten by {names})", "magenta", "bold")
            self.line(s(f"  → {name}", "yellow") + f" {who} " + _args(event.ran_args))
            self.line(s(f"    the model asked for {_args(event.args)}", "dim"))
        else:
            self.line(s(f"  → {name}", "yellow") + " " + s(_args(event.args), "dim"))

    def _turn_end(self, event: TurnEnd) -> None:
        s = self.style
        self.last_stop = event.stop
        error = visible(event.error) if event.error else None
        if event.stop == "blocked":
            self.line(s(f"✖ turn blocked — {error or 'no reason given'}", "red", "bold"))
        elif event.stop == "error":
            self.line(s(f"✖ model error — {error or 'unknown'}", "red", "bold"))
        elif event.stop == "aborted":
            self.line(s("⏹ turn cancelled", "yellow"))
        elif event.stop == "length":
            self.line(s("(the answer hit the model's length limit)", "dim"))

    def _status(self, event: ExtStatus) -> None:
        styles = {
            "started": "green",
            "restarted": "green",
            "crashed": "red",
            "quarantined": "red",
            "stopped": "dim",
        }
        text: str = event.status
        if event.pid is not None:
            text += f" (pid {event.pid})"
        if event.sandboxed is False:
            text += " — UNSANDBOXED"
        if event.detail:
            # One line: a crash report quotes the extension's stderr.
            text += f": {visible(event.detail)}"
        self.note(event.extension, text, styles.get(event.status, "blue"))


def text_of_blocks(blocks: list[Any]) -> str:
    """The text blocks of a content list, joined."""
    return "".join(b.text for b in blocks if isinstance(b, TextContent))


def _args(args: dict[str, Any]) -> str:
    return clip(json.dumps(args, ensure_ascii=False), 160)


@typing.final
class JsonRenderer:
    """Writes each event as one JSON line (the RPC wire shape)."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self.last_stop: str | None = None

    def __repr__(self) -> str:
        return "<JsonRenderer>"

    async def emit(self, event: AgentEvent) -> None:
        """Write ``event``.

        Cancellation: not a checkpoint.
        """
        self.show(event)

    def show(self, event: AgentEvent) -> None:
        """Write ``event`` as one line and flush."""
        if isinstance(event, TurnEnd):
            self.last_stop = event.stop
        self._out.write(_encoder.encode(wire_event(event)).decode("utf-8") + "\n")
        self._out.flush()
