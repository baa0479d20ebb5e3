"""``corral completion bash|zsh|fish``: print the shell's completion script.

The script asks ``corral`` itself for completions (click's protocol, through the
``_CORRAL_COMPLETE`` variable), so it stays right as commands change.
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

from .helptext import COMMON_ENV, epilog

__all__ = ["completion_cmd"]

_SHELLS = ("bash", "zsh", "fish")


@click.command(
    "completion",
    epilog=epilog(
        examples=[
            ('eval "$(corral completion bash)"', "in ~/.bashrc"),
            ('eval "$(corral completion zsh)"', "in ~/.zshrc"),
            ("corral completion fish > ~/.config/fish/completions/corral.fish", "fish"),
        ],
        env=COMMON_ENV,
        exit_codes=((0, "the script was printed"),),
    ),
)
@click.argument("shell", type=click.Choice(_SHELLS))
@click.pass_context
def completion_cmd(ctx: click.Context, shell: str) -> None:
    """Print a shell completion script.

    Completes commands, options, and their values (providers, sandbox modes).
    """
    root = ctx.find_root()
    complete = get_completion_class(shell)
    assert complete is not None  # one of click's three shells
    script = complete(root.command, {}, "corral", "_CORRAL_COMPLETE").source()
    click.echo(script)
