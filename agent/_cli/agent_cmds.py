"""The agent commands of the ``corral`` CLI: ``run``, ``chat`` and ``demo``.

Each command is a thin shim around ``trio.run``. User mistakes and unusable
setups (unknown provider, malformed script, bad ``--cwd``, unreadable session)
become :class:`~.errors.CLIError`: one clear message, no traceback.
The flags they share with ``corral rpc`` are in :mod:`.flags`.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import msgspec
import trio

from sandbox import SandboxMode
from sandbox.log import get_logger
from supervisor import ExtensionInfo, SupervisorError

from .._events import Done
from .._exceptions import AgentError
from .._host import AgentHost, open_agent
from .._options import AgentOptions
from .allocator import unpool_large_buffers
from .errors import CLIError
from .flags import agent_options, skip_broken_option
from .helptext import AGENT_ENV, COMMON_ENV, epilog
from .lifecycle import SKIP_HINT, SignalCancel, broken, check_started, requested_extensions
from .logs import configure_logging
from .render import HumanRenderer, JsonRenderer
from .safe_text import visible
from .screen import Terminal, make_console
from .term import is_terminal
from .trust import check_extensions

__all__ = [
    "chat_cmd",
    "demo_cmd",
    "refuse_untrusted",
    "report_extensions",
    "run_chat_until_signal",
    "run_cmd",
    "run_prompt",
    "run_renderer",
    "run_trio",
]

T = TypeVar("T")

log = get_logger()

#: ``corral run`` starts the turn without an extension still silent after this long.
RUN_LATE_AFTER = 2.0


def _user_error(exc: BaseException) -> BaseException | None:
    if isinstance(exc, AgentError | SupervisorError | CLIError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _user_error(inner)
            if found is not None:
                return found
    return None


def run_trio(main: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``trio.run(main, *args)``, turning agent and supervisor errors into :class:`CLIError`.

    The process is a long agent session: large transient buffers go back to the
    system when freed (:func:`~agent._cli.allocator.unpool_large_buffers`).

    Raises:
        CLIError: ``main`` failed with an :class:`AgentError`, a
            :class:`SupervisorError` or a :class:`CLIError` (possibly inside an
            exception group).
    """
    unpool_large_buffers()
    try:
        return trio.run(main, *args)
    except Exception as exc:
        found = _user_error(exc)
        if found is None:
            raise
        raise CLIError(str(found)) from None


def refuse_untrusted(options: AgentOptions, *, skip_broken: bool = False) -> None:
    """Refuse to run while a project-local or installed extension is not trusted.

    A whole ``run`` or ``rpc`` fails rather than going on without the extension: the
    one left out may be the guard the user counts on.

    Unless ``skip_broken``, an extension whose manifest is invalid stops it too.

    Raises:
        CLIError: one line per untrusted extension, each naming the command
            that trusts it, and per invalid manifest.
    """
    try:
        found, untrusted = check_extensions(options)
    except SupervisorError as exc:
        raise CLIError(f"cannot check which extensions are trusted: {exc}") from None
    lines = [v.problem for v in untrusted]
    if not skip_broken:  # an invalid manifest never starts: say so before anything does
        asked = [Path(e) for e in options.ext_paths]  # required: -e says why itself
        lines += [
            f"extension {p} {SKIP_HINT}"
            for p in found.problems
            if not any(Path(p.path).is_relative_to(e) for e in asked)
        ]
    if lines:
        raise CLIError("\n".join(lines))


def _clashes(info: ExtensionInfo, infos: list[ExtensionInfo]) -> list[str]:
    """One warning per name ``info`` registered that another holds (said once, here)."""
    out = []
    for kind, names in (("tool", info.shadowed_tools), ("command", info.shadowed_commands)):
        for name in names:
            holders = [i.name for i in infos if name in (i.tools if kind == "tool" else i.commands)]
            winner = f"extension {holders[0]}" if holders else "a built-in"
            out.append(
                f"warning: extension {info.name}: its {kind} {name!r} is not used: "
                f"{winner} has that name"
            )
    return out


