"""A tool host's state, and the order of the calls that may change it.

The client keeps a tool host's state (seed ``tool-host-protocol.md``: the host
answers "an updated ``result.state`` so the client can round-trip tool state"), so
it outlives a crash of the host. An answer's state replaces the kept one, so two
calls that carried the same state and both answer one would lose the first
answer's change (a model asks for ``add_note`` and ``countdown`` in one step: the
countdown's echo of the old state came last and the note was gone). Hence:

* a call to a tool the host declares ``stateless`` goes without the state and runs
  beside the others; its answer's state, if any, is not kept;
* every other call may change the state: such calls go one at a time, in the order
  they were asked (:class:`StateTurns`), each with the state its predecessor left.
  One that waits its turn is tracked (its deadline runs, a crash fails it) and is
  sent when the call before it is answered, fails, times out or is abandoned.

Hooks (``format_tool_result``, ...) see the state and are not ordered: the state
one answers is kept only when nothing changed it since the hook was asked
(see :meth:`~supervisor._toolhost.ToolHostProtocol`).
"""

from __future__ import annotations

import contextlib
import typing
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from sandbox.log import get_logger

from ._calls import CallKind, PendingCalls, Reply
from ._requests import CallTool

__all__ = ["HostSession", "StateTurns"]

log = get_logger(__name__)
_encoder = msgspec.json.Encoder()


@typing.final
class HostSession:
    """What outlives one incarnation of a tool host: its state and UI elements."""

    __slots__ = ("state", "ui_elements")

    def __init__(self) -> None:
        #: The state the client round-trips (None until ``init`` gave one).
        self.state: dict[str, Any] | None = None
        #: ``get_ui_elements``, as the host last answered it.
        self.ui_elements: list[Any] = []

    def __repr__(self) -> str:
        return f"<HostSession state={self.state is not None} ui={len(self.ui_elements)}>"

    def initial(self, state: Any, value: Any) -> None:
        """``init`` answered: its ``result.state``, or a value that is an object, is
        the state; after a restart the calls go on with the state the client held."""
        if self.state is None:
            state = state if state is not None else value
            if isinstance(state, dict):
                self.state = state

    def keep_ui(self, path: Path) -> None:
        """Keep the UI elements at ``path`` for ``corral ext list --json`` (which starts
        nothing). Blocking: run in a worker thread.

        Written only when they changed: rewriting the same bytes at every start costs
        a file system write (milliseconds on a busy disk).
        """
        try:
            data = _encoder.encode(self.ui_elements)
            with contextlib.suppress(OSError):  # missing or unreadable: written below
                if path.read_bytes() == data:
                    return
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        except (OSError, TypeError, ValueError) as exc:
            log.warning("toolhost_ui_not_kept", path=str(path), error=str(exc))

    def exited(self, returncode: int | None, tail: list[str]) -> None:
        """An incarnation exited: nothing to do (the state is kept)."""

    def closed(self, problem: str) -> None:
        """The run ended: nothing to do."""


#: Sends a call whose turn came (its line with the state kept now); False when it
#: could not be sent (the sender has failed it).
Send = Callable[[Reply[Any], CallTool], bool]


@typing.final
class StateTurns:
    """The calls of one incarnation that may change its state: one in flight at a
    time (:attr:`current`), the others waiting their turn in the order they came."""

    __slots__ = ("_calls", "_send", "_session", "_waiting", "current")

    def __init__(self, session: HostSession, calls: PendingCalls, send: Send) -> None:
        self._session = session
        self._calls = calls
        self._send = send
        self._waiting: deque[tuple[Reply[Any], CallTool]] = deque()
        #: The call in flight that may change the state (None: none is).
        self.current: Reply[Any] | None = None

    def __repr__(self) -> str:
        return f"<StateTurns current={self.current!r} waiting={len(self._waiting)}>"

    def queue(self, rid: str, req: CallTool, reply: Reply[Any]) -> bool:
        """Take call ``rid``: False when its turn is now (the caller sends it); True
        when it waits its turn, tracked as pending from now on (its deadline runs)."""
        reply.then = self._settled
        if self.current is None:
            self.current = reply
            return False
        self._calls.add(rid, reply)
        self._waiting.append((reply, req))
        return True

    def answered(self, reply: Reply[Any], state: Any) -> None:
        """The host answered call ``reply`` with ``state`` (None: none). The current
        call's state is kept, and the next call's turn has come; the state of a call
        that took none (a stateless tool) is not kept."""
        if reply is self.current:
            if isinstance(state, dict):
                self._session.state = state
            self._advance()

    def hook_answered(self, sent: Any, state: Any) -> bool:
        """A hook asked with state ``sent`` answered ``state``: kept when the kept state
        is still ``sent`` and no call that may change it is in flight (else it would
        undo theirs). False: a change that was not kept."""
        if not isinstance(state, dict):
            return True
        if self._session.state is sent and self.current is None:
            self._session.state = state
            return True
        return bool(state == sent)

    def _settled(self, reply: Reply[Any]) -> None:
        # The answer to the caller (value or error): a call that failed, timed out or
        # was abandoned while current gives its turn to the next one.
        if reply is self.current:
            self._advance()

    def _advance(self) -> None:
        self.current = None
        while self._waiting:
            reply, req = self._waiting.popleft()
            if self._calls.peek(reply.rid, CallKind.TOOL) is not reply:
                continue  # timed out, abandoned or failed while it waited
            if self._send(reply, req):  # (one it could not send, it failed)
                self.current = reply
                return
