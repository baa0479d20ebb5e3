"""structlog configuration, done once by the CLI entry point (never by library code).

One problem is shown once, in words. Stderr carries the CLI's human lines,
terminal or not (a CI log, a script's ``2>err``); the structured log goes to
``$CORRAL_HOME/logs/corral.log`` (JSON lines, opened on the first entry, rotated
by size) unless ``-v``, ``--log-format`` (or ``CORRAL_LOG``) asks for it on
stderr: rendered for the console on a terminal, JSON lines otherwise or with
``--log-format json``. stdout stays free for output (and for the RPC protocol).

Log lines quote extensions (frame excerpts, names, stderr tails, refusal
reasons), so on a terminal every value is made terminal-safe before the console
renderer sees it; JSON lines are left exact (JSON escapes control characters
itself).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import typing
from pathlib import Path
from types import ModuleType

from sandbox.log import configure_when_loaded

from .safe_text import visible, visible_lines

if typing.TYPE_CHECKING:
    from structlog.typing import EventDict, Processor, WrappedLogger

__all__ = [
    "LOG_FORMATS",
    "LOG_NAME",
    "configure_logging",
    "log_path",
    "logging_configured",
    "terminal_safe",
]

#: The values of ``--log-format``: where and how the structured log is written.
LOG_FORMATS = ("file", "console", "json")

#: The structured log of the CLI, under ``$CORRAL_HOME/logs``.
LOG_NAME = "corral.log"
#: Past this size the log is moved to ``corral.log.1`` when the next command starts.
_ROTATE_BYTES = 4 * 1024 * 1024

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


#: :func:`configure_logging` was called in this process.
_configured = False

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


def log_path() -> Path:
    """``$CORRAL_HOME/logs/corral.log``."""
    from supervisor import corral_home  # not needed until the first log entry

    return corral_home() / "logs" / LOG_NAME


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@typing.final
class _LazyLogFile:
    """The log file, created and opened on the first write (``--help`` writes nothing)."""

    def __init__(self) -> None:
        self._file: typing.TextIO | None = None
        self._failed = False

    def __repr__(self) -> str:
        return f"<_LazyLogFile open={self._file is not None}>"

    def _open(self) -> typing.TextIO | None:
        if self._file is None and not self._failed:
            try:
                path = log_path()
                path.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError):
                    if path.stat().st_size > _ROTATE_BYTES:
                        path.replace(path.with_name(LOG_NAME + ".1"))
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
                self._file = os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace")
            except OSError:
                self._failed = True  # an unwritable home must not break the command
        return self._file

    def write(self, text: str) -> int:
        out = self._open()
        return out.write(text) if out is not None else len(text)

    def flush(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.flush()

    def close(self) -> None:
        """Close the file (a later configuration writes elsewhere)."""
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()


#: The log file of the current configuration, closed when another replaces it.
_log_file: _LazyLogFile | None = None


def configure_logging(
    verbosity: int = 0, *, level: str | None = None, log_format: str | None = None
) -> None:
    """Configure structlog for the process.

    Args:
        verbosity: 0 shows warnings and errors, 1 adds info, 2 adds debug; above 0
            the log is written to stderr.
        level: a level name that replaces ``verbosity`` (``"error"``, ...).
        log_format: ``"file"`` (the log file), ``"console"`` or ``"json"`` (stderr),
            ``"none"`` (nowhere: the demo, which keeps off ``$CORRAL_HOME``);
            None: the log file, or stderr with ``-v`` (console on a terminal, JSON
            otherwise).

    The ``CORRAL_LOG`` environment variable (``debug``/``info``/``warning``/``error``)
    overrides the level and, like ``-v``, sends the log to stderr. In the log file
    entries are kept from info up, whatever ``level`` says.

    The choice is made now; structlog is configured with it when it is first
    imported (see :mod:`sandbox.log`), so a command that logs nothing never loads it.
    """
    global _configured, _log_file
    threshold = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    if level is not None:
        threshold = _LEVELS[level]
    env_level = _LEVELS.get(os.environ.get("CORRAL_LOG", "").lower())
    threshold = env_level if env_level is not None else threshold
    if log_format is None:
        asked = verbosity > 0 or env_level is not None
        log_format = ("console" if _stderr_is_terminal() else "json") if asked else "file"
    to_file = log_format == "file"
    console = log_format == "console"
    if _log_file is not None:
        _log_file.close()
    _log_file = file = _LazyLogFile() if to_file else None

    def setup(structlog: ModuleType) -> None:
        rendering: list[Processor]
        factory: typing.Any
        level = threshold
        if to_file:
            rendering = [structlog.processors.JSONRenderer()]
            factory = structlog.WriteLoggerFactory(file=file)
            level = logging.INFO
        elif console:
            rendering = [terminal_safe, structlog.dev.ConsoleRenderer()]
            factory = structlog.PrintLoggerFactory(sys.stderr)
        else:
            rendering = [structlog.processors.JSONRenderer()]
            factory = structlog.PrintLoggerFactory(sys.stderr)
        if log_format == "none":
            factory = structlog.ReturnLoggerFactory()  # rendered, then dropped
            level = logging.CRITICAL
        structlog.configure(
            processors=[
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
                *rendering,
            ],
            wrapper_class=structlog.make_filtering_bound_logger(level),
            logger_factory=factory,
            # Not cached: loggers created at import must follow a later reconfiguration.
            cache_logger_on_first_use=False,
        )

    _configured = True
    # Entries below the level are dropped without loading structlog (sandbox.log).
    configure_when_loaded(setup, level=logging.INFO if to_file else threshold)


def logging_configured() -> bool:
    """True once :func:`configure_logging` ran, or structlog was configured otherwise
    (a test's ``capture_logs``); the check imports nothing."""
    if _configured:
        return True
    structlog = sys.modules.get("structlog")
    return structlog is not None and bool(structlog.is_configured())
