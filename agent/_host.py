"""Open one agent session: provider, supervisor, tools, transcript and loop together.

:func:`open_agent` is what the CLI, the RPC server and the in-process runtime build
on. It takes :class:`AgentOptions` and yields an :class:`AgentHost`: the loop
(:class:`~agent._loop.AgentLoop`), the :class:`~supervisor.SupervisorClient` behind
it, and the few host-level operations that involve both (reload, commands,
forwarding extension events). The RPC server and the in-process runtime add
queueing, abort and ``done`` on top.
"""

from __future__ import annotations

import os
import typing
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from sandbox import SandboxMode
from sandbox.log import get_logger
from supervisor import (
    CommandInfo,
    CommandOutcome,
    Displayed,
    EmitEvent,
    ExtensionCrashed,
    ExtensionInfo,
    ExtensionKept,
    ExtensionRestarted,
    ExtensionStarted,
    ExtensionState,
    ExtensionStopped,
    HostInfo,
    Notified,
    PanelClosed,
    PanelOpened,
    PanelRendered,
    Quarantined,
    ReloadStats,
    SupervisorClient,
    SupervisorConfig,
    SupervisorError,
    SupervisorEvent,
    ToolsChanged,
    corral_home,
    open_supervisor,
)

from ._audit import AuditLog, audit_path
from ._drain import Drain
from ._events import (
    AgentEvent,
    Emit,
    ExtDisplay,
    ExtNotify,
    ExtPanelClose,
    ExtPanelOpen,
    ExtPanelRender,
    ExtStatus,
)
from ._exceptions import AgentError, SessionError
from ._loop import AgentLoop
from ._options import AgentOptions, bash_network
from ._providers.base import Provider
from ._providers.factory import make_provider
from ._providers.reasoning import check_reasoning
from ._sessions import SessionHeader, SessionStore, latest_session
from ._tools.selection import BUILTIN_TOOLS, OPTIONAL_TOOLS
from ._toolsetup import SessionTools, ToolSetup
from ._transcript import Transcript

__all__ = ["AgentHost", "agent_event_for", "open_agent"]

log = get_logger(__name__)


def agent_event_for(event: SupervisorEvent) -> AgentEvent | None:
    """The agent event a supervisor event becomes (None: nothing for the user)."""
    if isinstance(event, Notified):
        return ExtNotify(extension=event.extension, level=event.level, message=event.message)
    if isinstance(event, Displayed):
        return ExtDisplay(extension=event.extension, text=event.text)
    if isinstance(event, PanelOpened | PanelRendered):
        kind = ExtPanelOpen if isinstance(event, PanelOpened) else ExtPanelRender
        p = event.panel
        return kind(
            extension=p.extension,
            panel_id=p.panel_id,
            title=p.title,
            lines=p.lines,
            footer=p.footer,
        )
    if isinstance(event, PanelClosed):
        return ExtPanelClose(
            extension=event.extension, panel_id=event.panel_id, by=event.by, reason=event.reason
        )
    if isinstance(event, ExtensionStarted):
        detail = f"{event.backend}" + (f"; {event.note}" if event.note else "")
        return ExtStatus(
            extension=event.extension,
            status="started",
            detail=detail,
            pid=event.pid,
            sandboxed=event.sandboxed,
        )
    if isinstance(event, ExtensionRestarted):
        return ExtStatus(
            extension=event.extension,
            status="restarted",
            detail=f"restart #{event.restarts}",
            pid=event.pid,
        )
    if isinstance(event, ExtensionCrashed):
        detail = event.reason
        if event.signal and event.signal not in detail:
            detail += f" ({event.signal})"
        elif event.returncode is not None and str(event.returncode) not in detail:
            detail += f" (exit {event.returncode})"
        if event.stderr_tail:
            detail += f"; last stderr: {event.stderr_tail[-1]}"
        if event.restart_in is not None:
            detail += f"; restarting in {event.restart_in:.1f} s"
        return ExtStatus(extension=event.extension, status="crashed", detail=detail)
    if isinstance(event, Quarantined):
        detail = f"{event.reason} ({event.crashes} crashes); /ext enable {event.extension} retries"
        return ExtStatus(extension=event.extension, status="quarantined", detail=detail)
    if isinstance(event, ExtensionStopped):
        return ExtStatus(extension=event.extension, status="stopped")
    if isinstance(event, ExtensionKept):
        detail = f"the new version did not start ({event.reason}); the running one goes on"
        return ExtStatus(extension=event.extension, status="kept", detail=detail, pid=event.pid)
    return None


