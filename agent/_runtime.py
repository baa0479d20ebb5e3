"""The in-process runtime: one agent session with a job queue, abort and ``done``.

:func:`open_runtime` is the embedding API, and what ``corral rpc`` serves. Prompts
and compactions are *jobs*, accepted in order into one first-in-first-out queue that
a single task works through. The job at the head of the queue is *the running job*
from the moment it is accepted: :meth:`Runtime.abort` cancels it (even before it
got going) and only it; queued jobs keep their place. Every job ends with exactly
one :class:`~agent._events.Done`, whatever happened: success, an error, an abort,
or the runtime closing first. The events are the Structs ``corral rpc`` writes::

    async with open_runtime(AgentOptions(provider="offline")) as rt:
        async for event in rt.prompt('say "hi"'):
            print(event)

Extension events (``ext_notify``, ``ext_display``, ``ext_status``, ``ext_panel_*``) belong to no
job; read them from :meth:`Runtime.events`.
"""

from __future__ import annotations

import contextlib
import math
import typing
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager

import msgspec
import trio

from sandbox.log import get_logger
from supervisor import CommandOutcome, ExtensionInfo, ReloadStats

from ._events import AgentEvent, Done, Emit, UsageTotals
from ._exceptions import AgentBusy, RuntimeClosed
from ._host import AgentHost, open_agent
from ._jobs import EventStream, Job, JobKind, JobState
from ._messages import ImageContent, Message
from ._options import AgentOptions
from ._providers.base import ModelInfo, Provider, ReasoningLevel, ToolSpec

_Level = ReasoningLevel | None
__all__ = ["Runtime", "RuntimeState", "open_runtime"]

log = get_logger(__name__)

#: Bound on delivering the last events of the jobs a closing runtime abandons.
_CLOSE_GRACE = 2.0


