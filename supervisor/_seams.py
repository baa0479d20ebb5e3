"""The seams of the call path, declared once: what each layer needs of the next.

A tool call crosses five layers, each through one of these protocols (the hot
path, tuned by measurement: see docs/architecture.md, "The hot path"):

=====================  ==============================  ===============================
seam                   who calls                        who implements
=====================  ==============================  ===============================
:class:`Backend`       ``SupervisorClient``             ``_Supervisor`` (routes at once)
:class:`Talk`          ``Extension`` (the owner)        a kind's protocol module
:class:`Conversation`  ``Incarnation.serve``            the same protocol (its stdio)
:class:`Pipe`          a kind's protocol                ``Incarnation`` (stdin, kill)
``Spin``               ``Reply.wait`` (``_calls``)      ``ChildProtocol.spin``
=====================  ==============================  ===============================

Each fast path has a general twin that must give the same answers; the parity
tests (``tests/supervisor/test_hotpath_parity.py``) hold them together:
``Backend.call_tool`` and ``Backend.submit`` of a ``CallTool``; the inlined send
of ``Extension.call_tool`` and the general ``_opened`` + ``_send``; the bare frame
decoder and encoder and the diagnosing ones; a spinning caller and a parked one;
``LineReader.lines_nowait`` and ``LineReader.next_nowait``.

A seam is narrow: a kind's protocol needs only :class:`Pipe` of its incarnation,
which needs only :class:`Conversation` of it.
"""

from __future__ import annotations

from typing import Any, Protocol

import trio

from ._api import CommandInfo, SupervisorEvent, ToolInfo
from ._calls import Reply
from ._lines import LineReader
from ._requests import CallTool, PreviewToolCall, Request

__all__ = ["Backend", "Conversation", "Pipe", "Talk"]


class Backend(Protocol):
    """What the client needs of a supervisor (``_Supervisor`` in this process)."""

    def submit(self, request: Request) -> Reply[Any]:
        """Route ``request`` now (never blocks); its answer comes through the reply."""
        ...

    def call_tool(self, request: CallTool) -> Reply[Any]:
        """Route a tool call now (never blocks): ``submit``'s hot path, answering
        exactly as ``submit`` would."""
        ...

    def subscribe(self, buffer: int) -> trio.MemoryReceiveChannel[SupervisorEvent]:
        """A new event channel."""
        ...

    def tool_infos(self) -> list[ToolInfo]:
        """Extension tools registered now."""
        ...

    def command_infos(self) -> list[CommandInfo]:
        """Extension commands registered now."""
        ...


class Conversation(Protocol):
    """What an incarnation speaks over the child's stdio."""

    #: Bytes the shutdown ladder writes before it closes stdin (may be empty).
    goodbye: bytes
    #: Set when the child said it is leaving; the ladder then kills it after
    #: ``ack_grace`` instead of waiting out ``shutdown_grace``.
    acked: trio.Event

    async def converse(self, reader: LineReader) -> None:
        """Read and handle the child's stdout until EOF."""
        ...


class Talk(Conversation, Protocol):
    """What the owner task needs of the protocol one incarnation speaks: its
    :class:`Conversation`, and the owner's requests turned into lines."""

    #: Why start-up refused the child (it is killed and not restarted), or None.
    refused: str | None
    #: The child's stdout ended before start-up was over.
    early_exit: bool
    #: What an early exit missed, for the crash report (``"sending hello"``).
    first_step: str

    def send_tool(self, rid: str, req: CallTool, reply: Reply[Any]) -> str | None:
        """Send tool call ``rid`` (or queue it, for a tool host's state) and track it;
        an error text when it cannot be sent."""
        ...

    def call(self, rid: str, line: bytes, reply: Reply[Any]) -> str | None:
        """Send ``line`` and track it as call ``rid``; an error text when it cannot."""
        ...

    def preview(self, req: PreviewToolCall, reply: Reply[str | None]) -> None:
        """Answer ``reply`` with a one-line preview of a call, or None."""
        ...

    def host_changed(self) -> None:
        """The provider, model or cwd changed."""
        ...


class Pipe(Protocol):
    """What a protocol needs of its incarnation: a line to stdin, and a kill."""

    @property
    def pid(self) -> int:
        """The process (under bwrap: bwrap itself)."""
        ...

    def send(self, data: bytes, *, coalesce: bool = False) -> str | None:
        """Queue a line for stdin (never blocks); an error text when it cannot."""
        ...

    def kill(self) -> None:
        """SIGKILL the process group now (a refused start-up)."""
        ...
