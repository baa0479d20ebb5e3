"""The third kind of supervised child: a stdio MCP server, its lines relayed.

A stdio MCP server is started at run time (``SupervisorClient.start_child`` with an
:func:`~supervisor._manifest.mcp_server_spec`) and supervised like every child: the
sandbox and its pins, the environment allowlist, its log, restart with backoff and
quarantine, the shutdown ladder (end of stdin is its goodbye, as MCP's stdio
transport says), ``ext list``. What it speaks, JSON-RPC, is the agent's MCP
client's business (the official SDK): :class:`RelayProtocol` only relays lines.

The client follows the child through a :class:`Relay`: :meth:`Relay.next` gives
each incarnation as a :class:`RelayedProcess` (its stdout as a byte stream of whole
lines, its stdin, its exit and stderr tail), and None once the child will not run
again (stopped, failed, quarantined: :attr:`Relay.problem` says why).

A line longer than the supervisor's limit is skipped without being buffered; the
incarnation is then ended (its stdout closed for the client, the process killed),
and the restart policy decides what follows.
"""

from __future__ import annotations

import math
import typing
from typing import Any

import trio

from sandbox.log import get_logger

from ._calls import PendingCalls, Reply
from ._config import SupervisorConfig
from ._lines import LineReader, Oversize
from ._protocol import ChildProtocol, Owner, Registrations
from ._requests import CallTool, PreviewToolCall

__all__ = ["Relay", "RelayProtocol", "RelayedProcess"]

log = get_logger(__name__)

#: Lines waiting for the client before the child's stdout is read no further.
_BACKLOG = 64


@typing.final
class _Lines(trio.abc.ReceiveStream):
    """The child's stdout lines (each with its newline) as a byte stream."""

    def __init__(self, receive: trio.MemoryReceiveChannel[bytes]) -> None:
        self._receive = receive

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            return b""

    async def aclose(self) -> None:
        self._receive.close()
        await trio.lowlevel.checkpoint()


@typing.final
class _Input(trio.abc.SendStream):
    """The child's stdin: whole lines, queued without blocking (the incarnation's writer)."""

    def __init__(self, pipe: Any) -> None:
        self._pipe = pipe

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        error = self._pipe.send(bytes(data))
        await trio.lowlevel.checkpoint()
        if error is not None:
            raise trio.BrokenResourceError(error)

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


@typing.final
class RelayedProcess:
    """One incarnation of a relayed child, as the client sees it.

    Attributes:
        pid: the process (under bwrap: bwrap itself).
        sandboxed: it runs inside a sandbox backend.
        stdout: its lines, each ending in a newline; ends when its stdout does.
        stdin: where whole lines go (a line not taken raises ``BrokenResourceError``).
        returncode: its exit status once it exited and was reaped (None until then).
        violation: why corral ended the incarnation ("" when it did not).
    """

    def __init__(self, pid: int, sandboxed: bool, pipe: Any) -> None:
        self.pid = pid
        self.sandboxed = sandboxed
        self._pipe = pipe
        self._send, receive = trio.open_memory_channel[bytes](_BACKLOG)
        self.stdout = _Lines(receive)
        self.stdin = _Input(pipe)
        self.returncode: int | None = None
        self.violation = ""
        self._tail: list[str] = []
        self._exited = trio.Event()

    def __repr__(self) -> str:
        return f"<RelayedProcess pid={self.pid} returncode={self.returncode}>"

    def stderr_tail(self) -> list[str]:
        """The last lines of its stderr (known once it exited)."""
        return list(self._tail)

    async def drain_stderr(self) -> None:
        """Nothing to do: the supervisor drains stderr into the child's log.

        Cancellation: not a checkpoint.
        """

    async def wait(self) -> int:
        """Wait until it exited and was reaped; its exit status.

        Cancellation: only the wait is abandoned.
        """
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        """End this incarnation now (SIGKILL to its group); the restart policy follows."""
        self._pipe.kill()

    def _exit(self, returncode: int, tail: list[str]) -> None:
        self.returncode = returncode
        self._tail = tail
        self._send.close()
        self._exited.set()


@typing.final
class Relay:
    """A relayed child across its incarnations (see the module docstring)."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[RelayedProcess | None](math.inf)
        self._current: RelayedProcess | None = None
        #: Why it will not run again, once it will not.
        self.problem = ""
        #: Incarnations after the first.
        self.restarts = -1

    def __repr__(self) -> str:
        return f"<Relay current={self._current!r} problem={self.problem!r}>"

    @property
    def ui_elements(self) -> list[Any]:
        """None: only tool hosts have UI elements."""
        return []

    async def next(self) -> RelayedProcess | None:
        """The next incarnation (the first, or one after a restart); None: no more.

        Cancellation: only the wait is abandoned.
        """
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return None

    def _began(self, process: RelayedProcess) -> None:
        self._current = process
        self.restarts += 1
        self._send.send_nowait(process)

    def exited(self, returncode: int | None, tail: list[str]) -> None:
        """The current incarnation exited (called by its owner task)."""
        process, self._current = self._current, None
        if process is not None and returncode is not None:
            process._exit(returncode, tail)

    def closed(self, problem: str) -> None:
        """The child will not run again (called by its owner task when its run ends)."""
        self.problem = problem or "stopped"
        self._send.close()


@typing.final
class RelayProtocol(ChildProtocol):
    """Relays a child's stdout lines to its :class:`Relay` (see the module docstring)."""

    #: End of stdin is the goodbye of MCP's stdio transport.
    goodbye = b""
    first_step = "starting"

    def __init__(
        self,
        owner: Owner,
        pipe: Any,
        *,
        calls: PendingCalls,
        config: SupervisorConfig,
        relay: Relay,
        sandboxed: bool,
    ) -> None:
        super().__init__(owner, pipe, calls, config)
        self._pid: int = pipe.pid
        self._relay = relay
        self._sandboxed = sandboxed

    async def converse(self, reader: LineReader) -> None:
        """Ready at once; relay every line until EOF, or until one is too long.

        Cancellation: stops relaying; the client sees the end of stdout.
        """
        process = RelayedProcess(self._pid, self._sandboxed, self._pipe)
        self._owner.hello_accepted(Registrations())
        self._ready = True
        self._owner.ready("spawned")
        self._relay._began(process)
        try:
            while (item := await reader.next()) is not None:
                if isinstance(item, Oversize):
                    problem, _ = self._oversize(item)
                    self._calls.counts["bad_frames"] += 1
                    process.violation = f"sent a {problem}"
                    log.warning("relay_line_too_long", problem=problem)
                    self._pipe.kill()
                    return
                try:
                    await process._send.send(item + b"\n")
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return  # the client went away; the owner stops the child
        finally:
            process._send.close()

    def send_tool(self, rid: str, req: CallTool, reply: Reply[Any]) -> str | None:
        """Never used: a relayed child registers no tools."""
        return "a relayed child has no tools"

    def preview(self, req: PreviewToolCall, reply: Reply[str | None]) -> None:
        """No previews."""
        reply.set(None)

    def host_changed(self) -> None:
        """Nothing to tell."""
