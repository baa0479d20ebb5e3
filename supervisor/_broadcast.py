"""The supervisor's event stream: its subscribers, and what each change tells them.

:class:`Broadcast` holds the subscribers' channels (a slow one loses events,
counted and logged, and never slows the supervisor) and remembers which
incarnation of each extension was announced, so that what subscribers learn
follows the extensions' lives exactly once: ``ExtensionStarted`` for the first
ready incarnation (or a new one swapped in by a reload), ``ExtensionRestarted``
for a later one, ``ExtensionKept`` and ``ExtensionStopped`` at a reload's swap
and at a stop. A new subscriber first learns what already runs.
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import Iterable

import trio

from sandbox.log import get_logger

from ._api import (
    ExtensionKept,
    ExtensionRestarted,
    ExtensionStarted,
    ExtensionStopped,
    SupervisorEvent,
)
from ._swap import Swap

if typing.TYPE_CHECKING:
    from ._extension import Extension

__all__ = ["Broadcast"]

log = get_logger(__name__)


@typing.final
class Broadcast:
    """Subscribers, and the extensions' announced incarnations (see the module docstring)."""

    def __init__(self) -> None:
        self._subscribers: list[trio.MemorySendChannel[SupervisorEvent]] = []
        self._dropped = 0
        #: Extension name -> the pid of its incarnation subscribers know of.
        self._announced: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<Broadcast subscribers={len(self._subscribers)} dropped={self._dropped}>"

    def subscribe(
        self, buffer: int, running: Iterable[Extension]
    ) -> trio.MemoryReceiveChannel[SupervisorEvent]:
        """A new event channel; it first learns which of ``running`` serve."""
        send, recv = trio.open_memory_channel[SupervisorEvent](buffer)
        self._subscribers.append(send)
        for ext in running:
            if ext.serving and ext.pid is not None:
                with contextlib.suppress(trio.WouldBlock):
                    send.send_nowait(started_event(ext))
        return recv

    @property
    def listened(self) -> bool:
        """Someone subscribed (an event made for nobody need not be made)."""
        return bool(self._subscribers)

    def publish(self, event: SupervisorEvent) -> None:
        """Send ``event`` to every subscriber; a full one loses it (counted, logged)."""
        for chan in list(self._subscribers):
            try:
                chan.send_nowait(event)
            except trio.WouldBlock:
                self._dropped += 1
                if self._dropped <= 10 or self._dropped % 1000 == 0:
                    log.warning("event_dropped", kind=type(event).__name__, total=self._dropped)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                self._subscribers.remove(chan)

    def serving(self, ext: Extension) -> None:
        """``ext`` may serve a new incarnation: announce it, once per incarnation
        (started the first time, restarted after)."""
        if not ext.serving or ext.pid is None or self._announced.get(ext.name) == ext.pid:
            return
        first = ext.name not in self._announced
        self._announced[ext.name] = ext.pid
        listened = self.listened  # no event is made for nobody
        if not first:
            if listened:
                event = ExtensionRestarted(extension=ext.name, pid=ext.pid, restarts=ext.restarts)
                self.publish(event)
            return
        plan = ext.plan
        if plan is not None and not plan.sandboxed:
            log.warning("extension_unsandboxed", extension=ext.name, why=plan.notes)
        if listened:
            self.publish(started_event(ext))

    def swapped(self, swap: Swap[Extension]) -> None:
        """Events of a reload's swap: the retired stopped, the new started, the kept kept."""
        for ext in swap.retired:
            self.stopped(ext.name)
        new = {e.name: e for e in swap.discarded}
        for ext in swap.exts:
            if ext in swap.staying:
                continue
            if ext in swap.kept:
                why = new[ext.name].problem if ext.name in new else "its manifest did not load"
                self.publish(ExtensionKept(extension=ext.name, pid=ext.pid, reason=why))
            elif ext.serving and ext.pid is not None:
                self._announced[ext.name] = ext.pid
                self.publish(started_event(ext))

    def stopped(self, name: str) -> None:
        """``name`` was stopped and forgotten: a later start is a first one again."""
        self._announced.pop(name, None)
        if self.listened:
            self.publish(ExtensionStopped(extension=name))

    def close(self) -> None:
        """End every subscriber's channel (the supervisor is closed)."""
        for chan in self._subscribers:
            chan.close()


def started_event(ext: Extension) -> ExtensionStarted:
    """The ``ExtensionStarted`` of ``ext``'s serving incarnation."""
    assert ext.pid is not None
    plan = ext.plan
    return ExtensionStarted(
        extension=ext.name,
        pid=ext.pid,
        sandboxed=bool(plan and plan.sandboxed),
        backend=plan.backend if plan else "none",
        tools=sorted(ext.tools),
        commands=sorted(ext.commands),
        note="; ".join(plan.notes) if plan else "",
    )
