"""The flags every agent-running command shares (``run``, ``chat``, ``rpc``), made
into one :class:`~agent._options.AgentOptions`.

:func:`agent_options` adds them to a click command, which receives ``options``
instead of the single flags. Their defaults are the options' own (the provider
settings' timeouts, retries and ``max_tokens``); ``--provider`` left out picks
``scripted`` with ``--script``, ``openai`` with ``--base-url``, else ``offline``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from sandbox import SandboxMode

from .._exceptions import AgentError
from .._options import AgentOptions
from .._providers.base import REASONING_LEVELS, ProviderSettings, ReasoningLevel
from .._providers.factory import PROVIDERS
from .._tools.web import WebConfig
from .errors import CLIError
from .ext_files import ext_dirs

__all__ = ["agent_options"]

T = TypeVar("T")

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
        "--no-tools",
        is_flag=True,
        help='Offer the model no built-in tool (as --tools ""); extension tools stay.',
    ),
    # -- reasoning --
    click.option(
        "--reasoning",
        type=click.Choice(REASONING_LEVELS),
        help="How hard the model may think before it answers (refused for a model "
        "that cannot reason) [default: the provider's own].",
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


# --- issue 27: config files, --resume, --protect ------------------------------------
#
# A value of the user's or the project's config.toml is the default of the flag of
# that name (``main`` sets it as click's ``default_map``; see :mod:`.settings`).

_MORE_OPTIONS = [
    click.option(
        "--resume",
        metavar="NAME",
        help="Resume the saved session NAME (an error when there is none; --session "
        "NAME also starts a new one).",
    ),
    click.option(
        "--protect",
        metavar="PATH",
        multiple=True,
        help="A path bash, write and edit never change, besides the defaults (repeatable; "
        "also $CORRAL_PROTECT, separated by ':').",
    ),
]


def _resumed(session: str | None, resume: str | None, home: str | None) -> str | None:
    """The session to open: ``--resume NAME`` (which must exist) or ``--session NAME``."""
    if resume is None:
        return session
    if session is not None and session != resume:
        raise click.UsageError("--resume and --session name different sessions: give one")
    from supervisor import corral_home

    from .._exceptions import SessionError
    from .._sessions import SessionHeader, SessionStore, list_sessions

    where = Path(home).expanduser() if home else corral_home()
    try:
        store = SessionStore.for_name(where, resume, SessionHeader(name=resume))
    except SessionError as exc:
        raise CLIError(str(exc)) from None
    if not store.path.exists():
        known = ", ".join(i.name for i in list_sessions(where)) or "none"
        raise CLIError(f"--resume {resume}: no saved session of that name (saved: {known})")
    return resume


def _protected(given: tuple[str, ...]) -> list[str] | None:
    """``--protect`` (and the files' ``protect``) added to ``CORRAL_PROTECT``; None: neither."""
    if not given:
        return None
    env = [p for p in os.environ.get("CORRAL_PROTECT", "").split(os.pathsep) if p.strip()]
    return [*env, *given]


# --- end of issue 27's block ------------------------------------------------------------


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
        no_tools: bool,
        reasoning: ReasoningLevel | None,
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
        resume: str | None,
        protect: tuple[str, ...],
        **kwargs: Any,
    ) -> T:
        tools = None
        if builtin_tools is not None:
            tools = [t.strip() for t in builtin_tools.split(",") if t.strip()]
        # --no-tools (seeds/rpc.md) is `--tools ""`; with a list that offers some, the
        # two contradict each other, and guessing which one was meant would be worse.
        if no_tools:
            if tools:
                raise click.UsageError(
                    f"--no-tools and --tools {builtin_tools} contradict each other"
                )
            tools = []
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
            session=_resumed(session, resume, None),
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
            reasoning=reasoning,
            protect=_protected(protect),
        )
        return f(*args, options=options, **kwargs)

    decorated: Callable[..., T] = wrapper
    for option in reversed([*_OPTIONS, *_MORE_OPTIONS]):
        decorated = option(decorated)
    return decorated


#: ``--skip-broken-extensions`` of ``run`` and ``rpc`` (see :func:`.lifecycle.broken`).
skip_broken_option = click.option(
    "--skip-broken-extensions",
    "skip_broken",
    is_flag=True,
    help="Go on without an extension that cannot start (an invalid manifest, refused at "
    "hello, exited before ready) instead of stopping with exit status 1.",
)
