"""The ``corral`` command: one click group, thin shims into ``trio.run``.

Commands: ``run``, ``chat``, ``demo`` (agent), ``rpc`` (NDJSON server; also
``corral --rpc``), ``ext …`` (manage extensions), ``sessions …`` (saved sessions),
``audit`` (who blocked or rewrote what), ``tools …`` (dynamic tools, MCP servers),
``sandbox check`` and ``completion``.
``corral -e PATH`` is ``corral chat -e PATH``.

Start-up is kept fast: this module imports only click, and a command's module is
imported when that command runs (``corral --help`` lists the commands from the
table below without importing any of them).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import typing

import click

from .._version import __version__
from .argv import rewrite_shortcuts
from .helptext import epilog
from .term import ColorMode, set_color_mode

__all__ = ["COMMANDS", "main"]

#: Command name -> (module in this package, attribute, one-line summary).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("agent_cmds", "run_cmd", "Run one prompt and print the answer."),
    "chat": ("agent_cmds", "chat_cmd", "Chat with the agent in this terminal."),
    "demo": ("agent_cmds", "demo_cmd", "An offline tour: tools, guard, crash, reload."),
    "rpc": ("rpc_cmd", "rpc_cmd", "Serve one agent session as JSON lines."),
    "batch": ("batch_cmd", "batch_cmd", "Run many sessions from a tasks file, each result once."),
    "ext": ("ext_cmds", "ext_group", "Manage extensions: list, install, trust, logs."),
    "sessions": ("sessions_cmd", "sessions_group", "List, show and remove saved sessions."),
    "audit": (
        "audit_cmd",
        "audit_cmd",
        "Show the blocks, rewrites and refused connections of extensions.",
    ),
    "tools": (
        "tools_cmd",
        "tools_group",
        "Dynamic tools and MCP servers: list, show, remove, trust.",
    ),
    "sandbox": ("ext_cmds", "sandbox_group", "Check which sandbox backend works here."),
    "config": (
        "config_cmd",
        "config_group",
        "Show each setting, its value and where it came from.",
    ),
    "completion": ("completion", "completion_cmd", "Print a shell completion script."),
}


#: Commands that run an agent (and so extensions and the bash tool).
_AGENT_COMMANDS = frozenset({"run", "chat", "demo", "rpc"})
#: Commands whose flags the config files give defaults to (:mod:`.settings`).
_CONFIGURED = frozenset({"run", "chat", "rpc"})


def _late_verbose(ctx: click.Context, param: click.Parameter, value: int) -> None:
    if value:
        from .logs import configure_logging

        root = ctx.find_root()
        root.params["verbose"] = total = int(root.params.get("verbose") or 0) + value
        configure_logging(total)


def _late_color(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        set_color_mode(ctx, ColorMode(value))


def _accept_global_options(command: click.Command) -> None:
    """Let ``-v`` and ``--color`` follow the command name too (``corral run hi -v``),
    in ``command`` and every command below it; said once, in the group's help."""
    if getattr(command, "_corral_globals", False):
        return
    command._corral_globals = True  # type: ignore[attr-defined]
    command.params += [
        click.Option(
            ["-v", "--verbose", "late_verbose"],
            count=True,
            expose_value=False,
            hidden=True,
            callback=_late_verbose,
        ),
        click.Option(
            ["--color", "late_color"],
            type=click.Choice([m.value for m in ColorMode]),
            expose_value=False,
            hidden=True,
            callback=_late_color,
        ),
    ]
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _accept_global_options(sub)


def _option(args: list[str], *names: str) -> str | None:
    """The value of the last of ``names`` in ``args`` (``--x V`` or ``--x=V``), if any."""
    found = None
    for i, arg in enumerate(args):
        if arg in names and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith("--") and arg.partition("=")[0] in names:
            found = arg.partition("=")[2]
    return found


def _will_spawn(command: str, args: list[str]) -> bool:
    """A guess whether the command starts child processes (blocking: a few ``stat``s).

    True for the demo, an extension named with ``-e``, extra tools (``--tools``), a
    real model (which may call ``bash``), or installed or project-local extensions,
    tool hosts or MCP servers. It only decides the prefetch: what is not prefetched
    is started on first use.
    """
    from pathlib import Path

    from supervisor import corral_home

    if command == "demo" or "--tools" in args:
        return True
    if any(a.startswith(("-e", "--ext", "--tools=")) for a in args):
        return True
    provider = _option(args, "--provider") or os.environ.get("CORRAL_PROVIDER")
    if provider is None and _option(args, "--base-url") is not None:
        return True  # openai
    if provider not in (None, "offline", "scripted"):
        return True
    home = corral_home()
    project = Path(_option(args, "--cwd") or ".") / ".corral"
    for place in (home / "extensions", project / "extensions"):
        with contextlib.suppress(OSError), os.scandir(place) as entries:
            if next(entries, None) is not None:
                return True
    return (home / "mcp.json").exists() or (project / "mcp.json").exists()


