"""An extension's interactive panel: what it opened, what it draws, who closes it.

The reference protocol lets an extension answer a command with ``open_panel`` and
then own a panel: it redraws it with one-way ``panel_render`` frames and closes it
with ``panel_close``; the host sends it ``panel_key`` for every key pressed while
the panel has the focus, and ``panel_close`` when the panel is closed on the host's
side. :class:`Panels` keeps the one panel an incarnation has open and turns those
frames into events (``PanelOpened``, ``PanelRendered``, ``PanelClosed``).

What an extension sends is hostile until shown otherwise, and a panel's text exists
only to be drawn, so it is made safe once, here, for every client (chat, RPC, the
in-process API): every character that could drive a terminal becomes a visible
escape (:func:`~supervisor._safe_text.visible`), and titles, footers, lines and the
number of lines are bounded. The panel id stays exact (the extension reads it back).

Renders are coalesced: a ``panel_render`` changes the panel at once, and the event
saying so is published when the extension's output read so far has been handled
(:meth:`Panels.flush`), so a burst of renders read together is one event with the
last of them. A flood of renders (a hostile extension, or one animating too
fast) can thus never fill a subscriber's buffer and push out the panel's final
state; each render still costs its decoding.

What is not an error: a ``panel_render`` or ``panel_close`` for a panel that is not
open (the reference's own ``todo`` renders after every tool call, panel or not) is
dropped without a word, as the reference does; only counted.
"""

from __future__ import annotations

import typing
from collections.abc import Callable

from . import _frames as f
from ._api import Panel, PanelClosed, PanelOpened, PanelRendered, SupervisorEvent
from ._safe_text import visible

__all__ = ["KEYS", "MAX_LINE", "MAX_LINES", "UNSUPPORTED", "Panels", "key_problem"]

#: What a host that shows no panels (``corral run``, a chat reading a pipe) answers.
UNSUPPORTED = "panel unsupported here"
#: Rows of a panel kept; more are cut, with a last row saying how many.
MAX_LINES = 200
#: Characters of one row (after escapes are made visible), of the footer...
MAX_LINE = 400
#: ...and of the title.
MAX_TITLE = 120
#: Characters of a panel id.
MAX_ID = 128
#: The key names of ``panel_key`` (the reference's, ``esc`` included: a client may
#: send it, though corral's chat, as the reference's TUI, closes the panel on Esc).
KEYS = frozenset(
    {
        "up",
        "down",
        "left",
        "right",
        "enter",
        "esc",
        "tab",
        "backspace",
        "delete",
        "home",
        "end",
        "pageup",
        "pagedown",
        "rune",
        "unknown",
    }
)


def _clip(text: str, limit: int) -> str:
    """``text`` terminal-safe and at most ``limit`` characters (an ellipsis shows a cut)."""
    shown = visible(text[: limit + 1])
    if len(shown) > limit or len(text) > limit:
        return shown[: limit - 1] + "…"
    return shown


def _lines(lines: list[str] | None) -> list[str]:
    if not lines:
        return []
    rows = [_clip(line, MAX_LINE) for line in lines[:MAX_LINES]]
    if len(lines) > MAX_LINES:
        rows.append(f"… {len(lines) - MAX_LINES} more lines not shown")
    return rows


def key_problem(key: str, text: str) -> str | None:
    """Why a key cannot be sent to a panel (None: it can)."""
    if key not in KEYS:
        return f"unknown key {key!r}; one of {', '.join(sorted(KEYS))}"
    if key == "rune" and (len(text) != 1 or visible(text) != text):
        return "a rune key's text must be one printable character"
    if key != "rune" and text:
        return f"key {key!r} takes no text"
    return None


