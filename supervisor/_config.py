"""Supervisor configuration and corral's well-known paths.

Grace periods and deadlines are policy, so they live here as config fields rather
than as ``timeout=`` arguments scattered through the code.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Literal

import msgspec

from sandbox import SandboxMode

__all__ = [
    "HostInfo",
    "RestartPolicy",
    "SupervisorConfig",
    "choice_file",
    "choice_path",
    "corral_home",
    "data_dir",
    "data_path",
    "identity_of",
    "identity_of_real",
    "log_file",
    "log_path",
    "quarantine_file",
    "quarantine_path",
    "ui_file",
]

RestartPolicy = Literal["on-failure", "always", "never"]


def corral_home() -> Path:
    """``$CORRAL_HOME``, else the platform default.

    Linux: ``$XDG_STATE_HOME/corral`` or ``~/.local/state/corral``; macOS:
    ``~/Library/Application Support/corral``.
    """
    env = os.environ.get("CORRAL_HOME")
    if env:
        return Path(env).expanduser().absolute()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "corral"
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state else Path.home() / ".local" / "state"
    return (base / "corral").absolute()


def identity_of(name: str, ext_dir: str) -> str:
    """An extension's identity: its name and a hash of its directory's real path.

    Per-extension state (data directory, log, quarantine record, trust pin) is keyed
    by it, never by the name alone: a project-local extension named like an
    installed one has a different directory, so it never reaches the installed
    one's state. 64 bits of SHA-256 keep a directory name chosen to collide out of
    reach. Names are validated (letters, digits, ``.``, ``_``, ``-``), so the
    identity is a safe file name.
    """
    return identity_of_real(name, os.path.realpath(ext_dir))


def identity_of_real(name: str, real: str) -> str:
    """:func:`identity_of` for a directory whose real path is known already."""
    tag = hashlib.sha256(b"corral-extension\0" + os.fsencode(real)).hexdigest()[:16]
    return f"{name}-{tag}"


def quarantine_file(home: str | Path, identity: str) -> Path:
    """Where a quarantine is recorded; it persists until ``ext enable`` or a reload."""
    return Path(quarantine_path(home, identity))


def choice_file(home: str | Path, identity: str) -> Path:
    """Where ``ext enable``/``ext disable`` record the user's choice (``true``/``false``).

    It wins over the manifest's ``enabled``, so a project's repository is never
    rewritten to disable an extension in it.
    """
    return Path(choice_path(home, identity))


def ui_file(home: str | Path, identity: str) -> Path:
    """A tool host's last ``get_ui_elements`` answer (JSON), for ``corral ext list --json``."""
    return Path(os.path.join(home, "state", "ui", f"{identity}.json"))


def log_file(home: str | Path, identity: str) -> Path:
    """An extension's stderr log (rotated to ``<log>.1``)."""
    return Path(log_path(home, identity))


def data_dir(home: str | Path, identity: str) -> Path:
    """An extension's private data directory (``$CORRAL_DATA_DIR``)."""
    return Path(data_path(home, identity))


# The same as strings, for every start (a Path costs more than the join; pathlib
# was a tenth of a start's calls).


def quarantine_path(home: str | Path, identity: str) -> str:
    """:func:`quarantine_file` as a string."""
    return os.path.join(home, "state", "quarantine", f"{identity}.txt")


def choice_path(home: str | Path, identity: str) -> str:
    """:func:`choice_file` as a string."""
    return os.path.join(home, "state", "enabled", identity)


def log_path(home: str | Path, identity: str) -> str:
    """:func:`log_file` as a string."""
    return os.path.join(home, "logs", f"ext-{identity}.log")


def data_path(home: str | Path, identity: str) -> str:
    """:func:`data_dir` as a string."""
    return os.path.join(home, "data", identity)


class HostInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What ``hello_ack`` tells extensions about the host."""

    provider: str = ""
    model: str = ""
    cwd: str = ""


class SupervisorConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Policy of one supervisor. Every duration is in seconds."""

    #: corral's home: ``extensions/``, ``logs/``, ``data/``, ``state/`` live under it.
    home: str = msgspec.field(default_factory=lambda: str(corral_home()))
    #: The first frame must be a valid ``hello`` within this time (a tool host: its
    #: start-up, ``get_config_schema`` to ``get_tool_schemas``, must be done by then).
    handshake_timeout: float = 10.0
    #: Starting (not reloading) waits this long at most for an extension's ``hello``;
    #: one still silent then is *late*: it goes on starting (and joins, announced by
    #: the usual events, or fails) after :func:`open_supervisor` returned. None
    #: waits for every extension (bounded by ``handshake_timeout``).
    late_after: float | None = None
    #: Without a ``ready`` frame, ready is this long after the last registration...
    ready_quiet: float = 0.25
    #: ...and at most this long after ``hello``.
    ready_cap: float = 3.0
    #: Deadline of a tool call, covering the write of the request.
    tool_timeout: float = 60.0
    #: Deadline of a slash command.
    command_timeout: float = 60.0
    #: Deadline of each subscriber in an intercept chain (then: allow).
    intercept_timeout: float = 5.0
    #: Deadline of a tool host's optional method (a format, a preview, tags; then:
    #: corral's own rendering). A tool host's start-up (``init`` and the methods
    #: after it) has ``handshake_timeout``.
    hook_timeout: float = 5.0
    #: After ``shutdown`` and closing stdin, wait this long for a voluntary exit.
    shutdown_grace: float = 2.0
    #: After ``shutdown_ack``, the extension has this long to exit before it is killed.
    ack_grace: float = 0.1
    #: After SIGTERM to the process group, wait this long before SIGKILL.
    term_grace: float = 1.0
    #: Largest stdout line accepted from an extension, in bytes.
    max_frame_bytes: int = 16 * 1024 * 1024
    #: First restart delay after a crash; doubles per consecutive crash...
    restart_backoff: float = 0.5
    #: ...up to this ceiling (each delay gets ±20% jitter).
    restart_backoff_max: float = 30.0
    #: This many crashes within ``quarantine_window`` quarantine the extension.
    quarantine_crashes: int = 5
    quarantine_window: float = 300.0
    #: Interpreter for Python extensions (absolute; the host's own by default).
    python: str = sys.executable
    #: Node for JavaScript extensions; None means the ``node`` found on PATH.
    node: str | None = None
    #: ``auto`` (best available, flagged when none), ``required`` or ``off``.
    sandbox: SandboxMode = SandboxMode.AUTO
    #: Rotate an extension's stderr log past this size (one backup kept).
    log_max_bytes: int = 1024 * 1024
    #: Lines of stderr kept in memory for crash reports.
    stderr_tail_lines: int = 20
    #: Tool names extensions may not take: the agent passes its built-in tools (they
    #: win); a supervisor used on its own reserves none.
    reserved_tools: tuple[str, ...] = ()
    #: Command names extensions may not take (the host's slash commands win).
    reserved_commands: tuple[str, ...] = (
        "help",
        "reload-ext",
        "ext",
        "tools",
        "clear",
        "compact",
        "model",
        "reasoning",
        "quit",
        "exit",
    )
    #: The host shows extension panels (chat, RPC and in-process clients); when it
    #: does not, a command's ``open_panel`` answer fails with "panel unsupported
    #: here" and the extension gets ``panel_close`` for it (docs/protocol.md, "Panels").
    panels: bool = False
    #: Frames queued for an extension that is not reading its stdin before calls fail.
    write_backlog: int = 1024
    #: A lone call (nothing else in flight to that extension) reads its answer itself
    #: for up to this long before parking, which saves two task switches when the
    #: extension answers fast; 0 never spins. See docs/architecture.md for the figures.
    reply_spin: float = 50e-6
