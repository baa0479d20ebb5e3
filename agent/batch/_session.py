"""One task, run as one agent session: workspace, session, result, clean-up.

:class:`Session` is what every backend runs, in whatever process holds it: it
builds the task's working directory and a private corral home under a directory
of its own (so that nothing leaks from one task to the next: extension data
directories, logs and quarantine records are per session), opens the agent
through :func:`agent.open_agent` (its own supervisor, its own sandboxed
extensions; the working directory is passed as ``cwd``, never ``chdir``: many
sessions share one process), runs the one prompt, and turns what happened into a
:class:`~._results.Result`. Failures of the task are results, never exceptions.
"""

from __future__ import annotations

import math
import os
import time
import typing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import trio

from sandbox.log import get_logger
from supervisor import ExtensionInfo, SupervisorError

from .._events import (
    AgentEvent,
    AssistantMessage,
    ErrorEvent,
    ExtStatus,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    Usage,
    UsageTotals,
)
from .._exceptions import AgentError
from .._host import AgentHost, open_agent
from .._messages import Message, TextContent
from .._options import AgentOptions
from .._providers.scripted import ScriptedProvider
from ._results import ExtensionReport, Result, Status, ToolCallRecord
from ._tasks import Task
from ._workspace import copy_workspace, remove_tree, unpack, write_files

__all__ = ["Outcome", "Session"]

log = get_logger(__name__)

#: Extension states that count as started once the session is open.
_STARTED = frozenset({"running", "registering", "starting"})
#: Characters of a failed tool call's text kept in the result.
_ERROR_EXCERPT = 500
#: Bound on collecting the extensions' figures of a session being stopped.
_REPORT_GRACE = 2.0
_encoder = msgspec.json.Encoder()


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """A finished session: its result and, when asked for, its transcript."""

    result: Result
    #: The transcript in the session file format (header line, one line per
    #: message), or None when not asked for or the session never opened.
    transcript: bytes | None = None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _text(blocks: list[Any]) -> str:
    return "".join(b.text for b in blocks if isinstance(b, TextContent))


@typing.final
class _Record:
    """What the session's events said, gathered as they come (also while it stops)."""

    def __init__(self) -> None:
        self.steps = 0
        self.answer = ""
        self.stop: str | None = None
        self.turn_error: str | None = None
        self.errors: list[str] = []
        self.usage = UsageTotals()
        self.calls: dict[str, ToolCallEvent] = {}
        self.results: dict[str, ToolResultEvent] = {}
        self.crashes: dict[str, int] = {}
        self.quarantined: set[str] = set()
        self.last_crash: dict[str, str] = {}
        #: Filled in as the session ends (also when it is being stopped).
        self.infos: list[ExtensionInfo] = []
        self.sources: dict[str, str] = {}
        self.transcript: bytes | None = None

    async def emit(self, event: AgentEvent) -> None:
        match event:
            case TurnStart():
                self.steps += 1
            case AssistantMessage(content=content):
                self.answer = _text(content)
            case TurnEnd(stop=stop, error=error):
                self.stop, self.turn_error = stop, error
            case ErrorEvent(message=message):
                self.errors.append(message)
            case Usage(cumulative=cumulative):
                self.usage = cumulative
            case ToolCallEvent(id=call_id):
                self.calls[call_id] = event
            case ToolResultEvent(id=call_id):
                self.results[call_id] = event
            case ExtStatus(extension=name, status="crashed", detail=detail):
                self.crashes[name] = self.crashes.get(name, 0) + 1
                self.last_crash[name] = detail
            case ExtStatus(extension=name, status="quarantined"):
                self.quarantined.add(name)
            case _:
                pass

    def tool_calls(self) -> list[ToolCallRecord]:
        records = []
        for call_id, call in self.calls.items():
            result = self.results.get(call_id)
            failed = result is None or result.is_error
            error = None
            if result is None:
                error = "no result (the session ended first)"
            elif result.is_error:
                error = _text(result.content)[:_ERROR_EXCERPT]
            records.append(
                ToolCallRecord(
                    name=call.name,
                    source=self.sources.get(call.name, ""),
                    args=call.args,
                    ran_args=call.ran_args,
                    blocked_by=call.blocked_by,
                    is_error=failed,
                    error=error,
                )
            )
        return records

    def extensions(self) -> list[ExtensionReport]:
        return [
            ExtensionReport(
                name=info.name,
                state=info.state.value,
                sandboxed=info.sandboxed,
                crashes=self.crashes.get(info.name, 0),
                restarts=info.stats.restarts,
                quarantined=info.name in self.quarantined or info.state == "quarantined",
                calls=info.stats.calls,
                errors=info.stats.errors,
                timeouts=info.stats.timeouts,
                problem=info.problem or self.last_crash.get(info.name, ""),
            )
            for info in self.infos
        ]

    def failure(self) -> str | None:
        """Why the prompt did not end in an answer (None: it did)."""
        if self.stop in ("end_turn", "length") and not self.errors:
            return None
        if self.turn_error:
            return self.turn_error
        if self.errors:
            return self.errors[-1]
        return f"the session ended with stop={self.stop}" if self.stop else "no model call ran"