class RuntimeState(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A snapshot of the runtime: the RPC ``get_state`` data."""

    provider: str
    model: str
    cwd: str
    message_count: int
    #: A prompt or compaction is accepted and not yet finished.
    busy: bool
    #: Jobs waiting behind the running one (corral addition).
    queued: int
    usage: UsageTotals
    reasoning: str | None = None  #: The next prompts' level; absent when unset (corral).


def _channel_emit(send: trio.MemorySendChannel[AgentEvent]) -> Emit:
    async def emit(event: AgentEvent) -> None:
        # The buffer is unbounded, so this never blocks; a reader that went away
        # just stops receiving.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            send.send_nowait(event)
        if isinstance(event, Done):
            send.close()

    return emit


@typing.final
class Runtime:
    """One agent session with a FIFO job queue. Get one from :func:`open_runtime`.

    Methods may be called from any task of the run; none of the synchronous ones
    waits for the queue.
    """

    def __init__(self, host: AgentHost) -> None:
        self._host = host
        self._engine = host.engine
        #: Every job accepted and not finished, in order; the head is the running job.
        self._queue: deque[Job] = deque()
        #: Set when a job joins an empty queue (the job task waits on it).
        self._arrived = trio.Event()
        self._subscribers: list[trio.MemorySendChannel[AgentEvent]] = []
        self._seq = 0
        self._closed = False
        self._dropped = 0

    def __repr__(self) -> str:
        return (
            f"<Runtime {self._engine.provider_name}/{self._engine.model} "
            f"pending={len(self._queue)} closed={self._closed}>"
        )

    @property
    def host(self) -> AgentHost:
        """The agent session underneath (engine, supervisor client, options)."""
        return self._host

    # --- jobs ---------------------------------------------------------------------

    def _submit(self, kind: JobKind, body: Callable[[Emit], Awaitable[object]], emit: Emit) -> Job:
        if self._closed:
            raise RuntimeClosed("the runtime is closed; open a new one")
        self._seq += 1
        job = Job(self._seq, kind, body, emit)
        self._queue.append(job)
        self._arrived.set()
        return job

    def start_prompt(
        self,
        text: str,
        images: Iterable[ImageContent],
        emit: Emit,
        *,
        reasoning: ReasoningLevel | None = None,
    ) -> Job:
        """Queue a prompt whose events go to ``emit`` (``done`` last).

        This is the low-level form :meth:`prompt` and the RPC server build on;
        ``emit`` runs in the job task, and awaiting it holds the queue up.

        Raises:
            RuntimeClosed: the runtime is closing.
            ReasoningRefused: ``reasoning`` (this prompt's level; None: the session's)
                is one the model cannot take.
        """
        pictures = list(images)
        self.check_reasoning(reasoning)

        async def body(out: Emit) -> None:
            await self._engine.prompt(text, pictures, out, reasoning=reasoning)

        return self._submit("prompt", body, emit)

    def start_compact(self, emit: Emit) -> Job:
        """Queue a compaction whose events go to ``emit`` (``compact_done``, ``done``).

        Raises:
            RuntimeClosed: the runtime is closing.
        """
        return self._submit("compact", self._engine.compact, emit)

    def prompt(
        self, text: str, images: Iterable[ImageContent] = (), *, reasoning: _Level = None
    ) -> EventStream:
        """Queue a prompt now; iterate the result for its events, ``done`` last.

        Raises:
            RuntimeClosed: the runtime is closing.
        """
        send, receive = trio.open_memory_channel[AgentEvent](math.inf)
        job = self.start_prompt(text, images, _channel_emit(send), reasoning=reasoning)
        return EventStream(job, receive)

    def compact(self) -> EventStream:
        """Queue a compaction now; iterate the result for its events, ``done`` last.

        Raises:
            RuntimeClosed: the runtime is closing.
        """
        send, receive = trio.open_memory_channel[AgentEvent](math.inf)
        return EventStream(self.start_compact(_channel_emit(send)), receive)

    def abort(self) -> bool:
        """Cancel the running job (the head of the queue); queued jobs keep their place.

        A prompt aborted while it runs ends with ``turn_end(stop="aborted")`` and
        ``done``; one aborted before it started ends the same way without touching
        the transcript. An aborted compaction ends with an ``error`` and ``done``.

        Returns:
            True when there was a job to cancel.
        """
        return bool(self._queue) and self._queue[0].abort()

    def abort_all(self) -> int:
        """Cancel the running job and every queued one (each still says its ``done``).

        What :meth:`abort` says of the running job holds; a queued prompt ends with
        ``turn_end(stop="aborted")`` and ``done`` as soon as its turn comes, without
        running. Used when the whole session is asked to stop (SIGTERM on ``rpc``).

        Returns:
            How many jobs were cancelled.
        """
        return sum(job.abort() for job in list(self._queue))

    async def join(self) -> None:
        """Wait until every job accepted so far has finished.

        Cancellation: only the wait is abandoned; the jobs go on.
        """
        while self._queue:
            await self._queue[-1].wait()

    async def _run_jobs(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The one task that works through the queue; :func:`open_runtime` starts it.

        Cancellation: the running job is aborted (``turn_end(stop="aborted")``), and
        every job still pending gets its ``done`` (shielded, bounded), after an
        ``error`` for those that never ran.
        """
        task_status.started()
        try:
            while True:
                while not self._queue:
                    self._arrived = trio.Event()
                    await self._arrived.wait()
                job = self._queue[0]
                await job.run()
                self._queue.popleft().finish()
        finally:
            self._closed = True
            with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_GRACE):
                while self._queue:
                    await self._queue[0].abandon()
                    self._queue.popleft().finish()
            while self._queue:  # out of time: their waiters must not hang
                self._queue.popleft().finish()

    # --- session ------------------------------------------------------------------

    def state(self) -> RuntimeState:
        """A snapshot: provider, model, cwd, message count, busy, queue length, usage."""
        active = [job for job in self._queue if job.state is not JobState.ENDING]
        return RuntimeState(
            provider=self._engine.provider_name,
            model=self._engine.model,
            cwd=self._engine.cwd,
            message_count=len(self._engine.transcript),
            busy=bool(active),
            queued=max(0, len(active) - 1),
            usage=self._engine.usage(),
            reasoning=self._engine.reasoning,
        )

    def messages(self) -> list[Message]:
        """A copy of the transcript (images with their base64 data)."""
        return self._engine.messages()

    def clear(self) -> None:
        """Drop the transcript.

        Raises:
            AgentBusy: a prompt or compaction is accepted and not finished.
            SessionError: the saved session could not be rewritten.
        """
        if self.state().busy:
            raise AgentBusy("cannot clear while a prompt or compaction is running or queued")
        self._engine.clear()

    def set_model(self, model: str) -> None:
        """Switch model within the provider; the next model call uses it.

        Raises:
            ValueError: the provider does not know ``model``.
        """
        self._engine.set_model(model)

    def set_reasoning(self, level: ReasoningLevel | None) -> None:
        """The level of the next prompts (``ReasoningRefused``: one the model cannot take)."""
        self._engine.set_reasoning(level)

    def check_reasoning(self, level: str | None) -> None:
        """Refuse ``level`` now (``ReasoningRefused``) if the model cannot take it."""
        self._engine.check_reasoning(level)

    def models(self) -> list[ModelInfo]:
        """Models the provider knows."""
        return self._engine.models()

    def tools(self) -> list[ToolSpec]:
        """The tools the model is offered now (built-ins, then extension tools)."""
        return self._engine.tools()

    def tool_sources(self) -> dict[str, str]:
        """Tool name to ``"builtin"`` or the name of the extension that runs it."""
        return self._engine.registry.sources()

    # --- extensions -----------------------------------------------------------------

    async def extensions(self) -> list[ExtensionInfo]:
        """Status and stats of every extension.

        Cancellation: the answer is dropped.
        """
        return await self._host.extensions()

    async def ext_command(self, name: str, args: str = "") -> CommandOutcome:
        """Run an extension's slash command (``name`` with or without ``/``).

        A ``display`` answer also reaches :meth:`events` subscribers as
        ``ext_display`` (the supervisor publishes it), an ``open_panel`` one as
        ``ext_panel_open`` (the outcome's ``panel``; see :meth:`ext_panel_key`);
        acting on a ``prompt`` or ``insert`` answer is the caller's choice. What the
        extension sent before its answer (``notify``, that ``ext_display``) is in
        every :meth:`events` channel when this returns: the extension's order is kept.

        Raises:
            SupervisorError: no such command, or the extension failed or timed out.

        Cancellation: the command is abandoned; a late response is dropped.
        """
        # The supervisor publishes a ``display`` answer itself, as ``ext_display``.
        return await self._host.invoke_command(name.removeprefix("/"), args)

    async def ext_panel_key(self, extension: str, panel_id: str, key: str, text: str = "") -> None:
        """Send a key to an extension's open panel (an ``ext_panel_open`` event's
        ``extension`` and ``panel_id``): ``up``, ``down``, ``left``, ``right``,
        ``enter``, ``esc``, ``tab``, ``backspace``, ``delete``, ``home``, ``end``,
        ``pageup``, ``pagedown``, ``unknown``, or ``rune`` with one character in ``text``.
        The extension answers by drawing (``ext_panel_render``) or closing it.

        Raises:
            SupervisorError: no such extension or open panel (``UnknownPanel``), or
                the key cannot be sent.
            ValueError: the key or its text is not valid.

        Cancellation: the key may or may not have been sent.
        """
        await self._host.panel_key(extension, panel_id, key, text)

    async def ext_panel_close(self, extension: str, panel_id: str) -> None:
        """Close an extension's open panel (the user closed it): the extension gets
        ``panel_close``, subscribers ``ext_panel_close`` (``by: "host"``).

        Raises:
            SupervisorError: no such extension or open panel.

        Cancellation: the panel may or may not have been closed.
        """
        await self._host.close_panel(extension, panel_id)

    async def ext_reload(self) -> ReloadStats:
        """Re-read manifests, start the new versions beside the running ones and swap
        them in (a new version that does not start keeps the running one); rebuild
        the tools.

        Cancellation: the reload goes on in the supervisor; only the wait is abandoned.
        """
        return await self._host.reload()

    async def ext_enable(self, name: str) -> ExtensionInfo:
        """Lift an extension's quarantine and start it again.

        Raises:
            SupervisorError: no such extension.

        Cancellation: the start goes on; only the wait is abandoned.
        """
        return await self._host.enable(name)

    def events(self, buffer: int = 256) -> trio.MemoryReceiveChannel[AgentEvent]:
        """Subscribe to ``ext_notify``, ``ext_display``, ``ext_status`` and the panel
        events (``ext_panel_open``, ``ext_panel_render``, ``ext_panel_close``).

        Use as ``with runtime.events() as events: async for event in events: ...``.
        A subscriber more than ``buffer`` events behind loses the newest ones (counted
        and logged); it never slows the session down. The channel ends when the
        runtime closes; close it to unsubscribe.
        """
        send, receive = trio.open_memory_channel[AgentEvent](buffer)
        if self._closed:
            send.close()
        else:
            self._subscribers.append(send)
        return receive

    async def _broadcast(self, event: AgentEvent) -> None:
        for send in list(self._subscribers):
            try:
                send.send_nowait(event)
            except trio.WouldBlock:
                self._dropped += 1
                log.warning(
                    "runtime_event_dropped", event_type=type(event).__name__, dropped=self._dropped
                )
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._subscribers.remove(send)
        await trio.lowlevel.checkpoint()

    def _close_subscribers(self) -> None:
        for send in self._subscribers:
            send.close()
        self._subscribers.clear()


