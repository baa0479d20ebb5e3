"""The lifecycle of one extension: its states and the moves between them.

Every change of an extension's state goes through :meth:`Lifecycle.move`, which
checks it against :data:`TRANSITIONS` and raises :class:`IllegalTransition` for a
move the table does not have. The usual paths::

    STOPPED ─spawn─> STARTING ─hello─> REGISTERING ─ready─> RUNNING
                       │                   │                   │
                       └─── an exit we did not ask for ─────────┴──> BACKOFF ─respawn─> STARTING
    STARTING / REGISTERING / RUNNING ─stop─> STOPPING ─reaped─> STOPPED
    refused, crashed too often, untrusted: FAILED / QUARANTINED / UNTRUSTED ─enable─> STOPPED

The whole table is in ``docs/architecture.md``. Pure: no I/O, no trio; the owner
task (:mod:`supervisor._extension`) drives it.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Mapping

from sandbox.log import get_logger

from ._exceptions import IllegalTransition

__all__ = ["LISTED", "SERVING", "TRANSITIONS", "ExtensionState", "Lifecycle"]

log = get_logger(__name__)


class ExtensionState(enum.StrEnum):
    """Where an extension is in its lifecycle (a string on every wire: ``"running"``)."""

    #: ``enabled: false`` in its manifest; never started.
    DISABLED = "disabled"
    #: Spawned; waiting for ``hello``.
    STARTING = "starting"
    #: ``hello`` accepted; collecting registrations until ready.
    REGISTERING = "registering"
    #: Ready and serving.
    RUNNING = "running"
    #: Exited without being asked to; waiting out the restart delay.
    BACKOFF = "backoff"
    #: The shutdown ladder is running.
    STOPPING = "stopping"
    #: Not running: not started yet, stopped by the host, or exited under a policy
    #: that does not restart that exit.
    STOPPED = "stopped"
    #: Refused (handshake) or could not be planned or spawned; not restarted.
    FAILED = "failed"
    #: Crashed too often, or its granted paths changed; not restarted until enabled.
    QUARANTINED = "quarantined"
    #: Not trusted (never, or changed since): not started, or not restarted.
    UNTRUSTED = "untrusted"
    #: Listing only (``ext list``): its manifest is invalid. Never a lifecycle state.
    INVALID = "invalid"
    #: Listing only: shadowed by an extension of the same name. Never a lifecycle state.
    DUPLICATE = "duplicate"


S = ExtensionState

#: The legal moves: state -> the states it may go to.
TRANSITIONS: Mapping[ExtensionState, frozenset[ExtensionState]] = {
    # A run begins here: spawned, or given up on before any spawn.
    S.STOPPED: frozenset({S.STARTING, S.DISABLED, S.FAILED, S.QUARANTINED, S.UNTRUSTED}),
    # hello; a stop; an exit (restarted, refused, stopped by policy, quarantined).
    S.STARTING: frozenset(
        {S.REGISTERING, S.STOPPING, S.BACKOFF, S.FAILED, S.STOPPED, S.QUARANTINED}
    ),
    # ready; a stop; an exit.
    S.REGISTERING: frozenset({S.RUNNING, S.STOPPING, S.BACKOFF, S.STOPPED, S.QUARANTINED}),
    # a stop; an exit.
    S.RUNNING: frozenset({S.STOPPING, S.BACKOFF, S.STOPPED, S.QUARANTINED}),
    # respawn; a stop; the respawn refused (trust, grants, planning, spawning).
    S.BACKOFF: frozenset({S.STARTING, S.STOPPED, S.FAILED, S.QUARANTINED, S.UNTRUSTED}),
    # the ladder ended with the process reaped.
    S.STOPPING: frozenset({S.STOPPED}),
    # ``enable``: a new run may begin.
    S.FAILED: frozenset({S.STOPPED}),
    S.QUARANTINED: frozenset({S.STOPPED}),
    S.UNTRUSTED: frozenset({S.STOPPED}),
    S.DISABLED: frozenset(),
    S.INVALID: frozenset(),
    S.DUPLICATE: frozenset(),
}

#: States whose registrations count: running, or restarting after a crash.
LISTED = frozenset({S.STARTING, S.REGISTERING, S.RUNNING, S.BACKOFF})
#: States in which calls can be sent: registered and not stopping.
SERVING = frozenset({S.REGISTERING, S.RUNNING})


@typing.final
class Lifecycle:
    """The state of one extension; :meth:`move` is the only way to change it."""

    __slots__ = ("_name", "_state")

    def __init__(self, name: str, state: ExtensionState = S.STOPPED) -> None:
        self._name = name
        self._state = state

    def __repr__(self) -> str:
        return f"<Lifecycle {self._name!r} {self._state.name}>"

    @property
    def state(self) -> ExtensionState:
        """The current state."""
        return self._state

    def can(self, new: ExtensionState) -> bool:
        """Whether moving to ``new`` now is legal."""
        return new in TRANSITIONS[self._state]

    def move(self, new: ExtensionState) -> None:
        """Go to ``new``.

        Raises:
            IllegalTransition: the table has no such move (a bug in corral).
        """
        old = self._state
        if new not in TRANSITIONS[old]:
            raise IllegalTransition(self._name, old.value, new.value)
        log.debug("extension_state", old=old.value, new=new.value)
        self._state = new
