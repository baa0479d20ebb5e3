"""Shortcuts of the ``corral`` command line, rewritten before click parses it.

* ``corral [group options] --rpc ARGS`` is ``corral [group options] rpc ARGS``;
* ``corral [group options] -e PATH ARGS`` (or ``--ext PATH``) is
  ``corral [group options] chat -e PATH ARGS``: the seed's bare form, a chat with
  that extension;
* ``corral [group options] -p PROMPT ARGS`` (or ``--print PROMPT``,
  ``--print=PROMPT``) is ``corral [group options] run PROMPT ARGS``: the one-shot
  form other agent CLIs have.

Only the group's own leading options count; anything after the first other
argument (a command name, an option of a command) is left alone.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["rewrite_shortcuts"]

#: Options of the ``corral`` group that take no value.
_FLAGS = frozenset({"-v", "-vv", "-vvv", "--verbose"})
#: Options of the ``corral`` group that take a value (as the next argument).
_VALUED = frozenset({"--color"})


def _is_ext(arg: str) -> bool:
    return (
        arg in ("-e", "--ext")
        or arg.startswith("--ext=")
        or (arg.startswith("-e") and not arg.startswith("--"))
    )


def rewrite_shortcuts(args: Sequence[str]) -> list[str]:
    """``args`` with ``--rpc`` turned into ``rpc``, a leading ``-e`` put after ``chat``,
    and a leading ``-p``/``--print`` turned into ``run``."""
    out = list(args)
    index = 0
    while index < len(out):
        arg = out[index]
        if arg == "--rpc":
            out[index] = "rpc"
            return out
        if arg in ("-p", "--print"):
            out[index] = "run"
            return out
        if arg.startswith("--print="):
            out[index : index + 1] = ["run", arg.partition("=")[2]]
            return out
        if _is_ext(arg):
            out.insert(index, "chat")
            return out
        if arg in _VALUED:
            index += 2
        elif arg in _FLAGS or any(arg.startswith(f"{v}=") for v in _VALUED):
            index += 1
        else:
            break
    return out
