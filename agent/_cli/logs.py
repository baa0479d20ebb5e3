"""structlog configuration, done once by the CLI entry point (never by library code).

Console rendering on a TTY, JSON lines otherwise; logs go to stderr so stdout stays
free for output (and for the RPC protocol). Log lines quote extensions (frame
excerpts, names, stderr tails, refusal reasons), so on a TTY every value is made
terminal-safe before the console renderer sees it; JSON lines are left exact
(JSON escapes control characters itself).
"""

from __future__ import annotations

import logging
import os
import sys

import structlog
from structlog.typing import EventDict, WrappedLogger

from .safe_text import visible, visible_lines

__all__ = ["configure_logging", "terminal_safe"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


#: Values that are several lines by nature (tracebacks); each line is made safe.
_MULTILINE = frozenset({"exception", "stack"})


def terminal_safe(logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
    """structlog processor: every value as terminal-safe text (for the console renderer).

    A non-string value whose ``repr`` (what the console renderer shows) embeds
    unsafe text is replaced by that ``repr`` made safe; others are left alone.
    """
    for key, value in event_dict.items():
        if key in _MULTILINE and isinstance(value, str):
            event_dict[key] = "\n".join(visible_lines(value))
        elif isinstance(value, str):
            event_dict[key] = visible(value)
        elif key != "exc_info":
            shown = repr(value)
            if visible(shown) != shown:
                event_dict[key] = visible(shown)
    return event_dict


def configure_logging(verbosity: int = 0, *, level: str | None = None) -> None:
    """Configure structlog for the process.

    Args:
        verbosity: 0 shows warnings and errors, 1 adds info, 2 adds debug.
        level: a level name that replaces ``verbosity`` (``"error"``, ...).

    The ``CORRAL_LOG`` environment variable (``debug``/``info``/``warning``/``error``)
    overrides both.
    """
    threshold = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    if level is not None:
        threshold = _LEVELS[level]
    threshold = _LEVELS.get(os.environ.get("CORRAL_LOG", "").lower(), threshold)
    rendering: list[structlog.typing.Processor]
    if sys.stderr.isatty():
        rendering = [terminal_safe, structlog.dev.ConsoleRenderer()]
    else:
        rendering = [structlog.processors.JSONRenderer()]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            *rendering,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        # Not cached: loggers created at import must follow a later reconfiguration.
        cache_logger_on_first_use=False,
    )