def _task_error(exc: BaseException) -> str | None:
    """The message of the agent or supervisor error in ``exc`` (which nurseries may
    have wrapped in exception groups), or None when it holds none."""
    found: BaseException | None = exc
    if isinstance(exc, BaseExceptionGroup):
        found, _ = exc.split((AgentError, SupervisorError))
        while isinstance(found, BaseExceptionGroup):
            found = found.exceptions[0]
    return str(found) if isinstance(found, AgentError | SupervisorError) else None


def transcript_bytes(task: Task, host: AgentHost, messages: list[Message]) -> bytes:
    """The transcript in the session file format (see docs/agent.md, Sessions)."""
    engine = host.engine
    header = {
        "type": "session",
        "version": 1,
        "name": task.id,
        "provider": engine.provider_name,
        "model": engine.model,
        "cwd": engine.cwd,
        "created": _now(),
    }
    lines = [_encoder.encode(header)]
    lines += [_encoder.encode({"type": "message", "message": m}) for m in messages]
    return b"\n".join(lines) + b"\n"


@typing.final
class Session:
    """One task's session. Build it, then ``await run()`` once; :meth:`cancel` stops it.

    Args:
        task: a resolved task (see :func:`~._tasks.resolve_task`).
        root: a directory that does not exist yet; the session's working directory
            and home go in it, and it is removed when the session ends.
        node: where this runs, for the result.
        transcript: also return the transcript.
        workspace_tar: the task's workspace as a tar (it travelled through Ray);
            used instead of ``task.workspace``.
        extension_dirs: where the task's extensions are on this machine, when they
            travelled through Ray (same order as ``task.extensions``).
    """

    def __init__(
        self,
        task: Task,
        *,
        root: Path,
        node: str = "",
        transcript: bool = False,
        workspace_tar: bytes | None = None,
        extension_dirs: list[str] | None = None,
    ) -> None:
        self.task = task
        self.root = root
        self.node = node
        self.transcript = transcript
        self._tar = workspace_tar
        self._extension_dirs = extension_dirs
        self._cancelled = False
        self._timed_out = False
        self._deadline = math.inf
        self._scope: trio.CancelScope | None = None

    def __repr__(self) -> str:
        return f"<Session {self.task.id!r} cancelled={self._cancelled}>"

    def cancel(self) -> None:
        """Stop the session (its extensions go down the shutdown ladder); its result
        says ``cancelled``. Safe to call before, during and after :meth:`run`."""
        self._cancelled = True
        if self._scope is not None:
            self._scope.cancel()

    def _phase(self, deadline: float) -> trio.CancelScope:
        """The scope :meth:`cancel` ends from now on (it may be cancelled already)."""
        scope = trio.CancelScope(deadline=deadline)
        if self._cancelled:
            scope.cancel()
        self._scope = scope
        return scope

    def _ended(self, scope: trio.CancelScope) -> bool:
        if scope.cancelled_caught and not self._cancelled:
            self._timed_out = True
        return scope.cancelled_caught

    async def run(self) -> Outcome:
        """Run the task to its end and report it.

        Cancellation: :meth:`cancel` ends the session with a ``cancelled`` result; a
        cancellation from outside stops it the same way (extensions stopped, the
        directory removed, shielded and bounded) and propagates.
        """
        record = _Record()
        started, clock = _now(), time.monotonic()
        status, error = Status.DONE, None
        if self.task.timeout is not None:
            self._deadline = trio.current_time() + self.task.timeout
        try:
            try:
                await self._converse(record)
            except Exception as exc:
                found = _task_error(exc)
                if found is None:  # a bug must not end the batch: it is this task's error
                    log.exception("batch_session_failed", task=self.task.id)
                    found = f"internal error: {exc!r}"
                status, error = Status.ERROR, found
            if self._cancelled:
                status, error = Status.CANCELLED, "the batch was stopped"
            elif self._timed_out:
                status, error = Status.TIMEOUT, f"no result after {self.task.timeout:g} s"
            elif status is Status.DONE:
                error = record.failure()
                status = Status.ERROR if error else Status.DONE
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(remove_tree, self.root)
        result = Result(
            id=self.task.id,
            status=status,
            answer=record.answer,
            stop=record.stop,
            steps=record.steps,
            usage=record.usage,
            tool_calls=record.tool_calls(),
            extensions=record.extensions(),
            duration=round(time.monotonic() - clock, 3),
            started=started,
            node=self.node,
            error=error,
            meta=self.task.meta,
        )
        return Outcome(result=result, transcript=record.transcript)

    def _build(self) -> tuple[Path, Path]:
        self.root.mkdir(mode=0o700)
        work, home = self.root / "work", self.root / "home"
        home.mkdir(mode=0o700)
        workspace = self.task.workspace
        if self._tar is not None:
            unpack(self._tar, work)
        elif isinstance(workspace, str):
            copy_workspace(workspace, work)
        else:
            write_files(workspace or {}, work)
        return work, home

    def _options(self, work: Path, home: Path) -> AgentOptions:
        task = self.task
        return AgentOptions(
            provider=task.provider or "offline",
            model=task.model,
            base_url=task.base_url,
            cwd=str(work),
            ext_paths=list(self._extension_dirs or task.extensions),
            # Hermetic: only the task's extensions; no installed or project-local
            # ones, no MCP servers from config files.
            discover=False,
            mcp_servers=False,
            sandbox=task.sandbox or "auto",
            home=str(home),
            max_steps=task.max_steps or 16,
            system_prompt=task.system_prompt,
            tools=task.tools,
        )

    async def _converse(self, record: _Record) -> None:
        try:
            work, home = await trio.to_thread.run_sync(self._build)
        except (OSError, ValueError) as exc:  # a full disk, an unreadable file, a bad tar
            raise AgentError(f"cannot prepare the working directory: {exc}") from None
        task = self.task
        provider = None
        if task.provider == "scripted" and isinstance(task.script, list):
            provider = ScriptedProvider(task.script, model=task.model)
        # Two scopes: ``outer`` ends a start-up that takes too long (or is
        # cancelled); once the agent is open, ``inner`` ends the prompt, inside the
        # agent's block, so that the supervisor still runs to report on the
        # extensions before leaving the block stops them; ``outer`` then only
        # cuts off a report or a stop that hangs, a grace period later.
        with self._phase(self._deadline) as outer:
            async with (
                open_agent(self._options(work, home), provider=provider) as host,
                trio.open_nursery() as nursery,
            ):
                await nursery.start(host.run_forwarder, record.emit)
                outer.deadline = self._deadline + _REPORT_GRACE + 1
                try:
                    with self._phase(self._deadline) as inner:
                        await self._prompt(host, record)
                    self._ended(inner)
                finally:
                    with trio.move_on_after(_REPORT_GRACE):
                        try:
                            record.infos = await host.extensions()
                        except SupervisorError as exc:
                            log.warning("batch_extensions_unknown", task=task.id, error=str(exc))
                    record.sources = host.engine.registry.sources()
                    if self.transcript:
                        record.transcript = transcript_bytes(task, host, host.engine.messages())
                    nursery.cancel_scope.cancel()
        self._ended(outer)

    async def _prompt(self, host: AgentHost, record: _Record) -> None:
        infos = await host.extensions()
        failed = [i for i in infos if i.state not in _STARTED]
        if failed:
            why = (f"extension {i.name} did not start: {i.problem or i.state}" for i in failed)
            raise AgentError("; ".join(why))
        await host.engine.prompt(self.task.prompt, [], record.emit)


def local_node() -> str:
    """``local:<pid>``: this process."""
    return f"local:{os.getpid()}"
