"""Open one agent session: provider, supervisor, tools, transcript and loop together.

:func:`open_agent` is what the CLI, the RPC server and the in-process runtime build
on. It takes :class:`AgentOptions` and yields an :class:`AgentHost`: the loop
(:class:`~agent._loop.AgentLoop`), the :class:`~supervisor.SupervisorClient` behind
it, and the few host-level operations that involve both (reload, commands,
forwarding extension events). The RPC server and the in-process runtime add
queueing, abort and ``done`` on top.
"""

from __future__ import annotations

import functools
import os
import re
import typing
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import trio

from sandbox import (
    PermissionsError,
    Sandbox,
    SandboxMode,
    SandboxUnavailable,
    check_network,
    select_sandbox,
)
from sandbox._log import get_logger
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
from ._events import AgentEvent, Emit, ExtDisplay, ExtNotify, ExtStatus
from ._exceptions import AgentError, SessionError
from ._loop import AgentLoop
from ._providers.base import Provider, ProviderSettings
from ._providers.factory import make_provider
from ._registry import ToolRegistry
from ._sessions import SessionHeader, SessionStore, latest_session
from ._tools import BUILTIN_TOOLS
from ._tools.base import Tool, ToolSet
from ._tools.bash import BashTool
from ._tools.confine import Workspace
from ._tools.dynamic import DYNAMIC_TOOLS, dynamic_tools
from ._tools.files import EditTool, ReadTool, WriteTool
from ._tools.selection import select_tools
from ._tools.web import WEB_TOOLS, WebConfig, web_tools
from ._transcript import Transcript

if typing.TYPE_CHECKING:
    from ._tools.dynamic import DynamicTools
    from ._tools.mcp import McpServers

__all__ = [
    "BUILTIN_TOOLS",
    "OPTIONAL_TOOLS",
    "AgentHost",
    "AgentOptions",
    "agent_event_for",
    "open_agent",
]

log = get_logger(__name__)

#: The tools of ``--tools +mcp`` (kept here so that naming them imports nothing).
_MCP_TOOLS = ("mcp_connect", "mcp_disconnect", "mcp_list")
#: Built-in tools that are off unless asked for (``--tools +web``, ``+dynamic``, ``+mcp``).
OPTIONAL_TOOLS = (*WEB_TOOLS, *DYNAMIC_TOOLS, *_MCP_TOOLS)
_GROUPS = {"web": WEB_TOOLS, "dynamic": DYNAMIC_TOOLS, "mcp": _MCP_TOOLS}


class AgentOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Everything needed to open an agent session."""

    provider: str = "offline"
    model: str | None = None
    cwd: str = "."
    #: ``--ext`` paths, loaded before project-local and global extensions.
    ext_paths: list[str] = []
    #: Load installed (project-local and global) extensions too.
    discover: bool = True
    sandbox: str = "auto"
    #: corral's home; None means ``$CORRAL_HOME`` or the platform default.
    home: str | None = None
    #: Session name to save to / resume from, or None for no persistence.
    session: str | None = None
    #: Resume the most recently written session of ``cwd`` (``--continue``).
    continue_session: bool = False
    max_steps: int = 16
    system_prompt: str | None = None
    append_system_prompt: str | None = None
    #: JSONL script for the ``scripted`` provider.
    script: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    #: Timeouts, ``max_tokens`` and retries of the model calls.
    provider_settings: ProviderSettings = msgspec.field(default_factory=ProviderSettings)
    #: Start once the other extensions are ready, leaving one that has not said
    #: ``hello`` after this many seconds to join (or fail) on its own; None waits
    #: for every extension (see ``SupervisorConfig.late_after``).
    late_after: float | None = None
    #: Built-in tools to offer: exact names, or ``+name``/``-name`` changes to the
    #: defaults (``["+web"]`` adds ``web_fetch`` and ``web_search``); None: the defaults.
    tools: list[str] | None = None
    #: Settings of the web tools; None reads them from ``CORRAL_*`` variables.
    web: WebConfig | None = None
    #: The dynamic tools' catalog file (``*.json``: the JSON store); None:
    #: ``$CORRAL_HOME/state/dynamic-tools.db``. Dynamic tools are on with ``+dynamic``.
    dynamic_catalog: str | None = None
    #: Start the MCP servers of ``$CORRAL_HOME/mcp.json`` and (trusted) ``./.corral/mcp.json``.
    mcp_servers: bool = True
    #: Exceptions to the MCP network guard (``127.0.0.1:8080``, ``10.0.0.0/8``), added
    #: to those of ``CORRAL_MCP_ALLOW``.
    mcp_allow: list[str] = []
    #: Paths the agent's ``bash``, ``write`` and ``edit`` never change, besides the
    #: defaults (corral's installation, ``.corral``, git's hooks and configuration):
    #: relative to ``cwd`` (or absolute, or ``~/...``), a trailing ``/`` for a
    #: directory, e.g. ``[".envrc", ".vscode/"]``. None reads ``CORRAL_PROTECT``
    #: (separated by ``:``).
    protect: list[str] | None = None
    #: Destinations the ``bash`` tool's commands may reach through corral's egress
    #: proxy (entries as in ``permissions.network``), added to those of
    #: ``CORRAL_BASH_NETWORK``; none by default.
    bash_network: list[str] = []


def agent_event_for(event: SupervisorEvent) -> AgentEvent | None:
    """The agent event a supervisor event becomes (None: nothing for the user)."""
    if isinstance(event, Notified):
        return ExtNotify(extension=event.extension, level=event.level, message=event.message)
    if isinstance(event, Displayed):
        return ExtDisplay(extension=event.extension, text=event.text)
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
        bash: BashTool | None,
        dynamic: DynamicTools | None = None,
        mcp: McpServers | None = None,
        mcp_problems: list[str] | None = None,
    ) -> None:
        self.engine = engine
        self.supervisor = supervisor
        self.options = options
        self.home = home
        self.bash = bash
        self.dynamic = dynamic
        self.mcp = mcp
        self.mcp_problems = mcp_problems or []

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
        with self.supervisor.subscribe() as events:
            task_status.started()
            async for event in events:
                if isinstance(event, ToolsChanged | ExtensionStarted | ExtensionRestarted):
                    self.engine.extensions_changed()
                converted = agent_event_for(event)
                if converted is not None:
                    await emit(converted)

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

        Cancellation: the command is abandoned.
        """
        return await self.supervisor.invoke_command(name, args)

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


