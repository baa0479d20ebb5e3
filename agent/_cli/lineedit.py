"""The chat's line editor on a terminal (prompt_toolkit), run in a worker thread.

* history saved per project, in ``$CORRAL_HOME/history/<dir>-<hash>`` (Up/Down,
  Ctrl-R searches it);
* multi-line input: Alt-Enter (or Esc then Enter) starts a new line, and so does
  Enter after a trailing ``\\``;
* Tab completes slash commands, the built-in ones and the extensions' (with their
  descriptions);
* Ctrl-C clears a line being typed, and on an empty line raises
  :class:`~agent._cli.chat.PromptInterrupted` (the chat leaves on a second one);
  Ctrl-D on an empty line leaves;
* a status line at the bottom: provider and model, extensions, tokens and cost;
* whatever corral prints while the prompt is shown (an extension's note, a crash
  report) is printed above the prompt, which is then drawn again, never over it.

prompt_toolkit runs its own asyncio loop in the worker thread; the trio side hands
it lines to print through :meth:`PromptReader.print_above`, which is thread-safe
and keeps their order.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import os
import threading
import typing
from collections.abc import Callable, Iterable
from pathlib import Path

import trio
from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.formatted_text import ANSI
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import ColorDepth

from .chat import PromptInterrupted
from .screen import Terminal

__all__ = ["Above", "PromptReader", "SlashCompleter", "history_file"]

#: What :meth:`PromptReader.read` waits for after asking a cancelled prompt to close.
_CLOSE_GRACE = 2.0


def history_file(home: Path, project: str) -> Path:
    """The history of chats in ``project`` (a directory), under corral's home."""
    real = os.path.realpath(project)
    tag = hashlib.sha256(os.fsencode(real)).hexdigest()[:12]
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in os.path.basename(real))
    return home / "history" / f"{name or 'root'}-{tag}"


@typing.final
class SlashCompleter(Completer):
    """Completes ``/command`` at the start of the line from ``commands()``."""

    def __init__(self, commands: Callable[[], Iterable[tuple[str, str]]]) -> None:
        self._commands = commands

    def __repr__(self) -> str:
        return "<SlashCompleter>"

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/") or " " in text or "\n" in text:
            return
        for name, description in self._commands():
            if name.startswith(text[1:]):
                yield Completion("/" + name, start_position=-len(text), display_meta=description)


def _bindings() -> KeyBindings:
    keys = KeyBindings()

    @keys.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @keys.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        document = buffer.document
        if document.is_cursor_at_the_end and document.text.endswith("\\"):
            buffer.delete_before_cursor(1)
            buffer.insert_text("\n")
        else:
            buffer.validate_and_handle()

    @keys.add("c-c")
    def _interrupt(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.text:
            buffer.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt)

    return keys


@typing.final
class Above:
    """Lines printed above a prompt_toolkit application while it runs (from any
    thread, in order), or at once when none runs: the line editor's and the panel's."""

    def __init__(self, terminal: Terminal) -> None:
        self._terminal = terminal
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._context: contextvars.Context | None = None
        self._pending: list[str] = []

    def __repr__(self) -> str:
        return f"<Above active={self._loop is not None} pending={len(self._pending)}>"

    def print(self, text: str) -> None:
        """Print ``text`` above the application if it runs, else at once; order is kept."""
        with self._lock:
            self._pending.append(text)
            loop, context = self._loop, self._context
        if loop is None:
            self._flush()
            return
        try:
            # In the application's own context, where prompt_toolkit finds it.
            loop.call_soon_threadsafe(run_in_terminal, self._flush, context=context)
        except RuntimeError:  # the application's loop just closed: it is gone, print here
            self._flush()

    def call(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` in the application's loop and context (nothing when none runs)."""
        with self._lock:
            loop, context = self._loop, self._context
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # already closed
                loop.call_soon_threadsafe(fn, context=context)

    def _flush(self) -> None:
        with self._lock:
            texts, self._pending = self._pending, []
        if texts:
            out = self._terminal.notes.file
            out.write("".join(texts))
            out.flush()

    def started(self) -> None:
        """The application runs (call it from its ``pre_run``)."""
        with self._lock:
            self._loop = asyncio.get_running_loop()
            self._context = contextvars.copy_context()

    def stopped(self) -> None:
        """The application ended: print what it did not get to."""
        with self._lock:
            self._loop = None
        self._flush()


@typing.final
class PromptReader:
    """A :class:`~agent._cli.chat.LineReader` with prompt_toolkit's editor.

    Args:
        terminal: the chat's terminal; its prints go above the prompt while it is shown.
        history: the history file (created with mode 0600).
        commands: ``(name, description)`` of every slash command, asked at each Tab.
        status: the status line's text, asked whenever the prompt is drawn.
        color: colours on.
    """

    def __init__(
        self,
        terminal: Terminal,
        history: Path,
        commands: Callable[[], Iterable[tuple[str, str]]],
        status: Callable[[], str],
        *,
        color: bool,
    ) -> None:
        self._terminal = terminal
        history.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(history, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600))
        self._session: PromptSession[str] = PromptSession(
            history=FileHistory(str(history)),
            completer=SlashCompleter(commands),
            complete_while_typing=False,
            key_bindings=_bindings(),
            bottom_toolbar=lambda: " " + status(),
            prompt_continuation=lambda width, line, wrap: "… ".rjust(width),
            color_depth=ColorDepth.DEFAULT if color else ColorDepth.MONOCHROME,
            enable_history_search=False,
        )
        self._above = Above(terminal)
        self._closed = threading.Event()

    def __repr__(self) -> str:
        return f"<PromptReader {self._above!r}>"

    def print_above(self, text: str) -> None:
        """Print ``text`` above the prompt if it is shown, else at once; order is kept."""
        self._above.print(text)

    # --- reading (worker thread) --------------------------------------------------------

    def _read(self, prompt: str, default: str) -> str | None:
        above = self._above
        try:
            return self._session.prompt(ANSI(prompt), default=default, pre_run=above.started)
        except KeyboardInterrupt:
            raise PromptInterrupted from None
        except EOFError:
            return None
        finally:
            above.stopped()
            self._closed.set()

    def _cancel(self) -> None:
        app = self._session.app

        def close() -> None:
            if app.is_running:
                app.exit(exception=EOFError)

        self._above.call(close)

    async def read(self, prompt: str, default: str = "") -> str | None:
        """Show the prompt and return the line (None: the user left with Ctrl-D).

        Raises:
            PromptInterrupted: Ctrl-C on an empty line.

        Cancellation: the prompt is closed and the terminal restored (bounded wait)
        before ``Cancelled`` propagates.
        """
        self._closed.clear()
        self._terminal.above = self.print_above
        try:
            return await trio.to_thread.run_sync(
                self._read, prompt, default, abandon_on_cancel=True
            )
        except trio.Cancelled:
            self._cancel()
            with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_GRACE):
                await trio.to_thread.run_sync(self._closed.wait, _CLOSE_GRACE)
            raise
        finally:
            self._terminal.above = None
