"""An extension's panel in the chat: drawn in place, keys to the extension.

When an extension command answers ``open_panel``, the chat hands the terminal to
a :class:`PanelView` until the panel closes. The view is a small prompt_toolkit
application (run in a worker thread, as the line editor is) drawn where the prompt
was, between the conversation and the status line::

    ── Todos (1/3 done) ──────────────────────────
    > □ write the docs
      ✓ ship it

    ↑/↓ navigate - x toggle - esc close
    ──────────────────────────────────────────────

* every key goes to the extension as ``panel_key``: a name (``up``, ``enter``,
  ``pagedown``...), ``rune`` with the character typed, or ``unknown``; nothing
  reaches the line editor, and the view never draws a key itself: it is redrawn
  from each ``ext_panel_render`` the extension sends;
* Esc or Ctrl-C closes the panel (the extension gets ``panel_close``), as in the
  reference; so does the extension (``panel_close``) or its exit;
* the text was made terminal-safe by the supervisor; lines are cut at the width
  and the panel at the terminal's height, never wrapped.

Notes printed while the panel is shown (an extension's ``notify``) go above it.
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import Callable

import trio

from .safe_text import visible
from .screen import Terminal

if typing.TYPE_CHECKING:  # prompt_toolkit is imported when a panel is first shown
    from prompt_toolkit.application import Application
    from prompt_toolkit.formatted_text import StyleAndTextTuples
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

__all__ = ["PanelText", "PanelView", "key_name"]

#: What a bare Esc waits for before it counts as Esc (an escape sequence arrives
#: whole much sooner): the reference's 50 ms.
_ESC_WAIT = 0.05
#: What :meth:`PanelView.run` waits for after asking a cancelled view to close.
_CLOSE_GRACE = 2.0

#: prompt_toolkit's key (``Keys`` values) -> the ``panel_key`` name.
_NAMES: dict[str, str] = {
    "up": "up",
    "down": "down",
    "left": "left",
    "right": "right",
    "c-m": "enter",
    "c-j": "enter",
    "c-i": "tab",
    "c-h": "backspace",
    "delete": "delete",
    "home": "home",
    "end": "end",
    "pageup": "pageup",
    "pagedown": "pagedown",
}


def key_name(key: str, data: str) -> tuple[str, str]:
    """The ``panel_key`` name and text of one prompt_toolkit key press."""
    name = _NAMES.get(key)
    if name is not None:
        return name, ""
    if len(data) == 1 and data == key and visible(data) == data and data.isprintable():
        return "rune", data
    return "unknown", ""


class PanelText(typing.NamedTuple):
    """What the view draws (the fields of ``ext_panel_open`` / ``ext_panel_render``)."""

    extension: str
    title: str
    lines: list[str]
    footer: str


@typing.final
class PanelView:
    """The chat's panel on a terminal (see the module docstring).

    Args:
        terminal: the chat's terminal; its prints go above the panel while it is shown.
        color: colours on.
    """

    def __init__(self, terminal: Terminal, *, color: bool) -> None:
        from prompt_toolkit.application import Application
        from prompt_toolkit.layout import FormattedTextControl, Layout, Window
        from prompt_toolkit.output import ColorDepth
        from prompt_toolkit.styles import Style

        from .lineedit import Above

        self._terminal = terminal
        self._above = Above(terminal)
        self._text: PanelText | None = None
        self._closing = False
        self._keys: trio.MemorySendChannel[tuple[str, str]] | None = None
        self._app: Application[str] = Application(
            layout=Layout(
                Window(
                    FormattedTextControl(self._fragments), wrap_lines=False, always_hide_cursor=True
                )
            ),
            key_bindings=self._bindings(),
            style=Style.from_dict({"muted": "#888888"}),
            color_depth=ColorDepth.DEFAULT if color else ColorDepth.MONOCHROME,
            full_screen=False,
            erase_when_done=True,
        )
        self._app.ttimeoutlen = _ESC_WAIT

    def __repr__(self) -> str:
        shown = self._text.title if self._text else None
        return f"<PanelView shown={shown!r} {self._above!r}>"

    # --- from the trio side ------------------------------------------------------------

    def show(self, text: PanelText) -> None:
        """Draw ``text`` (now, or when the view starts)."""
        self._text = text
        self._above.call(self._app.invalidate)

    def close(self) -> None:
        """End the view (the extension closed the panel, or it is gone)."""
        self._closing = True  # before the call: a view starting now sees it (_started)
        self._above.call(self._exit_closed)

    async def run(self, keys: trio.MemorySendChannel[tuple[str, str]]) -> str:
        """Show the panel until it closes; each key pressed goes to ``keys``.

        Returns:
            ``"esc"`` when the user closed it, ``"closed"`` when :meth:`close` did.

        Cancellation: the view is closed and the terminal restored (bounded wait)
        before ``Cancelled`` propagates.
        """
        self._closing = False
        self._keys = keys
        done = trio.Event()
        self._terminal.above = self._above.print
        try:
            return await trio.to_thread.run_sync(self._run, done, abandon_on_cancel=True)
        except trio.Cancelled:
            self.close()
            with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_GRACE):
                await done.wait()
            raise
        finally:
            self._terminal.above = None
            self._keys = None

    # --- the worker thread -------------------------------------------------------------

    def _run(self, done: trio.Event) -> str:
        try:
            return self._app.run(pre_run=self._started)
        finally:
            self._above.stopped()
            trio.from_thread.run_sync(done.set)

    def _started(self) -> None:
        self._above.started()
        if self._closing:
            self._app.exit(result="closed")

    def _exit_closed(self) -> None:
        if self._app.is_running and not self._app.future.done():  # type: ignore[union-attr]
            self._app.exit(result="closed")

    def _send(self, key: str, text: str) -> None:
        keys = self._keys
        if keys is None:
            return
        # A flood of keys, or the chat is ending: this one is lost.
        with contextlib.suppress(trio.WouldBlock, trio.RunFinishedError, trio.ClosedResourceError):
            trio.from_thread.run_sync(keys.send_nowait, (key, text))

    def _bindings(self) -> KeyBindings:
        from prompt_toolkit.key_binding import KeyBindings

        keys = KeyBindings()

        @keys.add("escape")
        @keys.add("c-c")
        def _close(event: KeyPressEvent) -> None:
            if not event.app.future.done():  # type: ignore[union-attr]
                event.app.exit(result="esc")

        @keys.add("escape", "<any>")  # Alt+key: the key (as the reference)
        @keys.add("<any>")
        def _key(event: KeyPressEvent) -> None:
            press = event.key_sequence[-1]
            self._send(*key_name(press.key, press.data))

        for key in _NAMES:
            keys.add(key)(_named(self._send, _NAMES[key]))
        return keys

    def _fragments(self) -> StyleAndTextTuples:
        text = self._text
        if text is None:
            return []
        size = self._app.output.get_size()
        width, rows = max(size.columns, 10), max(size.rows, 6)
        title = visible(text.title or text.extension)
        head = f"── {title} "
        out: StyleAndTextTuples = [("class:muted", head + "─" * max(width - len(head), 0) + "\n")]
        room = rows - 4 - (2 if text.footer.strip() else 0)
        lines = text.lines
        if len(lines) > room:
            lines = [*lines[: max(room - 1, 0)], f"… {len(lines) - max(room - 1, 0)} more lines"]
        out += [("", visible(line) + "\n") for line in lines]
        if text.footer.strip():
            out += [("", "\n"), ("class:muted", visible(text.footer) + "\n")]
        out.append(("class:muted", "─" * width))
        return out


def _named(send: Callable[[str, str], None], name: str) -> Callable[[KeyPressEvent], None]:
    def handler(event: KeyPressEvent) -> None:
        send(name, "")

    return handler
