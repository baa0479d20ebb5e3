"""The system prompt a session sends with every model call, and its tool summary.

The default prompt (seeds/extensions-phase2.md) ends with a summary of the tools
the model is offered, built-in and extension ones alike, one line each::

    Tools:
    - read: Read a text file (or an image) in the working directory.
    - weather: Current weather for a city.

It is rendered again whenever the tool registry changes (a reload, an extension
that registers late, a dynamic tool made, an MCP server connected): the loop asks
for the prompt before every model call and :class:`SystemPrompt` renders it anew
only when the registry's generation moved.

Descriptions come from extensions, tool hosts, MCP servers and the agent's own
dynamic tools: hostile text. A line keeps only the first line of a description,
without control, format or separator characters (a newline, a ``\\u2028``, a bidi
override, a zero-width space cannot start a fake entry or section of the prompt,
nor hide text), whitespace runs made one space, cut to :data:`DESCRIPTION_MAX`
characters; names are cleaned and cut the same way. At most :data:`TOOLS_MAX` tools
are listed (the rest are counted), so the summary stays bounded whatever is
registered.

``--system-prompt`` replaces the whole default, summary included (the user said
exactly what to send; the tools still reach the model in the request's own tools
field); ``--append-system-prompt`` is added after it.
"""

from __future__ import annotations

import re
import typing
import unicodedata
from collections.abc import Sequence

from ._providers.base import ToolSpec

__all__ = ["DESCRIPTION_MAX", "TOOLS_MAX", "SystemPrompt", "default_system_prompt", "tool_summary"]

#: Characters of a description in the summary, at most (an ellipsis marks a cut).
DESCRIPTION_MAX = 160
#: Characters of a tool name in the summary, at most.
NAME_MAX = 64
#: Tools listed in the summary, at most.
TOOLS_MAX = 100

#: Kept although they are format characters: joiners some scripts and emoji need;
#: they can neither reorder nor hide text.
_JOINERS = frozenset("\u200c\u200d")
#: Unicode categories dropped: controls, format characters (bidi overrides,
#: zero-width spaces, tag characters), line and paragraph separators, surrogates,
#: private use and unassigned code points.
_DROPPED = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
_BREAK = re.compile(r"[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")


def _clean(text: str, limit: int) -> str:
    """``text`` as one bounded line of plain characters (total: never raises)."""
    out = []
    for char in text:
        if char.isspace():
            out.append(" ")
        elif char in _JOINERS or unicodedata.category(char) not in _DROPPED:
            out.append(char)
    flat = " ".join("".join(out).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _first_line(text: str) -> str:
    for line in _BREAK.split(text):
        if line.strip():
            return line
    return ""


def tool_summary(specs: Sequence[ToolSpec]) -> str:
    """The ``Tools:`` section: one ``- name: first line of its description`` per tool."""
    if not specs:
        return "Tools: none."
    lines = ["Tools:"]
    for spec in specs[:TOOLS_MAX]:
        name = _clean(spec.name, NAME_MAX) or "?"
        description = _clean(_first_line(spec.description), DESCRIPTION_MAX)
        lines.append(f"- {name}: {description}" if description else f"- {name}")
    if len(specs) > TOOLS_MAX:
        lines.append(f"- … and {len(specs) - TOOLS_MAX} more")
    return "\n".join(lines)


def default_system_prompt(cwd: str) -> str:
    """The system prompt used when none is given, without its tool summary."""
    return (
        f"You are corral, a careful coding agent working in {cwd}. Use the tools to read, "
        "write and edit files and to run shell commands there; extensions may add more "
        "tools. Call several tools at once when they are independent. Answer briefly."
    )


@typing.final
class SystemPrompt:
    """A session's system prompt, its tool summary rendered for the tools of the moment.

    Args:
        cwd: the working directory the default prompt names.
        replace: ``--system-prompt``: sent as it is, with no tool summary.
        append: ``--append-system-prompt``: added after the rest.
    """

    def __init__(self, cwd: str, replace: str | None = None, append: str | None = None) -> None:
        self._base = replace if replace is not None else default_system_prompt(cwd)
        self._summarise = replace is None
        self._append = append
        self._generation: int | None = None
        self._text = ""

    def __repr__(self) -> str:
        return f"<SystemPrompt summary={self._summarise} generation={self._generation}>"

    def render(self, specs: Sequence[ToolSpec], generation: int) -> str:
        """The prompt for a call offering ``specs``; ``generation`` is the registry's
        (the same generation means the same tools, and the last rendering is reused)."""
        if generation != self._generation:
            parts = [self._base]
            if self._summarise:
                parts.append(tool_summary(specs))
            if self._append:
                parts.append(self._append)
            self._text = "\n\n".join(parts)
            self._generation = generation
        return self._text