@asynccontextmanager
async def open_runtime(
    options: AgentOptions,
    *,
    compact_threshold: int | None = 400_000,
    provider: Provider | None = None,
) -> AsyncIterator[Runtime]:
    """Open an agent session with a job queue; see :mod:`agent._runtime`.

    Extensions load as in every other mode (ready or failed before this yields).
    Leave the block after :meth:`Runtime.join` to let queued work finish.

    Args:
        options: what to open (provider, extensions, sandbox, cwd, ...).
        compact_threshold: compact before a prompt once the transcript's JSON passes
            this many bytes; None never compacts automatically.
        provider: use this provider instead of the one ``options.provider`` names
            (as :func:`~agent.open_agent`).

    Raises:
        AgentError: bad options, an unknown provider, a malformed script.

    Cancellation: leaving the block (normally or not) aborts the running job, ends
    every pending one with ``done``, stops every extension (shielded, bounded) and
    ends the :meth:`Runtime.events` channels.
    """
    async with (
        open_agent(options, compact_threshold=compact_threshold, provider=provider) as host,
        trio.open_nursery() as nursery,
    ):
        runtime = Runtime(host)
        try:
            await nursery.start(host.run_forwarder, runtime._broadcast)
            await nursery.start(runtime._run_jobs)
            yield runtime
        finally:
            runtime._closed = True
            nursery.cancel_scope.cancel()
            runtime._close_subscribers()
