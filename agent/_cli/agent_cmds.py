"""The agent commands of the ``corral`` CLI: ``run``, ``chat`` and ``demo``.

Each command is a thin shim around ``trio.run``. User mistakes and unusable
setups (unknown provider, malformed script, bad ``--cwd``, unreadable session)
become :class:`~.errors.CLIError`: one clear message, no traceback.
:func:`agent_options` adds the options every agent-running command shares, and
is reused by ``corral rpc``.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import msgspec
import trio

from sandbox import SandboxMode
from sandbox._log import get_logger
from supervisor import SupervisorError

from .._events import Done
from .._exceptions import AgentError
from .._host import AgentHost, open_agent
from .._options import AgentOptions
from .._providers.base import ProviderSettings
from .._providers.factory import PROVIDERS
from .._tools.web import WebConfig
from .allocator import unpool_large_buffers
from .errors import CLIError
from .ext_files import ext_dirs
from .helptext import AGENT_ENV, COMMON_ENV, epilog
from .lifecycle import SignalCancel, check_started, requested_extensions
from .logs import configure_logging, human_stderr
from .render import HumanRenderer, JsonRenderer
from .safe_text import visible
from .screen import Terminal, make_console
from .term import is_terminal
from .trust import check_extensions

__all__ = [
    "agent_options",
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
    if isinstance(exc, AgentError | SupervisorError):
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
        CLIError: ``main`` failed with an :class:`AgentError` or a
            :class:`SupervisorError` (possibly inside an exception group).
    """
    unpool_large_buffers()
    try:
        return trio.run(main, *args)
    except Exception as exc:
        found = _user_error(exc)
        if found is None:
            raise
        raise CLIError(str(found)) from None


_SETTINGS = ProviderSettings()