def _bash_network(options: AgentOptions) -> list[str]:
    """The ``bash`` tool's destinations, checked (the user's own: local ones too).

    Raises:
        AgentError: an entry is malformed (the setting named).
    """
    env = [e for e in re.split(r"[,\s]+", os.environ.get("CORRAL_BASH_NETWORK", "")) if e]
    entries = [*env, *options.bash_network]
    try:
        network, _ = check_network(entries, entries, "--bash-network / CORRAL_BASH_NETWORK")
    except PermissionsError as exc:
        raise AgentError(str(exc)) from None
    return network if isinstance(network, list) else []


def _builtin_tools(
    options: AgentOptions,
    workspace: Workspace,
    sandbox: Sandbox | None,
    extra: dict[str, Tool],
    audit: AuditLog,
    bash_network: list[str],
) -> tuple[list[Tool], BashTool | None]:
    wanted = _wanted(options)
    required = options.sandbox == SandboxMode.REQUIRED
    shell = functools.partial(
        BashTool,
        workspace,
        require_sandbox=required,
        network=bash_network,
        report=audit.record_egress,
    )
    if _sandbox_at_start(wanted):
        bash = shell(sandbox=sandbox)
    else:  # chosen before the first command: a session that runs none never probes
        bash = shell(choose_sandbox=functools.partial(_select_sandbox, options.sandbox))
    made: dict[str, Tool] = {
        "read": ReadTool(workspace),
        "write": WriteTool(workspace),
        "edit": EditTool(workspace),
        "bash": bash,
        **extra,
    }
    if any(name in wanted for name in WEB_TOOLS):
        web = options.web if options.web is not None else WebConfig.from_env()
        made.update(web_tools(web, sandbox=sandbox, require_sandbox=required))
    return [made[name] for name in wanted], (bash if "bash" in wanted else None)


def _wanted(options: AgentOptions) -> list[str]:
    return select_tools(options.tools, BUILTIN_TOOLS, OPTIONAL_TOOLS, _GROUPS)


def _protect(options: AgentOptions) -> list[str]:
    if options.protect is not None:
        return list(options.protect)
    return [p for p in os.environ.get("CORRAL_PROTECT", "").split(os.pathsep) if p.strip()]


def _mcp_allowances(options: AgentOptions) -> list[str]:
    env = [e for e in re.split(r"[,\s]+", os.environ.get("CORRAL_MCP_ALLOW", "")) if e]
    return [*env, *options.mcp_allow]


@asynccontextmanager
async def _open_mcp(
    options: AgentOptions, home: Path, cwd: str, supervisor: SupervisorClient, audit: AuditLog
) -> AsyncIterator[tuple[McpServers | None, list[str]]]:
    """The session's MCP servers, when ``+mcp`` is on or a config file declares some.

    The MCP modules (and the SDK) are imported only then.
    """
    declared_files = options.mcp_servers and (
        (home / "mcp.json").exists() or (Path(cwd) / ".corral" / "mcp.json").exists()
    )
    if not declared_files and not any(n in _wanted(options) for n in _MCP_TOOLS):
        yield None, []
        return
    from ._tools.mcp import McpTrust, SupervisedLauncher, declared_servers, open_mcp
    from ._tools.web import AddressPolicy, NetGuard, WebConfigError, parse_allowance

    try:
        policy = AddressPolicy(parse_allowance(a) for a in _mcp_allowances(options))
    except ValueError as exc:
        raise WebConfigError("CORRAL_MCP_ALLOW / --mcp-allow", str(exc)) from None
    # Supervised children: the session's sandbox mode applies (``required`` refuses
    # a server it cannot confine).
    launcher = SupervisedLauncher(supervisor, home)
    async with open_mcp(launcher, NetGuard(policy), audit=audit) as servers:
        problems: list[str] = []
        if declared_files:
            decls, problems = await trio.to_thread.run_sync(
                declared_servers, home, cwd, McpTrust(home)
            )
            problems += await servers.start_declared(decls)
        for problem in problems:
            log.warning("mcp_server_skipped", problem=problem)
        yield servers, problems


