"""``corral config``: each setting's effective value and where it came from.

The values are those ``run``, ``chat`` and ``rpc`` start with before their own
flags: environment variable > project file > user file > default (see
:mod:`.settings`).
"""

from __future__ import annotations

import json
import os
from typing import Any

import click

from .._options import AgentOptions
from .._providers.base import ProviderSettings
from .errors import CLIError
from .helptext import AGENT_ENV, epilog
from .safe_text import visible
from .settings import KEYS, Setting, project_config_path, resolve, user_config_path

__all__ = ["config_group"]


def _defaults() -> dict[str, Any]:
    options, settings = AgentOptions(), ProviderSettings()
    return {
        "provider": options.provider,
        "sandbox": options.sandbox,
        "max_steps": options.max_steps,
        "max_tokens": settings.max_tokens,
        "connect_timeout": settings.connect_timeout,
        "read_timeout": settings.read_timeout,
        "retries": settings.retries,
        "retry_max_time": settings.retry_max_time,
    }


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _settings(cwd: str) -> dict[str, Setting]:
    return resolve(cwd, _defaults())


_CWD = click.option(
    "--cwd",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False, exists=True),
    help="The project directory (its .corral/config.toml).",
)


@click.group(
    "config",
    invoke_without_command=True,
    epilog=epilog(
        examples=[
            ("corral config", "every key: value and where it came from"),
            ("corral config get model", "one value alone, for scripts"),
        ],
        env=AGENT_ENV,
        exit_codes=((0, "shown"), (1, "a config file is malformed or sets what it may not")),
    ),
)
@_CWD
@click.pass_context
def config_group(ctx: click.Context, cwd: str) -> None:
    """Show each setting, its value and where it came from.

    Settings come from, first to last: a flag, an environment variable, the
    project's .corral/config.toml, your $XDG_CONFIG_HOME/corral/config.toml, the
    default. A project file may not set provider, base_url, system_prompt or the
    network settings, and may only make sandbox and tools stricter.
    """
    if ctx.invoked_subcommand is not None:
        return
    settings = _settings(cwd)
    click.echo(f"user file     {user_config_path()}")
    click.echo(visible(f"project file  {project_config_path(os.path.realpath(cwd))}"))
    click.echo("")
    rows = [(k, visible(_shown(s.value)), visible(s.source)) for k, s in settings.items()]
    heads = ("KEY", "VALUE", "SOURCE")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads[:2])]
    for row in [heads, *rows]:
        click.echo(f"{row[0].ljust(widths[0])}  {row[1].ljust(widths[1])}  {row[2]}".rstrip())


@config_group.command(
    "get",
    epilog=epilog(
        examples=[("corral config get model", "")],
        exit_codes=((0, "printed (empty: unset)"), (1, "unknown key, or a malformed file")),
    ),
)
@click.argument("key")
@_CWD
def config_get(key: str, cwd: str) -> None:
    """Print one setting's effective value (lists as JSON; nothing when unset)."""
    if key not in KEYS:
        raise CLIError(f"unknown key {key!r} (known keys: {', '.join(KEYS)})")
    value = _settings(cwd)[key].value
    if value is not None:
        click.echo(visible(value if isinstance(value, str) else json.dumps(value)))