_OPTIONS = [
    click.option(
        "-e",
        "--ext",
        "ext_paths",
        multiple=True,
        type=click.Path(),
        callback=ext_dirs,
        help="Load the extension in this directory, or of this extension.json (repeatable); "
        "wins over installed ones.",
    ),
    click.option(
        "--provider",
        type=click.Choice(PROVIDERS),
        envvar="CORRAL_PROVIDER",
        help="Model provider [default: offline; scripted with --script; openai with --base-url].",
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
        "-c",
        "--continue",
        "continue_session",
        is_flag=True,
        help="Resume the most recently used session of this directory.",
    ),
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
    click.option(
        "--base-url",
        help="API base URL (openai, anthropic); without --provider it means openai.",
    ),
    click.option("--api-key", help="API key (openai, anthropic; default: from the environment)."),
    click.option(
        "--no-extensions",
        is_flag=True,
        help="Do not load installed extensions (only --ext ones).",
    ),
    click.option(
        "--max-tokens",
        type=click.IntRange(min=1),
        default=_SETTINGS.max_tokens,
        show_default=True,
        envvar="CORRAL_MAX_TOKENS",
        help="max_tokens of each model call [env CORRAL_MAX_TOKENS].",
    ),
    click.option(
        "--connect-timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=_SETTINGS.connect_timeout,
        show_default=True,
        envvar="CORRAL_CONNECT_TIMEOUT",
        help="Seconds to connect to the model API [env CORRAL_CONNECT_TIMEOUT].",
    ),
    click.option(
        "--read-timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=_SETTINGS.read_timeout,
        show_default=True,
        envvar="CORRAL_READ_TIMEOUT",
        help="Longest silence of a model reply, in seconds [env CORRAL_READ_TIMEOUT].",
    ),
    click.option(
        "--retries",
        type=click.IntRange(min=0),
        default=_SETTINGS.retries,
        show_default=True,
        envvar="CORRAL_RETRIES",
        help="Retries of a model call that failed before any output [env CORRAL_RETRIES].",
    ),
    click.option(
        "--retry-max-time",
        type=click.FloatRange(min=0),
        default=_SETTINGS.retry_max_time,
        show_default=True,
        envvar="CORRAL_RETRY_MAX_TIME",
        help="No retry starts after this many seconds of one call [env CORRAL_RETRY_MAX_TIME].",
    ),
    click.option("--system-prompt", help="Replace the system prompt."),
    click.option("--append-system-prompt", help="Append to the system prompt."),
    click.option(
        "--tools",
        "builtin_tools",
        metavar="LIST",
        help="Comma-separated built-in tools to offer (default: read,write,edit,bash); "
        "+NAME/-NAME change the default set: --tools +web adds web_fetch and web_search, "
        "+dynamic new_tool and the tools it made, +mcp mcp_connect/_disconnect/_list.",
    ),
    click.option(
        "--searxng",
        metavar="URL",
        help="SearXNG instance for web_search [default: $CORRAL_SEARXNG_URL].",
    ),
    click.option(
        "--web-allow",
        metavar="ADDR",
        multiple=True,
        help="Let web_fetch reach this address or network despite the SSRF guard, e.g. "
        "127.0.0.1:8080 or 10.0.0.0/8 (repeatable; also $CORRAL_WEB_ALLOW).",
    ),
    click.option(
        "--mcp-allow",
        metavar="ADDR",
        multiple=True,
        help="Let MCP HTTP servers at this address or network be reached despite the "
        "guard, e.g. 127.0.0.1:8931 (repeatable; also $CORRAL_MCP_ALLOW).",
    ),
    click.option(
        "--bash-network",
        metavar="DEST",
        multiple=True,
        help="Let bash commands reach this destination through corral's proxy, e.g. "
        "pypi.org, *.pythonhosted.org or 127.0.0.1:8080 (repeatable; also "
        "$CORRAL_BASH_NETWORK; sandboxed bash has no network otherwise).",
    ),
    click.option(
        "--no-mcp-servers",
        is_flag=True,
        help="Do not start the MCP servers of $CORRAL_HOME/mcp.json and .corral/mcp.json.",
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
        continue_session: bool,
        max_steps: int,
        script: str | None,
        base_url: str | None,
        api_key: str | None,
        no_extensions: bool,
        system_prompt: str | None,
        append_system_prompt: str | None,
        builtin_tools: str | None,
        searxng: str | None,
        web_allow: tuple[str, ...],
        mcp_allow: tuple[str, ...],
        bash_network: tuple[str, ...],
        no_mcp_servers: bool,
        max_tokens: int,
        connect_timeout: float,
        read_timeout: float,
        retries: int,
        retry_max_time: float,
        **kwargs: Any,
    ) -> T:
        tools = None
        if builtin_tools is not None:
            tools = [t.strip() for t in builtin_tools.split(",") if t.strip()]
        if provider is None:
            # A base URL means a server to talk to: never silently the offline model.
            provider = "scripted" if script else "openai" if base_url else "offline"
        settings = ProviderSettings(
            max_tokens=max_tokens,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries=retries,
            retry_max_time=retry_max_time,
        )
        web = None
        if searxng or web_allow:
            try:
                web = WebConfig.from_env(searxng_url=searxng, allow=web_allow)
            except AgentError as exc:
                raise CLIError(str(exc)) from None
        options = AgentOptions(
            provider=provider,
            model=model,
            cwd=cwd,
            ext_paths=[str(Path(p).absolute()) for p in ext_paths],
            discover=not no_extensions,
            sandbox=sandbox,
            session=session,
            continue_session=continue_session,
            max_steps=max_steps,
            system_prompt=system_prompt,
            append_system_prompt=append_system_prompt,
            script=script,
            base_url=base_url,
            api_key=api_key,
            tools=tools,
            web=web,
            provider_settings=settings,
            dynamic_catalog=os.environ.get("CORRAL_DYNAMIC_CATALOG") or None,
            mcp_servers=not no_mcp_servers,
            mcp_allow=list(mcp_allow),
            bash_network=list(bash_network),
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
        CLIError: one line per untrusted extension, each naming the command
            that trusts it.
    """
    try:
        _, untrusted = check_extensions(options)
    except SupervisorError as exc:
        raise CLIError(f"cannot check which extensions are trusted: {exc}") from None
    if untrusted:
        raise CLIError("\n".join(v.problem for v in untrusted))


async def report_extensions(host: AgentHost, renderer: HumanRenderer) -> None:
    """Warn about extensions that failed or run without a sandbox (the reason said once).

    Cancellation: the report is cut short.
    """
    from sandbox import select_sandbox

    bare: list[str] = []
    for info in await host.extensions():
        if info.problem:
            where = f" ({info.path})" if info.state in ("invalid", "duplicate") else ""
            if renderer.human:
                renderer.line(visible(f"warning: extension {info.name}{where}: {info.problem}"))
            else:
                # Error: the extension does not run.
                log.error(
                    "extension_problem", extension=info.name, path=info.path, problem=info.problem
                )
        elif info.pid is not None and not info.sandboxed:
            bare.append(info.name)
    tool_problems = list(host.mcp_problems)
    if host.dynamic is not None:
        tool_problems += [str(r) for r in host.dynamic.refused]
        tool_problems += [host.dynamic.problem] if host.dynamic.problem else []
    if renderer.human:  # else they are logged where they arose, once
        for problem in tool_problems:
            renderer.line(visible(f"warning: {problem}"))
    if bare and renderer.human:  # else the supervisor logged extension_unsandboxed
        try:
            why = getattr(select_sandbox(host.options.sandbox), "reason", "")
        except Exception:  # the supervisor chose already; the reason is a courtesy
            why = ""
        names = ", ".join(bare)
        text = f"warning: {names} run{'s' if len(bare) == 1 else ''} UNSANDBOXED"
        renderer.line(visible(text + (f": {why}" if why else "")))


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
        human_notes=human_stderr(),
    )


async def run_prompt(options: AgentOptions, text: str, as_json: bool, usage: bool = False) -> int:
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
    renderer = run_renderer(as_json, usage=usage)
    required = await trio.to_thread.run_sync(requested_extensions, options)
    signals = SignalCancel()
    try:
        async with trio.open_nursery() as outer:
            await outer.start(signals.watch)
            with signals.scope:
                async with open_agent(options) as host, trio.open_nursery() as nursery:
                    await check_started(host, required)
                    if isinstance(renderer, HumanRenderer):
                        renderer.set_source_of(host.engine.registry.sources().get)
                        await report_extensions(host, renderer)
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
@click.argument("prompt", nargs=-1, required=True)
@click.pass_context
def run_cmd(
    ctx: click.Context, options: AgentOptions, as_json: bool, usage: bool, prompt: tuple[str, ...]
) -> None:
    """Run one prompt and print the answer.

    The answer alone goes to stdout; tool calls, extension notes and warnings go to
    stderr. PROMPT "-" reads the prompt from stdin.
    """
    text = " ".join(prompt)
    refuse_untrusted(options)
    status = run_trio(
        run_prompt, options, sys.stdin.read() if text == "-" else text, as_json, usage
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
    if not ctx.find_root().params.get("verbose"):
        configure_logging(level="error")
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