def _prefetch_sandbox(command: str, args: list[str]) -> None:
    """Start the sandbox's guardian and probe in the background, while the command's
    modules import (a third of a second), when the command is about to start child
    processes: both take tens of milliseconds of waiting for child processes, which
    then overlap the imports instead of following them. The probe's result is cached
    for the command to find. A command that starts nothing (``corral run hi`` with the
    offline model and no extension) skips both: they happen on first use, if ever."""
    mode = _option(args, "--sandbox") or "auto"

    def prefetch() -> None:
        if not _will_spawn(command, args):
            return
        from sandbox import SandboxError, select_sandbox, start_guardian

        start_guardian()
        if mode != "off":
            with contextlib.suppress(SandboxError, ValueError):  # the command says why
                select_sandbox(mode)

    # The packages the thread uses are imported here, first: two threads importing
    # the modules of one package at once can each find a module the other is still
    # initializing ("partially initialized module 'supervisor._relay'"), and this
    # thread would die with it. The command imports them next anyway.
    import supervisor  # noqa: F401

    # Not a daemon: a command that ends before the probe did (one refused at once)
    # waits for it at exit, so the probe's children and its temporary directory are
    # gone before the interpreter is.
    threading.Thread(target=prefetch, name="corral-sandbox-prefetch").start()


@typing.final
class _Main(click.Group):
    """The group: lazy commands, and the ``--rpc`` / ``-e PATH`` shortcuts."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, rewrite_shortcuts(args))

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*COMMANDS, *(name for name in super().list_commands(ctx) if name not in COMMANDS)]

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] in _AGENT_COMMANDS:
            _prefetch_sandbox(args[0], args[1:])
        if args and args[0] in _CONFIGURED and not {"-h", "--help"} & set(args):
            from .settings import flag_defaults

            # The config files' values: defaults of the flags, after flags and env.
            defaults = flag_defaults(_option(args[1:], "--cwd") or ".")
            if defaults:
                ctx.default_map = {args[0]: defaults}
        return super().resolve_command(ctx, args)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: typing.Any,
    ) -> click.Context:
        from .pipes import until_reader_gone

        with until_reader_gone():  # `corral --help | head -1`
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> typing.Any:
        from .pipes import until_reader_gone

        with until_reader_gone():
            return super().invoke(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)  # added with add_command
        if found is not None or cmd_name not in COMMANDS:
            return found
        module, attr, summary = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(f".{module}", __package__), attr)
        assert isinstance(command, click.Command)
        command.short_help = summary
        _accept_global_options(command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The summaries from the table: listing must not import every command.
        rows = [(name, summary) for name, (_, _, summary) in COMMANDS.items()]
        for name in super().list_commands(ctx):
            if name not in COMMANDS:
                rows.append((name, self.commands[name].get_short_help_str(limit=60)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=_Main,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=epilog(
        examples=[
            ("corral demo", "the offline tour (no key, no network)"),
            ('corral run "weather in Berlin?" -e examples/extensions/weather', "one prompt"),
            ("corral -e examples/extensions/guard", "chat with an extension"),
            ('corral -p "what is in README.md?"', "one prompt (as corral run)"),
            ("corral ext list", "installed and project-local extensions"),
            ("corral COMMAND --help", "more about one command"),
        ],
    ),
)
@click.option("-v", "--verbose", count=True, help="Log to stderr (-v info, -vv debug).")
@click.option(
    "--color",
    type=click.Choice([m.value for m in ColorMode]),
    default="auto",
    show_default=True,
    help="Colour human output (auto: on a terminal, unless NO_COLOR is set).",
)
@click.option(
    "--log-format",
    type=click.Choice(["file", "console", "json"]),
    default=None,
    help="Where the structured log goes: the log file (default; stderr with -v), or "
    "stderr rendered for the console or as JSON lines.",
)
@click.option(
    "-e",
    "--ext",
    metavar="PATH",
    expose_value=False,
    help="Chat with the extension in PATH: same as `corral chat -e PATH`.",
)
@click.option(
    "-p",
    "--print",
    "print_prompt",
    metavar="PROMPT",
    expose_value=False,
    help="Run one prompt and print the answer: same as `corral run PROMPT`.",
)
@click.option(
    "--rpc",
    is_flag=True,
    expose_value=False,
    help="Same as `corral rpc`: serve one session as JSON lines on stdin/stdout.",
)
@click.version_option(__version__, package_name="corral")
@click.pass_context
def main(ctx: click.Context, verbose: int, color: str, log_format: str | None) -> None:
    """corral: run untrusted agent extensions as supervised, sandboxed subprocesses.

    Without a key or a network, `corral demo` shows what it does. Stderr carries
    messages for people; the structured log goes to $CORRAL_HOME/logs/corral.log
    (-v or --log-format shows it on stderr instead). -v and --color may follow the
    command too (`corral run hi -v`). Flag defaults can be kept in
    ~/.config/corral/config.toml (`corral config` shows them).
    """
    from .logs import configure_logging  # structlog is not needed for --help

    set_color_mode(ctx, ColorMode(color))
    configure_logging(verbose, log_format=log_format)
