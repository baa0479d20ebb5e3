"""structlog configuration, done once by the CLI entry point (never by library code).

Console rendering on a TTY, JSON lines otherwise; logs go to stderr so stdout stays
free for output (and for the RPC protocol).
"""

from __future__ import annotations

import logging
import os
import sys

import structlog

__all__ = ["configure_logging"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


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
    renderer: structlog.typing.Processor
    if sys.stderr.isatty():
        renderer = structlog.dev.ConsoleRenderer()
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        # Not cached: loggers created at import must follow a later reconfiguration.
        cache_logger_on_first_use=False,
    )