@typing.final
class AgentHost:
    """One open agent session.

    Attributes:
        engine: the agent loop.
        supervisor: the supervisor's client.
        options: what the session was opened with.
        home: corral's home for this session.
        bash: the ``bash`` tool (to report whether it is sandboxed).
        dynamic: the dynamic tools (None unless ``+dynamic``); ``chat`` sets its
            ``approver``.
        mcp: the MCP servers (None when there are none and ``+mcp`` is off).
        mcp_problems: declared MCP servers that did not start, one line each.
    """

    def __init__(
        self,
        *,
        engine: AgentLoop,
        supervisor: SupervisorClient,
        options: AgentOptions,
        home: Path,
        tools: SessionTools,
    ) -> None:
        self.engine = engine
        self.supervisor = supervisor
        self.options = options
        self.home = home
        self.bash = tools.bash
        self.dynamic = tools.dynamic
        self.mcp = tools.mcp
        self.mcp_problems = tools.mcp_problems
        #: The forwarder's progress (see :meth:`invoke_command`).
        self._forwarded = Drain()

    def __repr__(self) -> str:
        return f"<AgentHost {self.engine!r}>"

    async def run_forwarder(
        self, emit: Emit, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Forward supervisor events as ``ext_notify`` / ``ext_display`` / ``ext_status``.

        Also keeps the tool registry in step with extension starts, restarts and
        tool changes. Subscribes before ``task_status.started()``, so nothing that
        happens after ``nursery.start`` returns is missed. Runs until cancelled.

        Cancellation: unsubscribes and returns.
        """
        forwarded = self._forwarded
        with self.supervisor.subscribe() as events:
            task_status.started()
            try:
                while True:
                    try:
                        event = await forwarded.next(events)
                    except trio.EndOfChannel:
                        return
                    if isinstance(event, ToolsChanged | ExtensionStarted | ExtensionRestarted):
                        self.engine.extensions_changed()
                    converted = agent_event_for(event)
                    if converted is not None:
                        await emit(converted)
                    forwarded.handled()
            finally:
                forwarded.stopped()

    async def reload(self) -> ReloadStats:
        """``/reload-ext``: re-read manifests, start the new versions beside the running
        ones and swap them in (a new version that does not start leaves the running one
        in place); rebuild tools.

        Cancellation: the reload goes on in the supervisor; only the wait is abandoned.
        """
        stats = await self.supervisor.reload()
        self.engine.extensions_changed()
        return stats

    async def invoke_command(self, name: str, args: str = "") -> CommandOutcome:
        """Run an extension's slash command.

        Raises:
            SupervisorError: no such command, or the extension failed.

        What the extension sent before its answer (``notify``, the ``display``
        answer's own ``ext_display``) has been forwarded when this returns: the
        extension's order is kept for whoever reads the forwarded events.

        Cancellation: the command is abandoned.
        """
        try:
            return await self.supervisor.invoke_command(name, args)
        finally:
            await self._forwarded.drained()

    async def panel_key(self, extension: str, panel_id: str, key: str, text: str = "") -> None:
        """Send a key to an extension's open panel (see
        :meth:`SupervisorClient.panel_key <supervisor.SupervisorClient.panel_key>`).

        Raises:
            SupervisorError: no such extension or open panel, or it cannot be sent.
            ValueError: the key or its text is not valid.

        Cancellation: the key may or may not have been sent.
        """
        await self.supervisor.panel_key(extension, panel_id, key, text)

    async def close_panel(self, extension: str, panel_id: str, reason: str = "") -> None:
        """Close an extension's open panel; the extension is told (``panel_close``).

        Raises:
            SupervisorError: no such extension or open panel.

        Cancellation: the panel may or may not have been closed.
        """
        await self.supervisor.close_panel(extension, panel_id, reason)

    def commands(self) -> list[CommandInfo]:
        """Extension slash commands available now."""
        return self.supervisor.commands()

    async def extensions(self) -> list[ExtensionInfo]:
        """Status and stats of every extension.

        Cancellation: the answer is dropped.
        """
        return await self.supervisor.list_extensions()

    async def enable(self, name: str) -> ExtensionInfo:
        """Lift an extension's quarantine and start it again.

        Cancellation: the start goes on; only the wait is abandoned.
        """
        info = await self.supervisor.enable(name)
        self.engine.extensions_changed()
        return info


def _default_model(provider: Provider, requested: str | None) -> str:
    if requested:
        return requested
    default = getattr(provider, "default_model", None)
    if isinstance(default, str) and default:
        return default
    models = provider.models()
    if not models:
        raise AgentError(f"provider {provider.name} names no model: pass --model")
    return models[0].id


def _prepare(options: AgentOptions, make: bool) -> tuple[str, Path, Provider | None]:
    if options.sandbox not in set(SandboxMode):
        raise AgentError(f"--sandbox {options.sandbox!r}: use one of {', '.join(SandboxMode)}")
    if options.max_steps < 1:
        raise AgentError(f"--max-steps {options.max_steps}: must be at least 1")
    cwd = os.path.realpath(os.path.expanduser(options.cwd))
    if not os.path.isdir(cwd):
        raise AgentError(f"--cwd {options.cwd}: not a directory")
    home = Path(options.home).expanduser().absolute() if options.home else corral_home()
    return cwd, home, make_provider(options) if make else None


def _session_name(options: AgentOptions, home: Path, cwd: str) -> str | None:
    if not options.continue_session:
        return options.session
    if options.session:
        raise AgentError("--continue resumes the latest session here: drop --session NAME")
    latest = latest_session(home, cwd)
    if latest is None:
        raise SessionError(f"no saved session to continue in {cwd}; start one with --session NAME")
    return latest


async def _open_transcript(
    options: AgentOptions, home: Path, cwd: str, provider: str, model: str
) -> Transcript:
    name = await trio.to_thread.run_sync(_session_name, options, home, cwd)
    if name is None:
        return Transcript()
    header = SessionHeader(name=name, provider=provider, model=model, cwd=cwd)
    store = SessionStore.for_name(home, name, header)
    messages = await trio.to_thread.run_sync(store.open)
    log.info("session_opened", session=name, messages=len(messages))
    return Transcript(messages, store)


@asynccontextmanager
async def open_agent(
    options: AgentOptions,
    *,
    provider: Provider | None = None,
    compact_threshold: int | None = 400_000,
) -> AsyncIterator[AgentHost]:
    """Open an agent session for ``options``.

    Checks the provider first (:meth:`~agent.Provider.prepare`: API key, model),
    then starts the supervisor (every extension ready or failed before this yields,
    but one still silent after ``options.late_after`` seconds, which joins later; bad
    manifests are reported by ``list_extensions``, never raised), tells extensions
    the real provider, model and cwd in ``hello_ack``, builds the tool registry,
    loads the saved session when ``options.session`` names one, and emits the
    ``session_start`` lifecycle event.

    Args:
        options: what to open.
        provider: use this provider instead of the one ``options.provider`` names
            (embedding, tests, benchmarks); it is closed on exit all the same.
        compact_threshold: compact the transcript before a prompt once its JSON size
            passes this many bytes; None never compacts automatically.

    Raises:
        AgentError: bad options (cwd, sandbox mode, tools), an unknown provider, a
            provider that cannot work (``ProviderError``: no key, no model), a
            reasoning level the model cannot take (``ReasoningRefused``), a
            malformed script (``ScriptError``) or an unreadable session
            (``SessionError``).

    Cancellation: leaving the block stops every extension (the supervisor's
    shutdown ladder, shielded and bounded) and closes the provider.
    """
    # Path checks and the script read are blocking file-system work.
    cwd, home, made = await trio.to_thread.run_sync(_prepare, options, provider is None)
    network = bash_network(options)  # a mistake is reported before anything starts
    provider = provider or made
    assert provider is not None
    try:
        # Before any extension starts: a missing key or an unknown model fails here.
        await provider.prepare()
        model = _default_model(provider, options.model)
        check_reasoning(provider, model, options.reasoning)  # before any extension starts
        transcript = await _open_transcript(options, home, cwd, provider.name, model)
        try:
            session = transcript.store.name if transcript.store is not None else ""
            audit = AuditLog(audit_path(home), session=session, cwd=cwd)
            setup = await ToolSetup.prepare(
                options, home=home, cwd=cwd, audit=audit, bash_network=network
            )
            config = SupervisorConfig(
                home=str(home),
                sandbox=SandboxMode(options.sandbox),
                late_after=options.late_after,
                reserved_tools=BUILTIN_TOOLS + OPTIONAL_TOOLS,
                panels=options.panels,
            )
            async with (
                open_supervisor(
                    config,
                    ext_paths=list(options.ext_paths),
                    project_dir=cwd,
                    discover=options.discover,
                    host=HostInfo(provider=provider.name, model=model, cwd=cwd),
                    egress_report=audit.record_egress,
                ) as client,
                setup.open(client) as tools,
            ):
                loop = AgentLoop(
                    provider=provider,
                    model=model,
                    cwd=cwd,
                    registry=tools.registry,
                    hooks=client,
                    transcript=transcript,
                    max_steps=options.max_steps,
                    system_prompt=options.system_prompt,
                    append_system_prompt=options.append_system_prompt,
                    compact_threshold=compact_threshold,
                    max_tokens=options.provider_settings.max_tokens,
                    audit=audit,
                    reasoning=options.reasoning,
                )
                await _start_session(client, loop)
                yield AgentHost(
                    engine=loop,
                    supervisor=client,
                    options=options,
                    home=home,
                    tools=tools,
                )
        finally:
            await transcript.aclose()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await provider.aclose()


async def _start_session(client: SupervisorClient, loop: AgentLoop) -> None:
    """Tell the loop whether anything may intercept, and extensions that a session began."""
    infos = await client.list_extensions()
    # A late extension may still subscribe: do not stream text unchecked.
    if not any(i.pid is not None or i.state == ExtensionState.STARTING for i in infos):
        loop.assume_no_interceptors()
    try:
        await client.emit(EmitEvent(event="session_start"))
    except SupervisorError as exc:
        log.warning("session_start_not_sent", error=str(exc))