async def report_extensions(host: AgentHost, say: Callable[[str], None]) -> None:
    """Warn about extensions that failed, are late, clash or run without a sandbox
    (the reason said once), one line each through ``say``.

    Cancellation: the report is cut short.
    """
    from sandbox import select_sandbox

    bare: list[str] = []
    infos = await host.extensions()
    for info in infos:
        if info.problem:
            where = f" ({info.path})" if info.state in ("invalid", "duplicate") else ""
            say(visible(f"warning: extension {info.name}{where}: {info.problem}"))
        elif info.state == "starting":
            say(visible(f"warning: extension {info.name} has not said hello yet; going on"))
        elif info.pid is not None and not info.sandboxed:
            bare.append(info.name)
        for line in _clashes(info, infos):
            say(visible(line))
    tool_problems = list(host.mcp_problems)
    if host.dynamic is not None:
        tool_problems += [str(r) for r in host.dynamic.refused]
        tool_problems += [host.dynamic.problem] if host.dynamic.problem else []
    for problem in tool_problems:
        say(visible(f"warning: {problem}"))
    if bare:
        try:
            why = getattr(select_sandbox(host.options.sandbox), "reason", "")
        except Exception:  # the supervisor chose already; the reason is a courtesy
            why = ""
        names = ", ".join(bare)
        text = f"warning: {names} run{'s' if len(bare) == 1 else ''} UNSANDBOXED"
        say(visible(text + (f": {why}" if why else "")))


def _say_to(renderer: HumanRenderer | JsonRenderer) -> Callable[[str], None]:
    """Where a warning line goes: the human renderer's notes, or stderr beside JSON."""
    if isinstance(renderer, HumanRenderer):
        return renderer.line
    return lambda text: print(text, file=sys.stderr, flush=True)


def run_renderer(as_json: bool, *, usage: bool = False) -> HumanRenderer | JsonRenderer:
    """The renderer of ``corral run``: the answer on stdout, everything else on stderr."""
    if as_json:
        return JsonRenderer(sys.stdout)
    # Plain consoles on pipes: an answer into a file never needs rich.
    terminal = Terminal(make_console(sys.stdout, plain=True), make_console(sys.stderr, plain=True))
    return HumanRenderer(
        terminal,
        markdown=is_terminal(sys.stdout),
        show_usage=usage,
    )


async def run_prompt(
    options: AgentOptions, text: str, as_json: bool, usage: bool = False, skip_broken: bool = False
) -> int:
    """``corral run``: one prompt, rendered for people or as JSON lines.

    Extensions named with ``-e`` are required (see :mod:`.lifecycle`); one that has
    not said hello after :data:`RUN_LATE_AFTER` seconds does not hold the turn up.

    Returns:
        The exit status: 0, 1 when the last turn ended with an error or was
        blocked, ``128 + signal`` when SIGINT (130), SIGTERM (143) or SIGHUP (129)
        cancelled it.

    Raises:
        ExtensionFailed: a required extension is missing, malformed or did not start.

    Cancellation: the turn is aborted and every extension stopped.
    """
    if options.late_after is None:
        options = msgspec.structs.replace(options, late_after=RUN_LATE_AFTER)
    # No screen to draw a panel on: an extension opening one hears "panel unsupported here".
    options = msgspec.structs.replace(options, panels=False)
    renderer = run_renderer(as_json, usage=usage)
    required = await trio.to_thread.run_sync(requested_extensions, options)
    signals = SignalCancel()
    try:
        async with trio.open_nursery() as outer:
            await outer.start(signals.watch)
            with signals.scope:
                async with open_agent(options) as host, trio.open_nursery() as nursery:
                    await check_started(host, required)
                    if not skip_broken and (lines := await broken(host)):
                        raise CLIError("\n".join(lines))
                    if isinstance(renderer, HumanRenderer):
                        renderer.set_source_of(host.engine.registry.sources().get)
                    await report_extensions(host, _say_to(renderer))
                    await nursery.start(host.run_forwarder, renderer.emit)
                    try:
                        await host.engine.prompt(text, [], renderer.emit)
                    finally:
                        renderer.show(Done())  # not a checkpoint: sent even when cancelled
                    nursery.cancel_scope.cancel()
            outer.cancel_scope.cancel()
    finally:
        if isinstance(renderer, HumanRenderer):
            renderer.terminal.close()
    if signals.exit_status is not None:
        return signals.exit_status
    return 1 if renderer.last_stop in ("error", "blocked") else 0


async def run_chat_until_signal(options: AgentOptions) -> int:
    """``corral chat`` with SIGTERM and SIGHUP ending the session like Ctrl-C at the prompt.

    Returns:
        0, or ``128 + signal`` (143, 129) when a signal ended the session.

    Cancellation: the session ends; every extension is stopped.
    """
    from .chat import run_chat  # the line editor: only a chat needs it

    signals = SignalCancel((signal.SIGTERM, signal.SIGHUP))
    async with trio.open_nursery() as outer:
        await outer.start(signals.watch)
        with signals.scope:
            await run_chat(options)
        outer.cancel_scope.cancel()
    return signals.exit_status or 0


