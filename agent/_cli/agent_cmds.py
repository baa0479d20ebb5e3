"""The agent commands of the ``corral`` CLI: ``run``, ``chat`` and ``demo``.

Each command is a thin shim around ``trio.run``. User mistakes and unusable
setups (unknown provider, malformed script, bad ``--cwd``, unreadable session)
become :class:`AgentCLIError`: one clear line, no traceback.
:func:`agent_options` adds the options every agent-running command shares, and
is reused by ``corral rpc``.
"""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO, TypeVar

import click
import trio

from sandbox import SandboxMode
from supervisor import SupervisorError

from .._events import Done
from .._exceptions import AgentError
from .._host import AgentHost, AgentOptions, open_agent
from .._providers.factory import PROVIDERS
from .chat import run_chat
from .demo import default_examples_dir, run_demo
from .logs import configure_logging
from .render import HumanRenderer, JsonRenderer
from .safe_text import visible
from .trust import check_extensions

__all__ = [
    "AgentCLIError",
    "agent_options",
    "chat_cmd",
    "demo_cmd",
    "refuse_untrusted",
    "report_extensions",
    "run_cmd",
    "run_prompt",
    "run_trio",
]

T = TypeVar("T")

#: Exit status of ``corral run`` when the turn was cancelled with Ctrl-C.
EXIT_INTERRUPTED = 130


class AgentCLIError(click.ClickException):
    """A user mistake or an unusable setup, shown as one line without a traceback."""

    def format_message(self) -> str:
        # Supervisor errors quote manifests and extension output.
        return visible(self.message)


