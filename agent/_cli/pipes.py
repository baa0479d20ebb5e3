"""A reader that closed corral's output ends corral quietly (``corral run --json … | head -1``).

Python ignores ``SIGPIPE``, so a write to a pipe nobody reads raises
``BrokenPipeError``, often deep inside trio (an exception group) while the agent
is running. The command's own ``async with`` blocks stop what it started as the
error unwinds; :func:`reader_gone` then tells the CLI's entry point that the error
was only that, so it exits with status 0 (the reader's choice, as ``git log |
head`` does) and no traceback. A broken pipe of anything else (an extension's
stdin) is not the reader's choice and is raised as before.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import sys
from collections.abc import Iterator

import click

__all__ = ["flush_stdout", "quiet_stdout", "reader_gone", "until_reader_gone"]

_STDIO = (1, 2)


def _closed(fd: int) -> bool:
    """True when ``fd`` is a pipe or socket whose reader has gone (POLLERR/POLLHUP)."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    try:
        events = poller.poll(0)
    except OSError:
        return False
    return any(revents & (select.POLLERR | select.POLLHUP) for _, revents in events)


def _epipe_only(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_epipe_only(e) for e in exc.exceptions)
    return isinstance(exc, OSError) and exc.errno == errno.EPIPE


def reader_gone(exc: BaseException) -> bool:
    """True when ``exc`` is only broken pipes and stdout's (or stderr's) reader is gone."""
    return _epipe_only(exc) and any(_closed(fd) for fd in _STDIO)


def quiet_stdout() -> None:
    """Point stdout and stderr, where their reader is gone, at ``/dev/null``.

    What is still buffered then goes nowhere, instead of failing again when the
    interpreter flushes at exit ("Exception ignored … BrokenPipeError", status 120).
    """
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in _STDIO:
            if _closed(fd):
                os.dup2(null, fd)
    finally:
        os.close(null)


def flush_stdout() -> bool:
    """Flush stdout; False (and stdout quieted) when its reader has gone."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        if not reader_gone(exc):
            raise
        quiet_stdout()
        return False
    return True


@contextlib.contextmanager
def until_reader_gone() -> Iterator[None]:
    """Run a command; if its output's reader went away, end it with status 0.

    What the command started was stopped as the error unwound (its ``async with``
    blocks); what is still buffered is flushed here, not at interpreter exit.
    """
    try:
        yield
        if flush_stdout():
            return
    except Exception as exc:
        if not reader_gone(exc):
            with contextlib.suppress(OSError):
                flush_stdout()  # its status wins; what is buffered is not lost at exit
            raise
        quiet_stdout()
    raise click.exceptions.Exit(0)