def _sandbox_at_start(wanted: list[str]) -> bool:
    """Whether tools other than ``bash`` need the backend when they are made."""
    return "new_tool" in wanted or any(name in wanted for name in WEB_TOOLS)


def _select_sandbox(mode: str) -> Sandbox | None:
    if mode == SandboxMode.OFF:
        return None
    try:
        return select_sandbox(mode)
    except SandboxUnavailable as exc:
        log.warning("bash_unsandboxed", problem=str(exc))
        return None


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
            malformed script (``ScriptError``) or an unreadable session
            (``SessionError``).

    Cancellation: leaving the block stops every extension (the supervisor's
    shutdown ladder, shielded and bounded) and closes the provider.
    """
    # Path checks and the script read are blocking file-system work.
    cwd, home, made = await trio.to_thread.run_sync(_prepare, options, provider is None)
    bash_network = _bash_network(options)  # a mistake is reported before anything starts
    provider = provider or made
    assert provider is not None
    try:
        # Before any extension starts: a missing key or an unknown model fails here.
        await provider.prepare()
        model = _default_model(provider, options.model)
        transcript = await _open_transcript(options, home, cwd, provider.name, model)
        try:
            sandbox = None
            if _sandbox_at_start(_wanted(options)):
                sandbox = await trio.to_thread.run_sync(_select_sandbox, options.sandbox)
            config = SupervisorConfig(
                home=str(home),
                sandbox=SandboxMode(options.sandbox),
                late_after=options.late_after,
                reserved_tools=BUILTIN_TOOLS + OPTIONAL_TOOLS,
            )
            host_info = HostInfo(provider=provider.name, model=model, cwd=cwd)
            session = transcript.store.name if transcript.store is not None else ""
            audit = AuditLog(audit_path(home), session=session, cwd=cwd)
            wanted = _wanted(options)
            dynamic: DynamicTools | None = None
            extra: dict[str, Tool] = {}
            if "new_tool" in wanted:
                dynamic = dynamic_tools(
                    home,
                    sandbox=sandbox,
                    catalog=options.dynamic_catalog,
                    audit=audit,
                    reserved=[*BUILTIN_TOOLS, *OPTIONAL_TOOLS],
                    require_sandbox=options.sandbox == SandboxMode.REQUIRED,
                )
                await dynamic.sync()
                from ._tools.dynamic import NewTool

                extra["new_tool"] = NewTool(dynamic)
            async with (
                open_supervisor(
                    config,
                    ext_paths=list(options.ext_paths),
                    project_dir=cwd,
                    discover=options.discover,
                    host=host_info,
                    egress_report=audit.record_egress,
                ) as client,
                _open_mcp(options, home, cwd, client, audit) as (mcp, mcp_problems),
            ):
                if mcp is not None:
                    from ._tools.mcp import mcp_tools

                    extra.update(mcp_tools(mcp))
                protect = _protect(options)
                workspace = await trio.to_thread.run_sync(
                    functools.partial(Workspace, cwd, corral_home=str(home), protect=protect)
                )
                builtins, bash = _builtin_tools(
                    options, workspace, sandbox, extra, audit, bash_network
                )
                sets: list[ToolSet] = [s for s in (dynamic, mcp) if s is not None]
                registry = ToolRegistry(builtins, client, sets)
                for tool_set in (dynamic, mcp):
                    if tool_set is not None:
                        tool_set.lookup = registry.kinds
                registry.sync()
                loop = AgentLoop(
                    provider=provider,
                    model=model,
                    cwd=cwd,
                    registry=registry,
                    hooks=client,
                    transcript=transcript,
                    max_steps=options.max_steps,
                    system_prompt=options.system_prompt,
                    append_system_prompt=options.append_system_prompt,
                    compact_threshold=compact_threshold,
                    max_tokens=options.provider_settings.max_tokens,
                    audit=audit,
                )
                infos = await client.list_extensions()
                # A late extension may still subscribe: do not stream text unchecked.
                if not any(i.pid is not None or i.state == ExtensionState.STARTING for i in infos):
                    loop.assume_no_interceptors()
                try:
                    await client.emit(EmitEvent(event="session_start"))
                except SupervisorError as exc:
                    log.warning("session_start_not_sent", error=str(exc))
                yield AgentHost(
                    engine=loop,
                    supervisor=client,
                    options=options,
                    home=home,
                    bash=bash,
                    dynamic=dynamic,
                    mcp=mcp,
                    mcp_problems=mcp_problems,
                )
        finally:
            await transcript.aclose()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await provider.aclose()
