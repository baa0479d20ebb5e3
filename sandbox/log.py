"""structlog, imported on the first log call: a command that logs nothing never loads it.

Importing structlog costs a fifth of a whole offline ``corral run`` (it imports
rich for its console renderer, asyncio for its stdlib integration and rich's
pretty-printer for tracebacks), and most commands log nothing. So every module of
``sandbox``, ``supervisor`` and ``agent`` takes its module-level logger from
:func:`get_logger` here: a :class:`LazyLogger` that imports structlog and binds
``structlog.get_logger(name)`` on its first attribute access (``log.info``), then
forwards everything to it. The log itself is structlog's, unchanged.

The CLI's configuration follows the same rule: :func:`configure_when_loaded`
runs it at once when structlog is already imported, else the moment
:func:`load_structlog` first imports it (before the first entry is rendered), so
what is written and where is the same as configuring up front. Given the
``level`` that configuration lets through, a call below it made while structlog
is not loaded is dropped without loading it (the configured filter would drop it
too): a host that starts extensions and logs only ``info`` about them, under a
``warning`` threshold, never pays structlog's 6 MiB.

This is corral's one public logging entry point (``sandbox.log``, a public
module beside the facade, as ``supervisor.lowlevel`` is). It lives in ``sandbox``,
the bottom of the three packages, so that all three share one without any of them
importing another's private module.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
import typing
from typing import Any as _Any

if typing.TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import ModuleType

__all__ = [
    "LazyLogger",
    "bound_contextvars",
    "configure_when_loaded",
    "get_logger",
    "lazy_structlog",
    "load_structlog",
]

_lock = threading.Lock()
#: The configuration to run when structlog is first imported (None: none waiting).
_pending: Callable[[ModuleType], None] | None = None
#: The least level the waiting configuration lets through (None: not said).
_gate: int | None = None
#: The level of each logger method the gate may drop (``logging``'s numbers).
_METHOD_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40}


def load_structlog() -> ModuleType:
    """Import structlog, running the configuration waiting for it first.

    Thread-safe: the configuration runs once, before any caller gets the module.
    """
    global _pending
    import structlog

    with _lock:
        setup, _pending = _pending, None
        if setup is not None:
            setup(structlog)
    return structlog


def configure_when_loaded(setup: Callable[[ModuleType], None], *, level: int | None = None) -> None:
    """Run ``setup(structlog)`` now if structlog is imported, else when it first is.

    A later call replaces a configuration still waiting (the last one wins, as
    with ``structlog.configure``).

    Args:
        setup: configures structlog.
        level: the least level (``logging.WARNING``, ...) ``setup``'s configuration
            lets through: until structlog is loaded, a call below it (``log.info``
            under ``WARNING``) is dropped without loading structlog. None: every
            call loads it.
    """
    global _pending, _gate
    with _lock:
        if "structlog" not in sys.modules:
            _pending, _gate = setup, level
            return
        _pending, _gate = None, None
    setup(load_structlog())


def _drop(*_args: _Any, **_kwargs: _Any) -> None:
    """A log call below the waiting configuration's level."""


@typing.final
class LazyLogger:
    """A module's logger: ``structlog.get_logger(*args)`` once a method is looked up.

    structlog's own logger is a lazy proxy that follows later reconfigurations
    (the CLI leaves ``cache_logger_on_first_use`` off so that it does) by
    assembling a new bound logger at every call, a few microseconds even for a
    filtered ``debug``. This one keeps the logger it assembled while the
    configuration it was assembled from is still the configured one (the same
    processor list, wrapper class, logger factory and context class; structlog's
    own ``capture_logs`` edits that list in place, which the logger sees), and
    assembles again when any of them was replaced.
    """

    __slots__ = ("_args", "_bound", "_context", "_from", "_logger")

    def __init__(self, *args: _Any, _context: dict[str, _Any] | None = None) -> None:
        self._args = args
        self._context = _context or {}
        self._logger: _Any = None
        self._bound: _Any = None
        self._from: tuple[_Any, ...] = ()

    def __repr__(self) -> str:
        return f"<LazyLogger {self._args!r} loaded={self._logger is not None}>"

    def bind(self, **values: _Any) -> LazyLogger:
        """A logger with ``values`` bound (structlog's ``bind``), still lazy."""
        return LazyLogger(*self._args, _context={**self._context, **values})

    def __getattr__(self, name: str) -> _Any:
        global _get_config
        if _get_config is None:
            gate = _gate
            if gate is not None and "structlog" not in sys.modules:
                level = _METHOD_LEVELS.get(name)
                if level is not None and level < gate:
                    return _drop
            _get_config = load_structlog().get_config
        early = _early.get()
        if early:  # bound while structlog was not loaded: bound to this call's logger
            return getattr(self._logger_now().bind(**early), name)
        return getattr(self._logger_now(), name)

    def _logger_now(self) -> _Any:
        """The bound logger of the current configuration (assembled again if it changed)."""
        assert _get_config is not None
        config = _get_config()
        made = self._from  # what the bound logger was assembled from, by identity
        if (
            not made
            or made[0] is not config["processors"]
            or made[1] is not config["wrapper_class"]
            or made[2] is not config["logger_factory"]
            or made[3] is not config["context_class"]
        ):
            if self._logger is None:
                self._logger = load_structlog().get_logger(*self._args)
            self._bound = self._logger.bind(**self._context)
            self._from = (
                config["processors"],
                config["wrapper_class"],
                config["logger_factory"],
                config["context_class"],
            )
        return self._bound


#: ``structlog.get_config``, once structlog is imported.
_get_config: Callable[[], dict[str, _Any]] | None = None


def get_logger(*args: _Any) -> _Any:
    """The lazy equivalent of ``structlog.get_logger(*args)`` (typed ``_Any`` as structlog's)."""
    return LazyLogger(*args)


#: What :func:`bound_contextvars` bound while structlog was not loaded.
_early: contextvars.ContextVar[dict[str, _Any] | None] = contextvars.ContextVar(
    "corral_log_early", default=None
)


@contextlib.contextmanager
def bound_contextvars(**bindings: _Any) -> Iterator[None]:
    """``structlog.contextvars.bound_contextvars``, without importing structlog.

    Once structlog is loaded this is structlog's own. Before, the bindings are kept
    in a context variable of this module, and every entry logged in that context
    (after structlog is loaded by it, or by anything else) carries them, as the
    bound logger's values.
    """
    if "structlog" in sys.modules:
        with load_structlog().contextvars.bound_contextvars(**bindings):
            yield
        return
    token = _early.set({**(_early.get() or {}), **bindings})
    try:
        yield
    finally:
        _early.reset(token)


@typing.final
class _LazyStructlog:
    """The ``structlog`` module for code that uses more than a logger
    (``structlog.contextvars``): imported on the first attribute access."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<lazy structlog>"

    def __getattr__(self, name: str) -> _Any:
        return getattr(load_structlog(), name)


#: Stands for the ``structlog`` module where a module uses it beyond ``get_logger``.
lazy_structlog: _Any = _LazyStructlog()
