"""The ``corral`` command: one click group, thin shims into ``trio.run``.

Commands: ``run``, ``chat``, ``demo`` (agent), ``rpc`` (NDJSON server),
``ext …`` (manage extensions) and ``sandbox check``.
"""

from __future__ import annotations

import click

from ._cli_agent import chat_cmd, demo_cmd, run_cmd
from ._cli_ext import ext_group, sandbox_group
from ._logging import configure_logging

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-v info, -vv debug).")
@click.version_option(package_name="corral")
def main(verbose: int) -> None:
    """corral: run untrusted agent extensions as supervised, sandboxed subprocesses."""
    configure_logging(verbose)


main.add_command(run_cmd)
main.add_command(chat_cmd)
main.add_command(demo_cmd)
main.add_command(ext_group)
main.add_command(sandbox_group)
