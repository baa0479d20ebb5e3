"""Showing agent events to people (and, with ``--json``, to programs).

:class:`HumanRenderer` draws on a :class:`~agent._cli.screen.Terminal`: assistant
text as Markdown (on a terminal; raw text into a pipe or a file, so ``corral run …
> answer.txt`` captures exactly the answer), a spinner while the model or a tool
is awaited with the last lines of a running tool under it, each tool call and its
result on one line with the extension that answered (``← [weather] Berlin: 16°C,
fog``), the model's thinking (``--reasoning``) as dimmed ``┊`` lines among the
notes, once it is complete (never in the answer: ``run``'s stdout stays the answer
alone), blocked turns and errors with their reason, extension notes with the
extension's name in brackets on every line, and token and cost totals.

Whatever came from an extension, a model or a tool is made terminal-safe first
(:mod:`~agent._cli.safe_text`). When the notes stream is not a terminal (stderr
into a pipe or a file), the notes are not drawn at all: the problems among them
are logged as structured events instead (one problem, one line).
:class:`JsonRenderer` writes one event per line, exactly as ``corral rpc`` would
(the data unchanged; JSON escapes it).
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from typing import Any, TextIO

import msgspec

from sandbox.log import get_logger

from .._events import (
    AgentEvent,
    AssistantMessage,
    AssistantStart,
    CompactDone,
    Done,
    ErrorEvent,
    ExtDisplay,
    ExtNotify,
    ExtStatus,
    Retry,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    ToolProgress,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    Usage,
    UsageTotals,
    UserMessage,
    wire_event,
)
from .._messages import TextContent
from .markdown import MarkdownStream
from .safe_text import StreamSanitizer, visible, visible_lines
from .screen import Activity, Terminal

__all__ = ["HumanRenderer", "JsonRenderer", "Style", "clip", "format_usage", "text_of_blocks"]

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
_STATUS_STYLE = {
    "started": "green",
    "restarted": "green",
    "crashed": "red",
    "quarantined": "red",
    "stopped": "dim",
}

log = get_logger()


def format_usage(input_tokens: int, output_tokens: int, cost_usd: float) -> str:
    """``1,234 in · 56 out · $0.0012`` (the cost only when the provider reports one)."""
    text = f"{input_tokens:,} in · {output_tokens:,} out"
    return text + (f" · ${cost_usd:.4f}" if cost_usd else "")


@typing.final
class HumanRenderer:
    """Draws events for a person reading a terminal.

    Args:
        terminal: where to draw.
        markdown: render assistant text as Markdown (else write it raw, as it streams).
        show_user: echo the user's prompt.
        show_usage: after each prompt, print its token and cost totals.
        source_of: tool name to the extension that runs it (None: built-in).

    Notes are drawn whether or not stderr is a terminal (a CI log reads them too);
    the structured log is :mod:`.logs`' business.
    """

    def __init__(
        self,
        terminal: Terminal,
        *,
        markdown: bool = False,
        show_user: bool = False,
        show_usage: bool = False,
        source_of: Callable[[str], str | None] | None = None,
    ) -> None:
        self.terminal = terminal
        self.style = Style(terminal.notes.color_system is not None)
        self._markdown = MarkdownStream(terminal, live_tail=terminal.notes is terminal.answer)
        self._use_markdown = markdown
        self._show_user = show_user
        self._show_usage = show_usage
        self._source_of = source_of
        self._text = StreamSanitizer()
        self._mid_line = False
        self._streamed = False
        self._calls: dict[str, tuple[str, str | None]] = {}
        self._activity: Activity | None = None
        self._told: set[str] = set()
        self._turn_usage = UsageTotals()
        #: The model's thinking of this step, shown once it is complete.
        self._thought: list[str] = []
        #: The session's totals, as the last ``usage`` event reported them.
        self.totals = UsageTotals()
        self.last_stop: str | None = None
        #: The error of the turn that just failed: its ``error`` event repeats it.
        self._turn_error: str | None = None

    def __repr__(self) -> str:
        return f"<HumanRenderer color={self.style.enabled} markdown={self._use_markdown}>"

    def set_source_of(self, source_of: Callable[[str], str | None]) -> None:
        """Where to look up the extension behind a tool (known once the agent is open)."""
        self._source_of = source_of

    async def emit(self, event: AgentEvent) -> None:
        """:data:`~agent.Emit`-compatible wrapper around :meth:`show`.

        Cancellation: not a checkpoint.
        """
        self.show(event)

    def line(self, text: str) -> None:
        """Print one note line; ``text`` must be safe already (it may carry our styles)."""
        self._end_answer_line()
        from rich.text import Text

        self.terminal.print_note(Text.from_ansi(text) if "\x1b" in text else Text(text))

    def note(self, extension: str, text: str, *styles: str) -> None:
        """An extension's note, ``[name] text``, with the prefix on every line of it.

        ``text`` is the extension's own (it is made terminal-safe here), so no line
        of it can pass for another extension's or for corral's.
        """
        prefix = self.style(f"[{visible(extension)}]", "bold", *styles)
        for part in visible_lines(text):
            self.line(f"{prefix} {part}".rstrip())

    def _end_answer_line(self) -> None:
        if self._mid_line:
            self.terminal.write_answer("\n")
            self._mid_line = False

    # --- the live region ------------------------------------------------------------

    def _wait(self, label: str) -> None:
        if not self.terminal.interactive:
            return
        if self._activity is None or self._activity.label != label:
            self._activity = Activity(label)
        self.terminal.show(self._activity)

    def _stop_waiting(self) -> None:
        self._activity = None
        self.terminal.show(None)

    def _running(self) -> str:
        names = sorted({name for name, _ in self._calls.values()})
        return "running " + ", ".join(visible(n) for n in names) + "…"

    # --- events -------------------------------------------------------------------------

    def show(self, event: AgentEvent) -> None:
        """Draw ``event``."""
        if isinstance(event, ThinkingDelta):
            self._thought.append(event.delta)
            return
        if self._thought:
            self._show_thought()
        if isinstance(event, TextDelta):
            self._delta(event.delta)
        elif isinstance(event, AssistantStart):
            self._streamed = False
            self._text = StreamSanitizer()
        elif isinstance(event, AssistantMessage):
            self._finish_text()
        elif isinstance(event, TurnStart):
            self._wait("thinking…")
        elif isinstance(event, Usage):
            self._count(event)
        elif isinstance(event, Done):
            self._done()
        elif isinstance(event, TurnEnd):
            self._turn_end(event)
        elif isinstance(event, ErrorEvent) and event.message == self._turn_error:
            self._turn_error = None  # said once, with the turn's end
        else:
            self._note_event(event)

    def _show_thought(self) -> None:
        thought, self._thought = "".join(self._thought).strip(), []
        if thought:
            for part in visible_lines(thought):
                self.line(self.style(f"┊ {part}".rstrip(), "dim"))

    def _delta(self, delta: str) -> None:
        shown = self._text.feed(delta)
        if not shown:
            return
        if not self._streamed:
            self._streamed = True
            if self._use_markdown and self.terminal.notes is not self.terminal.answer:
                self._wait("writing…")
            elif self._use_markdown:
                self._stop_waiting()
        if self._use_markdown:
            self._markdown.feed(shown)
            return
        self._stop_waiting()
        self.terminal.write_answer(shown)
        self._mid_line = not shown.endswith("\n")

    def _finish_text(self) -> None:
        held = self._text.flush()
        if self._use_markdown:
            if held:
                self._markdown.feed(held)
            self._markdown.finish()
            if self._streamed:
                self._stop_waiting()
        elif held:
            self.terminal.write_answer(held)
            self._mid_line = True
        self._end_answer_line()

    def _note_event(self, event: AgentEvent) -> None:
        s = self.style
        if isinstance(event, UserMessage):
            if self._show_user:
                text = "\n".join(visible_lines(text_of_blocks(event.content)))
                self.line(s("you ›", "bold", "green") + " " + text)
        elif isinstance(event, ToolCallEvent):
            source = self._source_of(event.name) if self._source_of else None
            self._calls[event.id] = (event.name, source)
            self._tool_call(event)
            self._wait(self._running())
        elif isinstance(event, ToolProgress):
            if self._activity is not None and self.terminal.interactive:
                for part in visible_lines(event.text):
                    self._activity.add_line(part)
            elif not self.terminal.interactive:
                self.line(s(f"    … {clip(event.text, 160)}", "dim"))
        elif isinstance(event, ToolResultEvent):
            self._result(event)
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
        elif isinstance(event, Retry):
            self.line(
                s(f"↻ retrying in {round(event.delay, 1):g} s ({visible(event.reason)})", "yellow")
            )

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
        elif event.preview is not None:  # the tool host's own rendering of the call
            self.line(s(f"  → {name}", "yellow") + " " + clip(event.preview, 160))
        else:
            self.line(s(f"  → {name}", "yellow") + " " + s(_args(event.args), "dim"))

    def _result(self, event: ToolResultEvent) -> None:
        s = self.style
        _, source = self._calls.pop(event.id, ("", None))
        who = s(f"[{visible(source)}] ", "bold") if source and source != "builtin" else ""
        body = clip(" ".join(b.text for b in event.content if isinstance(b, TextContent)))
        if event.display is not None and not event.is_error:
            body = clip(display_text(event.display))
        if event.is_error:
            self.line(s("  ✗ ", "red") + who + s(body or "(error)", "red"))
        else:
            self.line(s("  ← ", "green") + who + (body or "(no output)"))
        if self._calls:
            self._wait(self._running())
        else:
            self._stop_waiting()

    def _count(self, event: Usage) -> None:
        t = self._turn_usage
        self._turn_usage = UsageTotals(
            input=t.input + event.input,
            output=t.output + event.output,
            cost_usd=t.cost_usd + event.cost_usd,
        )
        self.totals = event.cumulative

    def _done(self) -> None:
        self._stop_waiting()
        usage, self._turn_usage = self._turn_usage, UsageTotals()
        if self._show_usage:
            text = format_usage(usage.input, usage.output, usage.cost_usd)
            total = format_usage(self.totals.input, self.totals.output, self.totals.cost_usd)
            self.line(self.style(f"  tokens {text} (session: {total})", "dim"))

    def _turn_end(self, event: TurnEnd) -> None:
        s = self.style
        self.last_stop = event.stop
        self._turn_error = event.error if event.stop == "error" else None
        if event.stop != "tool_use":
            self._stop_waiting()
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
        text: str = event.status
        if event.pid is not None:
            text += f" (pid {event.pid})"
        if event.sandboxed is False:
            text += " — UNSANDBOXED"
        if event.detail and event.status == "started":
            # "backend; note; note": the sandbox's notes (memory limited per process,
            # why it runs unsandboxed, with its fix) are the same for every extension
            # and every restart: each is said once per session.
            backend, *notes = visible(event.detail).split("; ")
            fresh = [n for n in notes if n not in self._told]
            self._told.update(fresh)
            text += ": " + "; ".join([backend, *fresh])
            if event.sandboxed is False and len(fresh) < len(notes):
                text += " (why: see above)"
        elif event.detail:
            text += f": {visible(event.detail)}"
        self.note(event.extension, text, _STATUS_STYLE.get(event.status, "blue"))


def text_of_blocks(blocks: list[Any]) -> str:
    """The text blocks of a content list, joined."""
    return "".join(b.text for b in blocks if isinstance(b, TextContent))


def display_text(display: Any) -> str:
    """A tool host's ``to_display_format`` answer as text (pass it through :func:`clip`).

    Its ``markdown`` or ``text`` when it has one, a string as it is, anything else
    as compact JSON.
    """
    if isinstance(display, dict):
        chosen = display.get("markdown", display.get("text"))
        display = chosen if isinstance(chosen, str) else display
    text = display if isinstance(display, str) else json.dumps(display, ensure_ascii=False)
    return text


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