@typing.final
class Panels:
    """The panel one incarnation has open (at most one; see the module docstring).

    Args:
        extension: its name, on every event.
        publish: sends an event to the supervisor's subscribers (never blocks).
        send: queues a line for the extension's stdin (never blocks); an error text
            when it cannot.
        supported: the host shows panels; if not, every ``open_panel`` is answered
            with ``panel_close`` and :data:`UNSUPPORTED`.
    """

    def __init__(
        self,
        extension: str,
        publish: Callable[[SupervisorEvent], None],
        send: Callable[[bytes], str | None],
        *,
        supported: bool,
    ) -> None:
        self._extension = extension
        self._publish = publish
        self._send = send
        self._supported = supported
        #: The panel open now.
        self.open: Panel | None = None
        #: Renders and closes for a panel that was not open (dropped).
        self.stray = 0
        #: A render not published yet (see :meth:`flush`).
        self.pending = False

    def __repr__(self) -> str:
        shown = self.open.panel_id if self.open else None
        return f"<Panels {self._extension!r} open={shown!r} stray={self.stray}>"

    def _panel(self, panel_id: str, title: str, lines: list[str] | None, footer: str) -> Panel:
        return Panel(
            extension=self._extension,
            panel_id=panel_id,
            title=_clip(title, MAX_TITLE),
            lines=_lines(lines),
            footer=_clip(footer, MAX_LINE),
        )

    def opened(self, spec: f.PanelSpec) -> tuple[Panel | None, str]:
        """A command answered ``open_panel``: the panel it opens, or why it does not."""
        if not self._supported:
            # The only frame a reference extension reads as "your panel is gone".
            self._send(f.encode_frame(f.PanelClose(panel_id=spec.id, reason=UNSUPPORTED)))
            return None, UNSUPPORTED
        if not spec.id or len(spec.id) > MAX_ID:
            return None, f"open_panel: the panel id must have 1 to {MAX_ID} characters"
        old = self.open
        if old is not None and old.panel_id != spec.id:
            self.close(old.panel_id, f"replaced by the panel {spec.id!r}")
        panel = self._panel(spec.id, spec.title, spec.lines, spec.footer)
        self.open, self.pending = panel, False
        self._publish(PanelOpened(extension=self._extension, panel=panel))
        return panel, ""

    def render(self, frame: f.PanelRender) -> None:
        """The extension drew its panel again (dropped unless that panel is open)."""
        old = self.open
        if old is None or old.panel_id != frame.panel_id:
            self.stray += 1
            return
        panel = self._panel(frame.panel_id, "", frame.lines, frame.footer)
        # As the reference: an empty title keeps the one shown.
        title = _clip(frame.title, MAX_TITLE) if frame.title else old.title
        panel = Panel(
            extension=panel.extension,
            panel_id=panel.panel_id,
            title=title,
            lines=panel.lines,
            footer=panel.footer,
        )
        self.open = panel
        self.pending = True

    def flush(self) -> None:
        """Publish the render(s) since the last flush as one event (the open panel now)."""
        self.pending = False
        if self.open is not None:
            self._publish(PanelRendered(extension=self._extension, panel=self.open))

    def closed(self, frame: f.PanelClose) -> None:
        """The extension closed its panel (dropped unless that panel is open)."""
        if self.open is None or self.open.panel_id != frame.panel_id:
            self.stray += 1
            return
        self.open, self.pending = None, False
        self._publish(
            PanelClosed(extension=self._extension, panel_id=frame.panel_id, by="extension")
        )

    def has(self, panel_id: str) -> bool:
        """The panel ``panel_id`` is open."""
        return self.open is not None and self.open.panel_id == panel_id

    def key(self, panel_id: str, key: str, text: str) -> str | None:
        """Send a key (checked: :func:`key_problem`) to the open panel ``panel_id`` (see
        :meth:`has`); an error text when it cannot be sent."""
        return self._send(f.encode_frame(f.PanelKey(panel_id=panel_id, key=key, text=text)))

    def close(self, panel_id: str, reason: str) -> None:
        """Close the open panel ``panel_id`` (see :meth:`has`) on the host's side and
        tell the extension."""
        self.open, self.pending = None, False
        # Sent even if the pipe is gone: the event says it closed either way.
        self._send(f.encode_frame(f.PanelClose(panel_id=panel_id, reason=reason)))
        self._publish(
            PanelClosed(extension=self._extension, panel_id=panel_id, by="host", reason=reason)
        )

    def gone(self, reason: str) -> None:
        """The incarnation ended: its panel, if any, closes with it."""
        self.pending = False
        if self.open is not None:
            panel_id, self.open = self.open.panel_id, None
            self._publish(
                PanelClosed(extension=self._extension, panel_id=panel_id, by="exit", reason=reason)
            )