_RUN_EXITS = (
    (0, "the answer was printed"),
    (1, "the model failed, a turn was blocked, or the setup is unusable"),
    (130, "cancelled with Ctrl-C"),
    (143, "ended by SIGTERM (extensions stopped first)"),
    (129, "ended by SIGHUP (extensions stopped first)"),
)


@click.command(
    "run",
    epilog=epilog(
        examples=[
            ('corral run "what is in README.md?"', "the offline model, no key needed"),
            ('corral run "weather in Berlin?" -e examples/extensions/weather', "with an extension"),
            ('corral run "summarise it" > answer.txt', "stdout is the answer, nothing else"),
            ("echo 'say \"hi\"' | corral run --json -", "the prompt from stdin; JSON events"),
            ("corral run --provider openai --model gpt-4o-mini hi", "a real model (a key)"),
        ],
        env=AGENT_ENV,
        exit_codes=_RUN_EXITS,
    ),
)
@agent_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON event per line on stdout.")
@click.option("--usage", is_flag=True, help="After the answer, print token and cost totals.")
@skip_broken_option
@click.argument("prompt", nargs=-1, required=True)
@click.pass_context
def run_cmd(
    ctx: click.Context,
    options: AgentOptions,
    as_json: bool,
    usage: bool,
    skip_broken: bool,
    prompt: tuple[str, ...],
) -> None:
    """Run one prompt and print the answer.

    The answer alone goes to stdout; tool calls, extension notes and warnings go to
    stderr. PROMPT "-" reads the prompt from stdin.
    """
    text = " ".join(prompt)
    refuse_untrusted(options, skip_broken=skip_broken)
    status = run_trio(
        run_prompt, options, sys.stdin.read() if text == "-" else text, as_json, usage, skip_broken
    )
    ctx.exit(status)


@click.command(
    "chat",
    epilog=epilog(
        examples=[
            ("corral chat", "the offline model, installed extensions"),
            (
                "corral chat -e examples/extensions/guard",
                "with an extension (also: corral -e PATH)",
            ),
            ("corral chat --session work", "save the transcript and resume it next time"),
        ],
        env=AGENT_ENV,
        exit_codes=((0, "left with /quit, Ctrl-D or Ctrl-C at the prompt"), (1, "unusable setup")),
    ),
)
@agent_options
@click.pass_context
def chat_cmd(ctx: click.Context, options: AgentOptions) -> None:
    """Chat with the agent in this terminal.

    Markdown answers, a spinner while the model or a tool works, history per project
    (Up/Down, Ctrl-R), multi-line input (Alt-Enter or a trailing backslash), Tab
    completion of /commands. Ctrl-C cancels the running turn; Ctrl-D leaves. /help
    lists the slash commands.
    """
    ctx.exit(run_trio(run_chat_until_signal, options))


@click.command(
    "demo",
    epilog=epilog(
        examples=[
            ("corral demo", ""),
            ("corral demo --sandbox required", "fail without a sandbox"),
        ],
        env=COMMON_ENV,
        exit_codes=((0, "every step went as expected"), (1, "a step did not")),
    ),
)
@click.option(
    "--examples",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Directory holding the example extensions [default: the ones corral ships].",
)
@click.option(
    "--sandbox",
    type=click.Choice([m.value for m in SandboxMode]),
    default="auto",
    show_default=True,
    help="Sandbox the extensions: best available, required, or off.",
)
@click.pass_context
def demo_cmd(ctx: click.Context, examples: Path | None, sandbox: str) -> None:
    """An offline tour: tools, guard, crash, reload.

    The offline model and the example extensions, in a temporary home and working
    directory: tool calls, a guard blocking and rewriting commands, redaction, a
    crash and restart mid-session, /reload-ext, and a clean stop. No key, no network.
    """
    from .demo import default_examples_dir, missing_examples, run_demo

    # The demo narrates crashes and restarts itself; the supervisor's own warnings
    # would only repeat them (``-v`` or CORRAL_LOG still shows them).
    root = ctx.find_root().params
    if not root.get("verbose"):
        configure_logging(level="error", log_format=root.get("log_format") or "none")
    where = examples or default_examples_dir()
    if where is None:
        raise CLIError(
            "cannot find the example extensions (corral's package ships them; is the "
            "installation complete?); pass --examples DIR (examples/extensions of a checkout)"
        )
    missing = missing_examples(where)
    if missing:
        raise CLIError(
            f"--examples {where}: not the example extensions (missing {', '.join(missing)}); "
            "pass examples/extensions of a corral checkout"
        )
    ctx.exit(run_trio(run_demo, where, sandbox))
