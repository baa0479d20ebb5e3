"""The ``corral`` command: one click group, thin shims into ``trio.run``.

Commands: ``run``, ``chat``, ``demo`` (agent), ``rpc`` (NDJSON server; also
``corral --rpc``), ``ext …`` (manage extensions), ``sessions …`` (saved sessions),
``sandbox check`` and ``audit`` (who blocked or rewrote what).
"""

from __future__ import annotations

import typing

import click

from .agent_cmds import chat_cmd, demo_cmd, run_cmd
from .audit_cmd import audit_cmd
from .ext_cmds import ext_group, sandbox_group
from .logs import configure_logging
from .rpc_cmd import rewrite_rpc_flag, rpc_cmd
from .sessions_cmd import sessions_group

__all__ = ["main"]


@typing.final
class _Main(click.Group):
    """The group; ``corral [-v] --rpc ARGS`` is read as ``corral [-v] rpc ARGS``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, rewrite_rpc_flag(args))


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-v info, -vv debug).")
@click.option(
    "--rpc",
    is_flag=True,
    expose_value=False,
    help="Same as `corral rpc`: serve one session as JSON lines on stdin/stdout.",
)
@click.version_option(package_name="corral")
def main(verbose: int) -> None:
    """corral: run untrusted agent extensions as supervised, sandboxed subprocesses."""
    configure_logging(verbose)


main.add_command(run_cmd)
main.add_command(chat_cmd)
main.add_command(demo_cmd)
main.add_command(rpc_cmd)
main.add_command(ext_group)
main.add_command(sandbox_group)
main.add_command(audit_cmd)
main.add_command(sessions_group)