def _user_error(exc: BaseException) -> BaseException | None:
    if isinstance(exc, AgentError | SupervisorError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _user_error(inner)
            if found is not None:
                return found
    return None


def run_trio(main: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``trio.run(main, *args)``, turning agent and supervisor errors into :class:`AgentCLIError`.

    Raises:
        AgentCLIError: ``main`` failed with an :class:`AgentError` or a
            :class:`SupervisorError` (possibly inside an exception group).
    """
    try:
        return trio.run(main, *args)
    except Exception as exc:
        found = _user_error(exc)
        if found is None:
            raise
        raise AgentCLIError(str(found)) from None


_OPTIONS = [
    click.option(
        "-e",
        "--ext",
        "ext_paths",
        multiple=True,
        type=click.Path(file_okay=False),
        help="Load the extension in this directory (repeatable); wins over installed ones.",
    ),
    click.option(
        "--provider",
        type=click.Choice(PROVIDERS),
        envvar="CORRAL_PROVIDER",
        help="Model provider [default: offline, or scripted with --script].",
    ),
    click.option("--model", help="Model id (default: the provider's default)."),
    click.option(
        "--cwd",
        default=".",
        show_default=True,
        type=click.Path(file_okay=False, exists=True),
        help="Working directory of the built-in tools.",
    ),
    click.option(
        "--sandbox",
        type=click.Choice([m.value for m in SandboxMode]),
        default="auto",
        show_default=True,
        help="Sandbox extensions and bash: best available, required, or off.",
    ),
    click.option("--session", metavar="NAME", help="Save to / resume the session NAME."),
    click.option(
        "--max-steps",
        type=click.IntRange(min=1),
        default=16,
        show_default=True,
        help="Model calls per prompt at most.",
    ),
    click.option(
        "--script",
        type=click.Path(dir_okay=False, exists=True),
        help="JSONL script of model turns for the scripted provider.",
    ),
    click.option("--base-url", help="API base URL (openai, anthropic)."),
    click.option("--api-key", help="API key (openai, anthropic; default: from the environment)."),
    click.option(
        "--no-extensions",
        is_flag=True,
        help="Do not load installed extensions (only --ext ones).",
    ),
    click.option("--system-prompt", help="Replace the system prompt."),
    click.option("--append-system-prompt", help="Append to the system prompt."),
    click.option(
        "--tools",
        "builtin_tools",
        metavar="LIST",
        help="Comma-separated built-in tools to offer (default: read,write,edit,bash).",
    ),
]


def agent_options(f: Callable[..., T]) -> Callable[..., T]:
    """Add the shared agent options to a click command.

    The command receives one ``options: AgentOptions`` keyword argument instead of
    the individual options.
    """

    @functools.wraps(f)
    def wrapper(
        *args: Any,
        ext_paths: tuple[str, ...],
        provider: str | None,
        model: str | None,
        cwd: str,
        sandbox: str,
        session: str | None,
        max_steps: int,
        script: str | None,
        base_url: str | None,
        api_key: str | None,
        no_extensions: bool,
        system_prompt: str | None,
        append_system_prompt: str | None,
        builtin_tools: str | None,
        **kwargs: Any,
    ) -> T:
        tools = None
        if builtin_tools is not None:
            tools = [t.strip() for t in builtin_tools.split(",") if t.strip()]
        options = AgentOptions(
            provider=provider or ("scripted" if script else "offline"),
            model=model,
            cwd=cwd,
            ext_paths=[str(Path(p).absolute()) for p in ext_paths],
            discover=not no_extensions,
            sandbox=sandbox,
            session=session,
            max_steps=max_steps,
            system_prompt=system_prompt,
            append_system_prompt=append_system_prompt,
            script=script,
            base_url=base_url,
            api_key=api_key,
            tools=tools,
        )
        return f(*args, options=options, **kwargs)

    decorated: Callable[..., T] = wrapper
    for option in reversed(_OPTIONS):
        decorated = option(decorated)
    return decorated


def refuse_untrusted(options: AgentOptions) -> None:
    """Refuse to run while a project-local or installed extension is not trusted.

    A whole ``run`` or ``rpc`` fails rather than going on without the extension: the
    one left out may be the guard the user counts on.

    Raises:
        AgentCLIError: one line per untrusted extension, each naming the command
            that trusts it.
    """
    try:
        _, untrusted = check_extensions(options)
    except SupervisorError as exc:
        raise AgentCLIError(f"cannot check which extensions are trusted: {exc}") from None
    if untrusted:
        raise AgentCLIError("\n".join(v.problem for v in untrusted))


async def report_extensions(host: AgentHost, err: TextIO) -> None:
    """Warn on ``err`` about extensions that failed or run without a sandbox.

    Cancellation: the report is cut short.
    """
    for info in await host.extensions():
        if info.problem:
            where = f" ({info.path})" if info.state in ("invalid", "duplicate") else ""
            err.write(visible(f"warning: extension {info.name}{where}: {info.problem}") + "\n")
        elif info.pid is not None and not info.sandboxed:
            warning = f"warning: extension {info.name} runs UNSANDBOXED (backend {info.backend})"
            err.write(visible(warning) + "\n")
    err.flush()


async def _cancel_on_interrupt(
    scope: trio.CancelScope, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    # The first Ctrl-C cancels the turn cleanly; once this receiver is closed a
    # second one raises KeyboardInterrupt as usual.
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        task_status.started()
        async for _ in signals:
            scope.cancel()
            return


async def run_prompt(options: AgentOptions, text: str, as_json: bool) -> int:
    """``corral run``: one prompt, rendered for people or as JSON lines.

    Returns:
        The exit status: 0, 1 when the last turn ended with an error or was
        blocked, 130 when it was cancelled with Ctrl-C.

    Cancellation: the turn is aborted and every extension stopped.
    """
    out = sys.stdout
    renderer: HumanRenderer | JsonRenderer = JsonRenderer(out) if as_json else HumanRenderer(out)
    async with open_agent(options) as host, trio.open_nursery() as nursery:
        if not as_json:
            await report_extensions(host, sys.stderr)
        await nursery.start(host.run_forwarder, renderer.emit)
        with trio.CancelScope() as turn:
            await nursery.start(_cancel_on_interrupt, turn)
            await host.engine.prompt(text, [], renderer.emit)
        await renderer.emit(Done())
        nursery.cancel_scope.cancel()
    if turn.cancelled_caught:
        return EXIT_INTERRUPTED
    return 1 if renderer.last_stop in ("error", "blocked") else 0


@click.command("run")
@agent_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON event per line.")
@click.argument("prompt", nargs=-1, required=True)
@click.pass_context
def run_cmd(
    ctx: click.Context, options: AgentOptions, as_json: bool, prompt: tuple[str, ...]
) -> None:
    """Run one prompt and print the answer ("-" reads the prompt from stdin)."""
    text = " ".join(prompt)
    refuse_untrusted(options)
    ctx.exit(run_trio(run_prompt, options, sys.stdin.read() if text == "-" else text, as_json))


@click.command("chat")
@agent_options
def chat_cmd(options: AgentOptions) -> None:
    """Chat interactively (/help lists the slash commands)."""
    run_trio(run_chat, options)


@click.command("demo")
@click.option(
    "--examples",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Directory holding the example extensions [default: the source tree's].",
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
    """Show corral offline: tools, guard, redaction, a crash, reload, clean stop."""
    # The demo narrates crashes and restarts itself; the supervisor's own warnings
    # would only repeat them (``-v`` or CORRAL_LOG still shows them).
    if not ctx.find_root().params.get("verbose"):
        configure_logging(level="error")
    where = examples or default_examples_dir()
    if where is None:
        raise AgentCLIError(
            "cannot find the example extensions; run from a corral checkout or pass "
            "--examples DIR (the examples/extensions directory)"
        )
    ctx.exit(run_trio(run_demo, where, sandbox))
