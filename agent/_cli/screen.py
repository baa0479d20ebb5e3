"""The terminal the human renderer draws on: permanent lines, one live region, the prompt.

A :class:`Terminal` has two streams: the *answer* stream (stdout: what ``corral run
… > answer.txt`` captures) and the *notes* stream (tool calls, extension notes,
warnings, the spinner: stderr for ``run``, stdout for ``chat``, which shows
everything in one place). Each is a rich console; colour follows ``--color`` and
``NO_COLOR``, and the live parts (spinner, the streaming tail of an answer, the
last lines of a running tool) are drawn only where the stream is a terminal.

There is one live region, always on the notes console. Printing a permanent line
puts it above that region. When the answer stream is a different console, the
region is taken down (it is transient) while the answer is printed, then drawn
again, so two consoles never draw over each other.

While the chat's line editor shows its prompt, :attr:`Terminal.above` is set and
every permanent line goes through it: it is printed above the prompt, never over
it.

Everything printed here is either corral's own text or text already made
terminal-safe by :mod:`~agent._cli.safe_text`; nothing is read as rich markup.
"""

from __future__ import annotations

import time
import typing
from collections.abc import Callable
from typing import TextIO

from .term import ColorMode, is_terminal, wants_color

if typing.TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.live import Live

__all__ = ["Activity", "PlainConsole", "Terminal", "make_console"]


@typing.final
class PlainConsole:
    """What ``corral run`` needs of a console on a pipe or a file without colour:
    the stream, written raw (rich is not imported for it).

    The answer is written raw there (no Markdown), and notes are drawn only on a
    terminal, so nothing is printed through it; a line printed anyway is written
    as its plain text.
    """

    is_interactive = False
    color_system = None

    def __init__(self, file: TextIO) -> None:
        self.file = file

    def __repr__(self) -> str:
        return f"<PlainConsole {self.file!r}>"

    def print(self, renderable: RenderableType, end: str = "\n") -> None:
        """Write the plain text of ``renderable`` (a string or a rich ``Text``)."""
        self.file.write(str(getattr(renderable, "plain", renderable)) + end)


def make_console(
    stream: TextIO, mode: ColorMode | None = None, *, plain: bool = False
) -> Console | PlainConsole:
    """A rich console on ``stream``: coloured as ``--color`` says, live only on a terminal.

    With ``plain``, a stream that is not a terminal and wants no colour gets a
    :class:`PlainConsole` instead (for output that is only ever written raw).
    """
    tty = is_terminal(stream)
    color = wants_color(stream, mode)
    if plain and not tty and not color:
        return PlainConsole(stream)
    from rich.console import Console

    return Console(
        file=stream,
        force_terminal=color or tty,
        force_interactive=tty,
        no_color=not color,
        color_system="auto" if color else None,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,  # a note is one line; the terminal wraps it, as it would any text
    )


@typing.final
class Activity:
    """The live region while waiting: a spinner, what is awaited, and the last lines of output.

    Rendered afresh on every refresh, so the elapsed time counts up by itself.
    """

    def __init__(self, label: str, *, tail: int = 4) -> None:
        # Only an interactive terminal draws one: a pipe never pays for the import
        # (rich.spinner pulls in rich.table and decimal).
        from rich.spinner import Spinner

        self.label = label
        self.started = time.monotonic()
        self._spinner = Spinner("dots", style="cyan")
        self._lines: list[str] = []
        self._tail = tail

    def __repr__(self) -> str:
        return f"<Activity {self.label!r} lines={len(self._lines)}>"

    def add_line(self, line: str) -> None:
        """Remember a line of output (already terminal-safe); only the last few are shown."""
        self._lines.append(line)
        del self._lines[: -self._tail]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.console import Group
        from rich.text import Text

        elapsed = time.monotonic() - self.started
        head = Text.assemble(self.label, (f"  {elapsed:.0f}s", "dim"))
        self._spinner.text = head
        parts: list[RenderableType] = [self._spinner]
        width = max(options.max_width - 6, 10)
        for line in self._lines:
            clipped = line if len(line) <= width else line[: width - 1] + "…"
            parts.append(Text("    │ " + clipped, style="dim", no_wrap=True, overflow="crop"))
        yield Group(*parts)


@typing.final
class Terminal:
    """Where human output goes: an answer console, a notes console, one live region."""

    def __init__(
        self, answer: Console | PlainConsole, notes: Console | PlainConsole | None = None
    ) -> None:
        self.answer = answer
        self.notes = notes if notes is not None else answer
        #: Set by the line editor while its prompt is shown: prints go above the prompt.
        self.above: Callable[[str], None] | None = None
        self._live: Live | None = None
        self._shown: RenderableType | None = None

    def __repr__(self) -> str:
        return f"<Terminal live={self._shown is not None} shared={self.notes is self.answer}>"

    @property
    def interactive(self) -> bool:
        """True when the notes stream is a terminal (a spinner can be drawn)."""
        return self.notes.is_interactive

    def _print(
        self, console: Console | PlainConsole, renderable: RenderableType, end: str = "\n"
    ) -> None:
        if self.above is not None:
            # Only the chat's line editor sets it, and the chat draws on rich consoles.
            assert not isinstance(console, PlainConsole)
            with console.capture() as captured:
                console.print(renderable, end=end)
            self.above(captured.get())
            return
        if self._live is not None and console is not self.notes:
            self._take_down()
            console.print(renderable, end=end)
            console.file.flush()
            self._put_up()
            return
        console.print(renderable, end=end)
        console.file.flush()

    def print_answer(self, renderable: RenderableType, end: str = "\n") -> None:
        """Print part of the answer, permanently."""
        self._print(self.answer, renderable, end)

    def print_note(self, renderable: RenderableType) -> None:
        """Print a note (tool line, extension note, warning), permanently."""
        self._print(self.notes, renderable)

    def write_answer(self, text: str) -> None:
        """Write raw answer text (no newline added, no rendering); for a pipe or a file."""
        if self._live is not None and self.answer is not self.notes:
            self._take_down()
            self.answer.file.write(text)
            self.answer.file.flush()
            self._put_up()
            return
        self.answer.file.write(text)
        self.answer.file.flush()

    def show(self, renderable: RenderableType | None) -> None:
        """Put ``renderable`` in the live region (None takes the region down)."""
        self._shown = renderable
        if renderable is None:
            self._take_down()
        elif self.interactive and self.above is None:
            if self._live is None:
                self._put_up()
            else:
                self._live.update(renderable, refresh=True)

    def _put_up(self) -> None:
        if self._shown is None or isinstance(self.notes, PlainConsole) or not self.interactive:
            return
        from rich.live import Live  # as Spinner: only for a terminal

        # rich refreshes from its own thread (animation); its console lock orders the writes.
        self._live = Live(
            self._shown,
            console=self.notes,
            transient=True,
            refresh_per_second=8,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def _take_down(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()

    def close(self) -> None:
        """Take the live region down for good."""
        self._shown = None
        self._take_down()
