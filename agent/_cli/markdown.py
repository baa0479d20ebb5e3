"""Assistant text rendered as Markdown while it streams.

A model's answer arrives in pieces. Each *block* (the text up to a blank line
outside a code fence) is printed once, rendered, as soon as it is complete; the
unfinished last block is shown in the live region (chat) until it completes, so
nothing printed is ever redrawn and the terminal's scrollback stays clean.
Code blocks are highlighted; links are shown as text with their address (no
terminal hyperlinks: the address comes from the model).

The text given here is terminal-safe already (:mod:`~agent._cli.safe_text`).
"""

from __future__ import annotations

import re
import typing

from .screen import PlainConsole, Terminal

if typing.TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.segment import Segment

__all__ = ["MarkdownStream", "render_block", "split_blocks"]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
#: Highlighting of code blocks (pygments' "monokai" reads well on dark and light).
CODE_THEME = "monokai"


def split_blocks(text: str) -> tuple[list[str], str]:
    """The complete blocks of ``text``, and what is left (an unfinished block).

    A block ends at a blank line outside a fenced code block.
    """
    lines = text.split("\n")
    partial = lines.pop()
    blocks: list[str] = []
    current: list[str] = []
    fence: str | None = None
    for line in lines:
        match = _FENCE.match(line)
        if fence is not None:
            current.append(line)
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
        elif match:
            fence = match.group(1)
            current.append(line)
        elif not line.strip():
            if current:
                blocks.append("\n".join(current))
                current = []
        else:
            current.append(line)
    return blocks, "\n".join([*current, partial])


def render_block(console: Console, text: str) -> RenderableType:
    """``text`` as rendered Markdown, without the blank lines rich puts around a block."""
    # Imported here: a pipe or a file gets raw text, and the Markdown parser is a
    # seventh of ``corral run``'s start-up.
    from rich.markdown import Markdown
    from rich.segment import Segment, Segments

    markdown = Markdown(text, code_theme=CODE_THEME, hyperlinks=False)
    lines = console.render_lines(markdown, console.options, pad=False)
    while lines and not "".join(s.text for s in lines[0]).strip():
        lines.pop(0)
    while lines and not "".join(s.text for s in lines[-1]).strip():
        lines.pop()
    segments: list[Segment] = []
    for line in lines:
        segments.extend(line)
        segments.append(Segment.line())
    return Segments(segments)


@typing.final
class MarkdownStream:
    """Feeds streamed text to the terminal block by block."""

    def __init__(self, terminal: Terminal, *, live_tail: bool) -> None:
        self._terminal = terminal
        self._live_tail = live_tail
        self._pending = ""
        self._blocks = 0

    def __repr__(self) -> str:
        return f"<MarkdownStream blocks={self._blocks} pending={len(self._pending)}>"

    def _print(self, block: str) -> None:
        console = self._terminal.answer
        assert not isinstance(console, PlainConsole)  # Markdown goes to a terminal
        if self._blocks:
            self._terminal.print_answer("")
        self._terminal.print_answer(render_block(console, block))
        self._blocks += 1

    def feed(self, text: str) -> None:
        """Add streamed text; prints every block it completes."""
        blocks, self._pending = split_blocks(self._pending + text)
        for block in blocks:
            self._print(block)
        notes = self._terminal.notes
        if self._live_tail and self._pending.strip() and not isinstance(notes, PlainConsole):
            from rich.console import Group

            self._terminal.show(Group(render_block(notes, self._pending)))

    def finish(self) -> None:
        """The message is complete: print what is left."""
        rest, self._pending = self._pending, ""
        if rest.strip():
            self._print(rest.strip("\n"))
        self._blocks = 0
