"""The lazy module loggers: one assembly per configuration, and every reconfiguration followed."""

from __future__ import annotations

import logging
from typing import Any

import structlog
import structlog.testing

from sandbox.log import get_logger


class Recorder:
    """A structlog logger factory that counts the loggers it makes; each records."""

    def __init__(self) -> None:
        self.made = 0
        self.lines: list[str] = []

    def __call__(self, *args: Any) -> structlog.PrintLogger:
        self.made += 1
        recorder = self

        class Out:
            def write(self, text: str) -> None:
                if text.strip():  # (print writes the line, then its newline)
                    recorder.lines.append(text.strip())

            def flush(self) -> None:
                pass

        return structlog.PrintLogger(Out())  # type: ignore[arg-type]


def configure(factory: Recorder, level: int) -> None:
    structlog.configure(
        processors=[structlog.processors.KeyValueRenderer(key_order=["event"])],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=factory,
        cache_logger_on_first_use=False,  # as the CLI configures it
    )


def test_a_logger_is_assembled_once_per_configuration_and_follows_each_new_one() -> None:
    log = get_logger("corral.test")
    first = Recorder()
    configure(first, logging.INFO)
    log.info("one")
    log.debug("hidden")
    log.info("two")
    assert first.lines == ["event='one'", "event='two'"]
    assert first.made == 1  # structlog's own proxy would have made one per call

    # A new level (wrapper class) and a new factory: the next call uses both.
    second = Recorder()
    configure(second, logging.DEBUG)
    log.debug("shown")
    assert second.lines == ["event='shown'"]
    assert first.lines == ["event='one'", "event='two'"]

    # New processors alone (a new list) are followed too.
    structlog.configure(processors=[structlog.processors.KeyValueRenderer(key_order=["x"])])
    log.info("three", x=3)
    assert second.lines[-1].startswith("x=3")


def test_capture_logs_sees_a_logger_used_before_it() -> None:
    log = get_logger("corral.test")
    configure(Recorder(), logging.DEBUG)
    log.info("before")
    with structlog.testing.capture_logs() as entries:
        log.warning("captured", why="test")
    log.info("after")
    assert entries == [{"event": "captured", "why": "test", "log_level": "warning"}]


GATED = """\
import logging, sys
from sandbox.log import bound_contextvars, configure_when_loaded, get_logger

seen = []
def setup(structlog):
    seen.append("configured")
    structlog.configure(
        processors=[structlog.processors.KeyValueRenderer(key_order=["event"])],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
    )

configure_when_loaded(setup, level=logging.WARNING)
log = get_logger("corral.test")
with bound_contextvars(extension="ext-a"):
    log.debug("dropped")
    log.info("dropped too")
    print("loaded after info:", "structlog" in sys.modules, seen)
    log.warning("shown")
    print("loaded after warning:", "structlog" in sys.modules, seen)
    log.info("filtered by structlog now")
log.warning("unbound")
"""


def test_calls_below_the_waiting_level_never_load_structlog() -> None:
    # A host that logs only info under a warning threshold (corral rpc, an embedder
    # that says its level) keeps structlog's 6 MiB out; the first warning loads it,
    # configured, and is written with what was bound before it was loaded.
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", GATED], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert out == [
        "loaded after info: False []",
        "event='shown' extension='ext-a'",
        "loaded after warning: True ['configured']",
        "event='unbound'",
    ]
