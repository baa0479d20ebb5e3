"""What follows an exit the host did not ask for: the restart policy, as pure logic.

:func:`describe_exit` is also the one text for how any child ended.

:func:`decide` takes the facts of one exit (status, refusal, restart policy, the
recent crash times) and returns a :class:`Decision`; the owner task carries it out
(state, events, quarantine record, the backoff sleep). Keeping it pure keeps the
policy testable without processes.
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Sequence

import msgspec

from ._api import ExtensionCrashed
from ._config import RestartPolicy, SupervisorConfig

__all__ = ["Decision", "Verdict", "crash_event", "decide", "describe_exit", "exit_signal"]


class Verdict(enum.Enum):
    """What the owner does next."""

    #: Refused (handshake): not restarted.
    FAILED = "failed"
    #: Exited under a policy that does not restart this exit.
    STOPPED = "stopped"
    #: Crashed too often within the window: not restarted until enabled.
    QUARANTINE = "quarantine"
    #: Restart after ``delay`` seconds.
    RESTART = "restart"


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """The verdict, why, and (for a restart) after how long."""

    verdict: Verdict
    #: What happened, for events and ``ext list`` (exit status, refusal, quarantine).
    reason: str
    #: Crashes inside the quarantine window, this one included.
    crashes: int = 0
    delay: float | None = None
    #: The crash times to remember for the next decision (the window, pruned).
    recent: tuple[float, ...] = ()


def exit_signal(returncode: int | None) -> str | None:
    """The name of the signal that killed a child (``"SIGKILL"``), or None when it
    exited by itself (or has not exited)."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:  # a real-time signal, say
        return f"signal {-returncode}"


def describe_exit(returncode: int | None, *, guardian_lost: bool = False) -> str:
    """How a child ended, in words: ``exit status 3`` or ``killed by SIGKILL`` (the one
    text for every child corral runs; under bwrap, signal N shows as status 128 + N).

    With ``guardian_lost`` it says that the guardian's death killed it; ``None`` (not
    reaped yet) is ``still running``.
    """
    if returncode is None:
        return "still running"
    name = exit_signal(returncode)
    if name is None:
        return f"exit status {returncode}"
    return f"killed by {name}" + (": corral's guardian process died" if guardian_lost else "")


def crash_event(
    name: str, returncode: int | None, reason: str, tail: list[str], restart_in: float | None
) -> ExtensionCrashed:
    """The event announcing an exit (or a refusal, ``returncode`` None)."""
    return ExtensionCrashed(
        extension=name,
        returncode=returncode,
        signal=exit_signal(returncode),
        reason=reason,
        stderr_tail=tail,
        restart_in=restart_in,
    )


def decide(
    *,
    name: str,
    policy: RestartPolicy,
    returncode: int | None,
    refused: str | None,
    early_exit: str | None,
    crashes: Sequence[float],
    now: float,
    config: SupervisorConfig,
    jitter: float,
    guardian_lost: bool = False,
    retry: str | None = None,
) -> Decision:
    """Decide what follows one exit; ``recent`` includes it when it counts as a crash.

    Args:
        name: the extension's name (quarantine advice names it).
        policy: the manifest's ``restart``.
        returncode: exit status (negative: killed by that signal).
        refused: why the handshake refused the extension, if it did.
        early_exit: what it exited before doing (``"sending hello"``; a tool host:
            ``"answering init"``), or None.
        crashes: monotonic times of earlier crashes (the previous ``recent``).
        now: the current monotonic time.
        config: backoff and quarantine settings.
        jitter: the factor applied to the backoff delay; callers draw it from
            ``random.uniform(0.8, 1.2)`` so restarts of many extensions spread out.
        guardian_lost: it died with the guardian that started it (the reason says so).
        retry: how to try again after a quarantine (default: ``corral ext enable NAME``
            or a reload).
    """
    status = describe_exit(returncode, guardian_lost=guardian_lost)
    if refused is not None:
        return Decision(verdict=Verdict.FAILED, reason=refused, recent=tuple(crashes))
    reason = f"exited before {early_exit} ({status})" if early_exit else status
    clean = returncode == 0
    if policy == "never" or (clean and policy == "on-failure"):
        return Decision(verdict=Verdict.STOPPED, reason=reason, recent=tuple(crashes))
    recent = tuple(t for t in (*crashes, now) if now - t <= config.quarantine_window)
    count = len(recent)
    if count >= config.quarantine_crashes:
        why = (
            f"crashed {count} times in {config.quarantine_window:g} s (last: {reason}); "
            f"{retry or f'run `corral ext enable {name}` or reload'} to try again"
        )
        return Decision(verdict=Verdict.QUARANTINE, reason=why, crashes=count, recent=recent)
    base = min(config.restart_backoff_max, config.restart_backoff * 2.0 ** (count - 1))
    return Decision(
        verdict=Verdict.RESTART, reason=reason, crashes=count, delay=base * jitter, recent=recent
    )
