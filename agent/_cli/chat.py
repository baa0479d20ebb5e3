"""``corral chat``: the interactive session.

On a terminal, lines come from the line editor (:mod:`~agent._cli.lineedit`:
history per project, multi-line input, Tab completion, a status line); from a
pipe, one line at a time. A line starting with ``/`` is a slash command: the built-ins
below, or an extension's command, whose answer is handled by its action —
``prompt`` runs a turn, ``insert`` pre-fills the next input line, ``display``
shows a note, ``open_panel`` hands the terminal to the extension's panel until it
closes (:mod:`~agent._cli.panelview`; from a pipe there is no panel: "panel
unsupported here"), ``noop`` does nothing (an ``error`` is shown whatever the action).

Ctrl-C while a turn runs cancels the turn (a second one while it is being
cancelled exits). Ctrl-C at an empty prompt says how to leave; a second one in a
row leaves, as do Ctrl-D, ``/quit`` and ``/exit`` (each says goodbye). A resumed
session shows its last exchange.

With ``--tools +dynamic``, a ``new_tool`` call shows the tool (name, description,
parameters and the code in full) and asks y/N before its program first runs;
anything but yes refuses it, and the model is told the user declined. Project MCP
servers that are not trusted yet are asked about, like extensions, before the
session starts.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import signal
import sys
import typing
from pathlib import Path
from typing import Protocol, TextIO

import msgspec
import trio

from sandbox.log import get_logger
from supervisor import CommandOutcome, Panel, SupervisorError, corral_home

from .._events import AgentEvent, Done, Emit, ExtPanelClose, ExtPanelOpen, ExtPanelRender
from .._exceptions import AgentError
from .._host import AgentHost, open_agent
from .._options import AgentOptions
from .._tools.dynamic import ToolDraft
from .chatlines import format_extensions, last_exchange
from .panelview import PanelText
from .render import HumanRenderer, format_usage
from .safe_text import visible
from .screen import Terminal, make_console
from .term import is_terminal
from .trust import ask_trust

if typing.TYPE_CHECKING:  # prompt_toolkit is imported only for a terminal
    from .panelview import PanelView

__all__ = [
    "BUILTIN_COMMANDS",
    "ChatSession",
    "LineReader",
    "PromptInterrupted",
    "TerminalReader",
    "run_chat",
]

log = get_logger(__name__)

#: Built-in slash commands and what they do.
BUILTIN_COMMANDS: dict[str, str] = {
    "help": "list the slash commands",
    "reload-ext": "re-read manifests, swap in the new versions (a failing one keeps the old)",
    "ext": "extension status and stats; /ext enable NAME lifts a quarantine",
    "tools": "the tools the model can call, and where they come from",
    "compact": "summarise the transcript into one message",
    "clear": "drop the transcript",
    "model": "show the model, or /model NAME to switch",
    "reasoning": "show the reasoning level, or /reasoning off|low|medium|high to set it",
    "quit": "leave (also /exit, Ctrl-D, or Ctrl-C twice at the prompt)",
}

#: Said after one Ctrl-C at an empty prompt.
AGAIN_TO_QUIT = "press Ctrl-C again to quit (or Ctrl-D)"


class PromptInterrupted(Exception):
    """Ctrl-C at an empty prompt (a :class:`LineReader` on a terminal raises it)."""


class LineReader(Protocol):
    """Where the chat gets its input lines."""

    async def read(self, prompt: str, default: str = "") -> str | None:
        """The next line, or None at end of input.

        ``default`` pre-fills the line (an extension's ``insert``).

        Raises:
            PromptInterrupted: Ctrl-C at an empty prompt.
        """
        ...


@typing.final
class _RawLines:
    """Lines from a file descriptor with ``os.read``: no buffered-reader lock held.

    A worker thread abandoned while blocked here cannot deadlock interpreter
    shutdown, which one blocked in ``sys.stdin.readline()`` can.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        self._eof = False

    def __repr__(self) -> str:
        return f"<_RawLines fd={self._fd}>"

    def readline(self) -> str | None:
        while b"\n" not in self._buffer and not self._eof:
            chunk = os.read(self._fd, 4096)
            self._eof = not chunk
            self._buffer += chunk
        if not self._buffer:
            return None
        line, _, rest = self._buffer.partition(b"\n")
        self._buffer = rest
        return line.decode("utf-8", errors="replace")


@typing.final
class TerminalReader:
    """Reads input lines from a pipe (or any stdin that is not a terminal) in a worker thread.

    Raw reads from the stdin descriptor (or ``readline()`` of a stdin without one);
    ``default`` is used when the user sends an empty line.
    """

    def __init__(self, out: TextIO, stdin: TextIO | None = None) -> None:
        self._out = out
        self._stdin = stdin or sys.stdin
        self._raw: _RawLines | None = None
        try:
            self._raw = _RawLines(self._stdin.fileno())
        except (OSError, ValueError, io.UnsupportedOperation):
            self._raw = None

    def __repr__(self) -> str:
        return f"<TerminalReader raw={self._raw is not None}>"

    def _read(self, prompt: str, default: str) -> str | None:
        if default:
            self._out.write(f"(inserted: {default!r} — press Enter to send it, or type a line)\n")
        self._out.write(prompt)
        self._out.flush()
        if self._raw is not None:
            line = self._raw.readline()
        else:
            raw = self._stdin.readline()
            line = raw.rstrip("\n") if raw else None
        if line is None:
            return None
        return default if not line.strip() and default else line

    async def read(self, prompt: str, default: str = "") -> str | None:
        """Read one line.

        Cancellation: the worker thread is abandoned (it stays blocked in its read
        until the process exits, holding no lock); the call returns at once.
        """
        return await trio.to_thread.run_sync(self._read, prompt, default, abandon_on_cancel=True)


@typing.final
class ChatSession:
    """The read-eval-print loop of ``corral chat`` over one :class:`AgentHost`."""

    def __init__(
        self,
        host: AgentHost,
        renderer: HumanRenderer,
        reader: LineReader,
        emit: Emit | None = None,
        panel_view: PanelView | None = None,
    ) -> None:
        self.host = host
        self.renderer = renderer
        self.reader = reader
        #: Where turns send their events (the renderer unless told otherwise).
        self.emit: Emit = emit or renderer.emit
        #: Where extension panels are drawn (None: this chat shows none).
        self.panel_view = panel_view
        self._turn: trio.CancelScope | None = None
        self._session = trio.CancelScope()
        self._default = ""
        #: Open panels as last drawn, by (extension, panel id); the one shown.
        self._panels: dict[tuple[str, str], PanelText] = {}
        self._shown: tuple[str, str] | None = None
        #: One Ctrl-C at the prompt was pressed; the next one in a row leaves.
        self._armed = False

    def __repr__(self) -> str:
        return f"<ChatSession turn_running={self._turn is not None}>"

    async def emit_ext(self, event: AgentEvent) -> None:
        """Where extension events go: panel events to the panel, the rest to the renderer.

        Cancellation: not a checkpoint.
        """
        if isinstance(event, ExtPanelOpen | ExtPanelRender):
            key = (event.extension, event.panel_id)
            text = PanelText(event.extension, event.title, event.lines, event.footer)
            self._panels[key] = text
            if key == self._shown and self.panel_view is not None:
                self.panel_view.show(text)
        elif isinstance(event, ExtPanelClose):
            key = (event.extension, event.panel_id)
            self._panels.pop(key, None)
            if key == self._shown and self.panel_view is not None:
                self.panel_view.close()
                if event.by != "host":
                    why = f": {event.reason}" if event.reason else ""
                    self.renderer.note(event.extension, f"panel closed{why}", "dim")
        else:
            await self.renderer.emit(event)

    async def watch_interrupts(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """First Ctrl-C cancels the running turn; otherwise Ctrl-C ends the session.

        Cancellation: stops watching (Ctrl-C raises KeyboardInterrupt again).
        """
        with trio.open_signal_receiver(signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                turn = self._turn
                if turn is not None and not turn.cancel_called:
                    turn.cancel()
                    self.renderer.line("^C — cancelling the turn (Ctrl-C again exits)")
                elif turn is None and not self._armed:  # at the prompt (read from a pipe)
                    self._armed = True
                    self.renderer.line(f"^C — {AGAIN_TO_QUIT}")
                else:
                    self.renderer.line("^C — bye")
                    self._session.cancel()

    async def run(self) -> None:
        """Read and handle lines until the user leaves.

        Cancellation: a running turn is aborted; the session ends.
        """
        with self._session:
            while True:
                try:
                    line = await self.reader.read("› ", self._default)
                except PromptInterrupted:
                    if self._armed:
                        self.renderer.line("bye")
                        return
                    self._armed = True
                    self.renderer.line(self.renderer.style(AGAIN_TO_QUIT, "dim"))
                    continue
                self._armed = False
                self._default = ""
                if line is None:
                    self.renderer.line("bye")
                    return
                line = line.strip()
                if not line:
                    continue
                if line.startswith("/"):
                    if not await self.slash(line):
                        self.renderer.line("bye")
                        return
                else:
                    await self.turn(line)

    async def turn(self, text: str) -> None:
        """Run one prompt; Ctrl-C cancels it.

        Cancellation: as :meth:`~agent._loop.AgentLoop.prompt`.
        """
        with trio.CancelScope() as scope:
            self._turn = scope
            try:
                await self.host.engine.prompt(text, [], self.emit)
                await self.emit(Done())
            except AgentError as exc:
                self.renderer.line(self.renderer.style(f"! {visible(str(exc))}", "red"))
            finally:
                self._turn = None

    async def slash(self, line: str) -> bool:
        """Handle a slash command; False means "leave the chat".

        Cancellation: the command is abandoned.
        """
        name, _, args = line[1:].partition(" ")
        args = args.strip()
        r = self.renderer
        try:
            if name in ("quit", "exit"):
                return False
            if name == "help":
                self._help()
            elif name == "reload-ext":
                r.line(r.style("reloading extensions…", "dim"))
                stats = await self.host.reload()
                errors = visible("; ".join(stats.errors)) or "none"
                r.line(
                    f"reloaded: stopped {stats.stopped}, loaded {stats.loaded}, "
                    f"ready {stats.ready}, errors: {errors}"
                )
            elif name == "ext":
                await self._ext(args)
            elif name == "tools":
                for tool, source in self.host.engine.registry.sources().items():
                    r.line(visible(f"{tool}  ({source})"))
            elif name == "compact":
                await self.host.engine.compact(self.emit)
            elif name == "clear":
                self.host.engine.clear()
                r.line("transcript cleared")
            elif name == "model":
                if args:
                    self.host.engine.set_model(args)
                r.line(f"{self.host.engine.provider_name} / {self.host.engine.model}")
            elif name == "reasoning":
                if args:
                    self.host.engine.set_reasoning(args)  # type: ignore[arg-type]  # checked
                r.line(f"reasoning: {self.host.engine.reasoning or 'the provider default'}")
            else:
                await self._extension_command(name, args)
        except (SupervisorError, AgentError, ValueError) as exc:
            r.line(r.style(visible(f"! /{name}: {exc}"), "red"))
        return True

    def _help(self) -> None:
        r = self.renderer
        r.line(r.style("built-in commands", "bold"))
        for name, text in BUILTIN_COMMANDS.items():
            r.line(f"  /{name:<11} {text}")
        commands = self.host.commands()
        if commands:
            r.line(r.style("extension commands", "bold"))
            for cmd in commands:
                r.line(visible(f"  /{cmd.name:<11} {cmd.description}  [{cmd.extension}]"))

    async def _ext(self, args: str) -> None:
        verb, _, rest = args.partition(" ")
        if verb == "enable" and rest.strip():
            info = await self.host.enable(rest.strip())
            self.renderer.line(visible(f"{info.name}: {info.state}"))
            return
        for text in format_extensions(await self.host.extensions()):
            self.renderer.line(text)

    async def _extension_command(self, name: str, args: str) -> None:
        known = {c.name for c in self.host.commands()}
        if name not in known:
            self.renderer.line(
                self.renderer.style(visible(f"unknown command /{name}; /help lists them"), "red")
            )
            return
        outcome = await self.host.invoke_command(name, args)
        await self.apply(outcome)

    async def apply(self, outcome: CommandOutcome) -> None:
        """Carry out an extension command's answer (its ``action``).

        Cancellation: a ``prompt`` turn is aborted.
        """
        r = self.renderer
        who = outcome.extension or "extension"
        if outcome.error:
            r.note(who, outcome.error, "red")
        if outcome.action == "prompt" and outcome.prompt:
            r.line(r.style("you ›", "bold", "green") + " " + visible(outcome.prompt))
            await self.turn(outcome.prompt)
        elif outcome.action == "insert" and outcome.insert:
            # It becomes the user's input line: what they see is what they send.
            self._default = visible(outcome.insert)
        elif outcome.action == "open_panel" and outcome.panel is not None:
            await self._focus(outcome.panel)
        # A ``display`` answer arrives as an ``ext_display`` event (the supervisor
        # publishes it), which the event forwarder renders: nothing to do here.

    async def _focus(self, panel: Panel) -> None:
        """Hand the terminal to ``panel`` until it closes.

        Cancellation: the panel is closed (the extension is told).
        """
        view = self.panel_view
        if view is None:  # the supervisor refuses panels then; never reached
            return
        key = (panel.extension, panel.panel_id)
        # An event may have drawn it again already (the events come on their own task).
        first = PanelText(panel.extension, panel.title, panel.lines, panel.footer)
        view.show(self._panels.setdefault(key, first))
        self._shown = key
        send, receive = trio.open_memory_channel[tuple[str, str]](256)
        how = "esc"
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._forward_keys, receive, panel)
                how = await view.run(send)
                nursery.cancel_scope.cancel()
        finally:
            self._shown = None
            if how == "esc":
                # Shielded, bounded: the extension hears of it even when we are cancelled.
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(5),
                    contextlib.suppress(SupervisorError),  # closed on its side meanwhile
                ):
                    await self.host.close_panel(*key, "closed by the user")

    async def _forward_keys(
        self, keys: trio.MemoryReceiveChannel[tuple[str, str]], panel: Panel
    ) -> None:
        """Send each key the view read to the extension, in order."""
        async for key, text in keys:
            try:
                await self.host.panel_key(panel.extension, panel.panel_id, key, text)
            except (SupervisorError, ValueError) as exc:
                # The panel is gone (its close event may still be on its way).
                log.info("panel_key_failed", extension=panel.extension, error=str(exc))
                if self.panel_view is not None and isinstance(exc, SupervisorError):
                    self.panel_view.close()


def _tool_problems(host: AgentHost) -> list[str]:
    problems = list(host.mcp_problems)
    if host.dynamic is not None:
        problems += [str(r) for r in host.dynamic.refused]
        problems += [host.dynamic.problem] if host.dynamic.problem else []
    return problems


async def approve_tool(
    renderer: HumanRenderer, reader: LineReader, sandboxed: bool, draft: ToolDraft, program: str
) -> bool:
    """Show a tool the agent wants to create, code in full, and ask y/N.

    Cancellation: the question is abandoned; nothing is created.
    """
    import json

    r = renderer
    r.terminal.show(None)  # the spinner would draw over the question
    r.line(r.style(visible(f"the agent wants to create the tool {draft.name}:"), "bold"))
    r.line(visible(f"  description  {draft.description}"))
    r.line(visible(f"  parameters   {json.dumps(draft.parameters, sort_keys=True)}"))
    if draft.network:
        r.line(r.style(visible(f"  network      {', '.join(draft.network)}"), "yellow"))
    r.line(r.style("  def tool(args):", "dim"))
    for line in draft.code.splitlines():
        r.line(r.style(visible(f"      {line}"), "cyan"))
    if sandboxed:
        net = "only the network above" if draft.network else "no network"
        r.line(r.style(f"  (it runs sandboxed: {net}, a scratch directory, 60 s)", "dim"))
    else:
        r.line(r.style("  (it runs UNSANDBOXED: no sandbox backend, with your access)", "red"))
    answer = await reader.read(f"create {visible(draft.name)}? [y/N] ")
    return answer is not None and answer.strip().lower() in ("y", "yes")


def _status(host: AgentHost, renderer: HumanRenderer) -> str:
    engine = host.engine
    t = renderer.totals
    usage = format_usage(t.input, t.output, t.cost_usd)
    commands = len(host.commands())
    return f"{engine.provider_name}/{engine.model} · {usage} · {commands} ext commands · /help"


async def run_chat(
    options: AgentOptions, reader: LineReader | None = None, out: TextIO | None = None
) -> None:
    """``corral chat``: open the agent and talk until the user leaves.

    Cancellation: the session ends; every extension is stopped.
    """
    out = out or sys.stdout
    terminal = Terminal(make_console(out))
    renderer = HumanRenderer(terminal, markdown=is_terminal(out))
    try:
        await _chat(options, renderer, reader, out)
    finally:
        terminal.close()


def _line_editor(
    options: AgentOptions, renderer: HumanRenderer, host: list[AgentHost]
) -> LineReader:
    from .lineedit import PromptReader, history_file

    def commands() -> list[tuple[str, str]]:
        found = list(BUILTIN_COMMANDS.items())
        if host:
            found += [(c.name, f"{c.description} [{c.extension}]") for c in host[0].commands()]
        return [(name, visible(text)) for name, text in found]

    def status() -> str:
        return visible(_status(host[0], renderer)) if host else ""

    home = Path(options.home).expanduser() if options.home else corral_home()
    return PromptReader(
        renderer.terminal,
        history_file(home, options.cwd),
        commands,
        status,
        color=renderer.style.enabled,
    )


async def _chat(
    options: AgentOptions, renderer: HumanRenderer, given: LineReader | None, out: TextIO
) -> None:
    opened: list[AgentHost] = []
    view: PanelView | None = None
    if given is not None:
        reader = given
    elif is_terminal(sys.stdin) and renderer.terminal.interactive:
        from .panelview import PanelView

        reader = _line_editor(options, renderer, opened)
        view = PanelView(renderer.terminal, color=renderer.style.enabled)
    else:
        reader = TerminalReader(out)
    # Panels need the terminal's keys: from a pipe, an extension is told there are none.
    options = msgspec.structs.replace(options, panels=view is not None)
    await ask_trust(options, renderer, reader.read)
    if options.mcp_servers:
        from .tools_cmd import ask_mcp_trust

        await ask_mcp_trust(options, renderer, reader.read)
    async with open_agent(options) as host, trio.open_nursery() as nursery:
        opened.append(host)
        if host.dynamic is not None:
            sandboxed = host.dynamic.runner.sandboxed
            host.dynamic.approver = functools.partial(approve_tool, renderer, reader, sandboxed)
        for problem in _tool_problems(host):
            renderer.line(renderer.style(visible(f"warning: {problem}"), "yellow"))
        renderer.set_source_of(host.engine.registry.sources().get)
        chat = ChatSession(host, renderer, reader, panel_view=view)
        await nursery.start(host.run_forwarder, chat.emit_ext)
        await nursery.start(chat.watch_interrupts)
        s = renderer.style
        engine = host.engine
        where = visible(f" — {engine.provider_name}/{engine.model} in {engine.cwd}")
        renderer.line(s("corral chat", "bold") + s(where, "dim"))
        names = visible(", ".join(i.name for i in await host.extensions() if i.pid is not None))
        renderer.line(s(f"extensions: {names or 'none'}; /help for commands", "dim"))
        if len(engine.transcript):
            renderer.line(s(f"resumed session with {len(engine.transcript)} messages", "dim"))
            for line in last_exchange(engine.transcript.messages()):
                renderer.line(s(line, "dim"))
        await chat.run()
        nursery.cancel_scope.cancel()
