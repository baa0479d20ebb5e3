"""The supervisor: one nursery, one owner task per extension, requests routed on submission.

:func:`open_supervisor` discovers extensions, starts them all in parallel, waits
until each is ready or has failed (every wait is bounded), and yields a
:class:`~supervisor._api.SupervisorClient`. Leaving the block runs the shutdown
ladder for every extension in parallel and sweeps anything they left behind.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import trio

from sandbox import (
    Sandbox,
    start_guardian,
)
from sandbox.log import get_logger

from . import _frames as f
from ._api import (
    CommandInfo,
    EgressRefused,
    ExtensionInfo,
    ExtensionStopped,
    InterceptOutcome,
    ReloadStats,
    SupervisorEvent,
    ToolInfo,
    ToolsChanged,
)
from ._broadcast import Broadcast
from ._calls import Reply
from ._client import SupervisorClient
from ._config import HostInfo, SupervisorConfig, quarantine_file
from ._egress import EgressReport
from ._exceptions import (
    SupervisorClosed,
    SupervisorError,
    UnknownCommand,
    UnknownExtension,
    UnknownTool,
)
from ._extension import Extension
from ._gate import ReloadGate
from ._intercept import run_chain
from ._lifecycle import ExtensionState
from ._manifest import Discovery, ExtensionSpec, discover
from ._netguard import NetGuard
from ._reap import kill_and_wait, leftovers
from ._registry import Registry
from ._requests import (
    CallTool,
    ClosePanel,
    EmitEvent,
    EnableExtension,
    Intercept,
    InvokeCommand,
    ListExtensions,
    PanelInput,
    PreviewToolCall,
    Reload,
    Request,
    SetHostInfo,
    StartChild,
    StopChild,
)
from ._spawn import ChosenOnUse
from ._status import ProcessFigures, discovery_infos, extension_infos
from ._swap import plan_swap, reload_stats
from ._talk import Session
from ._trust import TrustStore

__all__ = ["open_supervisor"]

log = get_logger(__name__)

T = typing.TypeVar("T")


#: States of an extension that has not said ``hello`` yet (STOPPED: not even spawned).
_SILENT = frozenset({ExtensionState.STOPPED, ExtensionState.STARTING})


def _why(note: str) -> dict[str, str]:
    return {"likely_cause": note} if note else {}


class _Settled:
    """A ``task_status`` that only records that start-up is over."""

    def __init__(self) -> None:
        self.event = trio.Event()

    def started(self, value: None = None) -> None:
        self.event.set()


@typing.final
class _Supervisor:
    def __init__(
        self,
        config: SupervisorConfig,
        sandbox: Sandbox,
        *,
        ext_paths: Sequence[str],
        project_dir: str | None,
        discover: bool,
        host: HostInfo,
        guard: NetGuard,
        egress_report: EgressReport | None,
    ) -> None:
        self.config = config
        self._guard = guard
        self._egress_report = egress_report
        self._sandbox = sandbox
        self._ext_paths = list(ext_paths)
        self._project_dir = project_dir
        self._discover_installed = discover
        self._host = host
        self._exts: list[Extension] = []
        #: The generation a reload is starting, until the swap.
        self._incoming: list[Extension] = []
        self._trust = TrustStore(config.home)
        self._discovery = Discovery(specs=[], problems=[], duplicates=[])
        self._registry: Registry[Extension] = Registry(
            config.reserved_tools, config.reserved_commands
        )
        self._broadcast = Broadcast()
        #: Extensions whose ignored built-in tool intervention was logged (once each).
        self._intercept_warned: set[str] = set()
        self._reload_lock = trio.Lock()
        #: Intercept chains and reloads exclude each other (see ``_gate``).
        self._gate = ReloadGate()
        self._figures = ProcessFigures()
        self._nursery: trio.Nursery | None = None
        self._closed = False
        #: While starting, registries are rebuilt once at the end, not per extension.
        self._starting = False
        self.client = SupervisorClient(self)

    def __repr__(self) -> str:
        return f"<Supervisor extensions={len(self._exts)} closed={self._closed}>"

    # --- what supervised children need (supervisor._talk.Host) -------------------

    def host_info(self) -> HostInfo:
        """What ``hello_ack`` reports now."""
        return self._host

    def trust_problem(self, spec: ExtensionSpec) -> str | None:
        """Why ``spec`` may not start now (None: it may); blocking."""
        return self._trust.problem(spec)

    def net_guard(self) -> NetGuard:
        """The guard of every egress proxy."""
        return self._guard

    async def egress_refused(self, event: EgressRefused) -> None:
        """Publish a refused connection and hand it to the host's report."""
        self.publish(event)
        if self._egress_report is not None:
            await self._egress_report(event)

    # --- events -------------------------------------------------------------------

    def subscribe(self, buffer: int) -> trio.MemoryReceiveChannel[SupervisorEvent]:
        """A new event channel; it first learns what is already running."""
        return self._broadcast.subscribe(buffer, self._exts)

    def publish(self, event: SupervisorEvent) -> None:
        """Send ``event`` to every subscriber; a full one loses it (counted, logged)."""
        self._broadcast.publish(event)

    def extension_changed(self, ext: Extension) -> None:
        """An extension became ready, changed registrations, or left the registry.

        The generation a reload is starting is not in the set yet: it is announced
        at the swap, all at once (see :meth:`_reload`).
        """
        if ext in self._incoming:
            return
        self._broadcast.serving(ext)
        if not self._starting:
            self._on_change_all()

    # --- start and stop -----------------------------------------------------------------

    def _quarantine_file(self, spec: ExtensionSpec) -> Path:
        return quarantine_file(self.config.home, spec.identity)

    def _discover(self) -> Discovery:
        """Read every manifest (blocking, quick); log what is wrong with them."""
        found = discover(
            self._ext_paths,
            project_dir=self._project_dir,
            home=self.config.home,
            include_installed=self._discover_installed,
        )
        for problem in found.problems:
            log.error(
                "manifest_invalid", path=problem.path, field=problem.field, problem=problem.message
            )
        for spec in found.specs:
            if spec.unknown_fields:
                log.warning(
                    "manifest_unknown_fields",
                    extension=spec.name,
                    path=spec.manifest_path,
                    fields=spec.unknown_fields,
                )
        for shadowed, winner in found.duplicates:
            log.warning(
                "extension_duplicate",
                extension=shadowed.name,
                ignored=shadowed.manifest_path,
                winner=winner.manifest_path,
            )
        return found

    def _generation(self, specs: list[ExtensionSpec], previous: list[Extension]) -> list[Extension]:
        """New extensions for ``specs``, each continuing its previous run (by identity)."""
        exts = [Extension(spec, self.config, self._sandbox, self) for spec in specs]
        before = {e.spec.identity: e for e in previous}
        for ext in exts:
            old = before.get(ext.spec.identity)
            if old is not None:
                ext.adopt(old)
        return exts

    async def _start_all(self) -> None:
        self._discovery = self._discover()
        if self._discovery.specs:
            # The guardian (once per process) boots while the extensions are planned.
            start_guardian()
        self._exts = self._generation(self._discovery.specs, [])
        self._starting = True
        try:
            await self._start_each(self._exts, late_after=self.config.late_after)
        finally:
            self._starting = False
        self._on_change_all()

    async def _start_each(self, exts: list[Extension], *, late_after: float | None = None) -> None:
        """Start all in parallel; returns once each is ready or has given up (each wait
        is bounded by the handshake deadline and the ready cap), or, with ``late_after``,
        once each that said ``hello`` within that many seconds is."""
        # Each owner task goes straight into the supervisor's nursery (no starter task
        # per extension, no ``nursery.start`` hand-over), and this one waits for each.
        late_at = None if late_after is None else trio.current_time() + late_after
        for ext, settled in [(ext, self._launch(ext)) for ext in exts]:
            await self._settle(ext, settled, late_at)

    async def _start(self, ext: Extension) -> None:
        """Start ``ext``'s owner task in the supervisor's nursery; returns once it settled."""
        await self._settle(ext, self._launch(ext), None)

    def _launch(self, ext: Extension) -> _Settled:
        assert self._nursery is not None
        settled = _Settled()
        run = functools.partial(ext.run, task_status=settled)
        self._nursery.start_soon(run, name=f"extension:{ext.name}")
        return settled

    async def _settle(self, ext: Extension, settled: _Settled, late_at: float | None) -> None:
        """Until ``ext`` settled, or until ``late_at`` passed without a ``hello`` (it
        joins or fails on its own)."""
        if settled.event.is_set():
            return
        if late_at is None:
            await settled.event.wait()
            return
        with trio.move_on_at(late_at):
            await settled.event.wait()
            return
        if ext.state in _SILENT:
            # A runner that needs what it was not granted (npx without the network)
            # is the likely cause: say so now, not only when the handshake times out.
            note = ext.spec.exec_note
            after = self.config.late_after
            log.warning("extension_late", extension=ext.name, after=after, **_why(note))
        else:  # it said hello in time: registration and ``ready`` are bounded
            await settled.event.wait()

    async def _stop_all(self, exts: list[Extension]) -> int:
        """Stop extensions in parallel, then sweep their leftovers in one pass.

        Returns how many were serving.
        """
        running = sum(1 for e in exts if e.serving)
        tokens: list[str] = []
        # Every goodbye and end of stdin first, in one tight pass (as a host closing
        # their stdins would), then the rest of each stop: they all exit in parallel
        # while the host waits for each in turn.
        for ext in exts:
            ext.say_goodbye()
        for ext in exts:
            ext.begin_stop(sweep_into=tokens)
        for ext in exts:
            await ext.stop(sweep_into=tokens)
        if tokens:
            found = await leftovers(tokens)
            if found:
                log.warning("leftovers_killed", pids=[c.pid for c in found])
                with trio.move_on_after(self.config.term_grace) as waited:
                    await kill_and_wait(found)
                if waited.cancelled_caught:
                    log.warning("leftovers_still_running", pids=[c.pid for c in found])
        return running

    async def aclose(self) -> None:
        """Stop serving and stop every extension. Callers shield it; it is bounded."""
        self._closed = True
        cfg = self.config
        with trio.move_on_after(cfg.shutdown_grace + cfg.term_grace + 5):
            await self._stop_all([*self._exts, *self._incoming])
        if self._broadcast.listened:
            for ext in self._exts:
                self.publish(ExtensionStopped(extension=ext.name))
        self._broadcast.close()

    # --- requests (Backend) --------------------------------------------------------------

    def tool_infos(self) -> list[ToolInfo]:
        """Extension tools registered now, in load order."""
        return self._registry.tool_infos()

    def command_infos(self) -> list[CommandInfo]:
        """Extension commands registered now, in load order."""
        return self._registry.command_infos()

    def submit(self, req: Request) -> Reply[Any]:
        """Route one request now (never blocks); the reply is answered exactly once."""
        reply: Reply[Any] = Reply()
        if self._closed:
            reply.fail(SupervisorClosed())
            return reply
        try:
            self._route(req, reply)
        except Exception:  # a bug here must not take every extension down
            log.exception("dispatch_failed", request=type(req).__name__)
            reply.fail(SupervisorError("internal error; see the log"))
        return reply

    def call_tool(self, req: CallTool) -> Reply[Any]:
        """Route a tool call now: :meth:`submit`'s hot path, one lookup to the owner."""
        reply: Reply[Any] = Reply()
        owner = None if self._closed else self._registry.tool_owner(req.name)
        if owner is None:
            reply.fail(SupervisorClosed() if self._closed else UnknownTool(req.name))
            return reply
        try:
            owner.call_tool(req, reply)
        except Exception:  # as submit
            log.exception("dispatch_failed", request="CallTool")
            reply.fail(SupervisorError("internal error; see the log"))
        return reply

    def _route(self, req: Request, reply: Reply[Any]) -> None:
        match req:
            case CallTool():
                owner = self._registry.tool_owner(req.name)
                if owner is None:
                    reply.fail(UnknownTool(req.name))
                else:
                    owner.call_tool(req, reply)
            case PreviewToolCall():
                powner = self._registry.tool_owner(req.name)
                if powner is None:
                    reply.set(None)
                else:
                    powner.preview_tool_call(req, reply)
            case InvokeCommand():
                cowner = self._registry.command_owner(req.name)
                if cowner is None:
                    reply.fail(UnknownCommand(req.name))
                else:
                    cowner.invoke_command(req, reply)
            case Intercept():
                if self._gate.is_open and not self._subscribers_of(req):
                    reply.set(InterceptOutcome(args=req.tool_args))
                else:
                    self._start_answering(functools.partial(self._chain, req), reply)
            case EmitEvent():
                frame = f.Event(**msgspec.structs.asdict(req))  # the same fields
                for ext in self._exts:
                    ext.send_event(frame)
                reply.set(None)
            case Reload():
                self._start_answering(self._reload, reply)
            case ListExtensions():
                self._start_answering(self._list, reply)
            case EnableExtension():
                self._start_answering(functools.partial(self._enable, req.name), reply)
            case StartChild():
                self._start_answering(functools.partial(self._start_child, req.spec), reply)
            case StopChild():
                self._start_answering(functools.partial(self._stop_child, req.name), reply)
            case PanelInput() | ClosePanel():
                owner = next((e for e in self._exts if e.name == req.extension), None)
                if owner is None:
                    reply.fail(UnknownExtension(req.extension))
                else:
                    owner.panel_request(req, reply)
            case SetHostInfo():
                self._host = HostInfo(provider=req.provider, model=req.model, cwd=req.cwd)
                for ext in self._exts:
                    ext.host_changed()
                reply.set(None)

    def _start_answering(
        self, work: Callable[[Reply[T]], Awaitable[None]], reply: Reply[T]
    ) -> None:
        """Run ``work(reply)`` in the supervisor's nursery; ``reply`` is always answered.

        A bug in ``work`` fails the request instead of the supervisor, and work cut
        short by the supervisor's exit answers ``SupervisorClosed``.
        """

        async def run() -> None:
            try:
                await work(reply)
            except Exception as exc:  # a bug here must not take every extension down
                log.exception("request_failed", work=getattr(work, "__name__", repr(work)))
                reply.fail(SupervisorError(f"internal error: {exc}"))
            finally:
                reply.fail(SupervisorClosed())  # a no-op once answered

        assert self._nursery is not None
        self._nursery.start_soon(run)

    def _subscribers_of(self, req: Intercept) -> list[Extension]:
        return [e for e in self._exts if req.event in e.intercepts and e.serving]

    async def _chain(self, req: Intercept, reply: Reply[InterceptOutcome]) -> None:
        # Subscribers are chosen once the gate is held: after a reload, never during.
        async with self._gate.chain():
            subs = self._subscribers_of(req)
            if not subs:
                reply.set(InterceptOutcome(args=req.tool_args))
                return
            reply.set(await run_chain(req, subs, self._intercept_warned))

    async def _reload(self, reply: Reply[ReloadStats]) -> None:
        """Start the new generation beside the running one, swap, stop what it replaced.

        Every new extension is started (same sandbox, trust, pins and handshake as
        any start) while the old ones keep serving; once each is ready or has given
        up, :func:`~supervisor._swap.plan_swap` decides what goes in. The registry,
        the interception chain and the listing switch in one step, under the reload
        gate (chains in flight finish first, later ones see only the new set), and
        then the replaced extensions are stopped. An extension whose new version did
        not start keeps its old one running (``kept_old``, an ``ExtensionKept`` event).
        """
        async with self._reload_lock:
            log.info("reload_started")
            old = self._exts
            for ext in old:  # a reload lifts quarantines
                self._quarantine_file(ext.spec).unlink(missing_ok=True)
            discovery = self._discover()
            self._incoming = self._generation(discovery.specs, old)
            try:
                await self._start_each(self._incoming)
            finally:
                incoming, self._incoming = self._incoming, []
            swap = plan_swap(old, incoming, (p.path for p in discovery.problems))
            async with self._gate.reload():
                # One step, no checkpoint: every call and chain sees one generation.
                self._discovery = discovery
                self._exts = swap.exts
                self._broadcast.swapped(swap)
                self._on_change_all()
            stopped = await self._stop_all(swap.retired)
            await self._stop_all(swap.discarded)
            stats = reload_stats(discovery, swap, stopped)
            log.info(
                "reload_done",
                stopped=stats.stopped,
                loaded=stats.loaded,
                ready=stats.ready,
                kept_old=stats.kept_old,
            )
            reply.set(stats)

    def _on_change_all(self) -> None:
        """Rebuild the registry; announce ``tools_changed`` when the agent's view changed."""
        if self._registry.rebuild(self._exts):
            self.publish(
                ToolsChanged(
                    extension="*",
                    tools=self._registry.tool_infos(),
                    commands=self._registry.command_infos(),
                )
            )

    async def _enable(self, name: str, reply: Reply[ExtensionInfo]) -> None:
        ext = next((e for e in self._exts if e.name == name), None)
        if ext is None:
            reply.fail(UnknownExtension(name))
            return
        if ext.spec.source == "mcp":  # its connection is gone: only connecting again helps
            reply.fail(SupervisorError(f"{name} is an MCP server: connect it again to retry"))
            return
        self._quarantine_file(ext.spec).unlink(missing_ok=True)
        if not ext.active and ext.state is not ExtensionState.DISABLED:
            ext.reset()
            await self._start(ext)
        reply.set((await self._infos([ext]))[0])

    async def _start_child(self, spec: ExtensionSpec, reply: Reply[Session]) -> None:
        """Supervise a child declared at run time; answered once it runs or gave up."""
        async with self._reload_lock:  # a reload swaps the set: not in the middle of it
            if any(e.name == spec.name for e in self._exts):
                reply.fail(SupervisorError(f"a child named {spec.name} is already supervised"))
                return
            # Starting it is the retry its quarantine asks for (a server connected
            # again): a record left by an earlier run does not hold it back.
            self._quarantine_file(spec).unlink(missing_ok=True)
            ext = Extension(spec, self.config, self._sandbox, self)
            self._exts.append(ext)
        await self._start(ext)
        reply.set(ext.session)

    async def _stop_child(self, name: str, reply: Reply[None]) -> None:
        """Stop a child :meth:`_start_child` started, and forget it."""
        async with self._reload_lock:
            ext = next((e for e in self._exts if e.name == name and e.spec.source == "mcp"), None)
            if ext is None:
                reply.fail(UnknownExtension(name))
                return
            await self._stop_all([ext])
            self._exts.remove(ext)
        self._broadcast.stopped(name)
        self._on_change_all()
        reply.set(None)

    async def _list(self, reply: Reply[list[ExtensionInfo]]) -> None:
        reply.set(await self._infos(self._exts) + discovery_infos(self._discovery))

    async def _infos(self, exts: list[Extension]) -> list[ExtensionInfo]:
        pids = [e.pid for e in exts if e.pid is not None and e.serving]
        figures = await trio.to_thread.run_sync(self._figures.measure, pids) if pids else {}
        backend = self._sandbox.backend if exts else ""  # no extension: no probe
        return extension_infos(exts, figures, backend, self._registry)


@asynccontextmanager
async def open_supervisor(
    config: SupervisorConfig | None = None,
    *,
    ext_paths: Sequence[str] = (),
    project_dir: str | None = None,
    discover: bool = True,
    host: HostInfo | None = None,
    sandbox: Sandbox | None = None,
    guard: NetGuard | None = None,
    egress_report: EgressReport | None = None,
) -> AsyncIterator[SupervisorClient]:
    """Start every extension and yield a client; stop them all on exit.

    Args:
        config: policy (deadlines, grace periods, home); defaults are the SPEC's.
        ext_paths: ``--ext`` paths, loaded first and winning over installed ones.
        project_dir: directory whose ``.corral/extensions`` is scanned.
        discover: scan project-local and global extensions too.
        host: what ``hello_ack`` reports until :meth:`SupervisorClient.set_host_info`.
        sandbox: a backend to use instead of ``select_sandbox(config.sandbox)``, which
            is called when the first extension is planned (a host without
            extensions never probes the machine).
        guard: the network guard of the egress proxies of children with a network
            list (default: public addresses only, the system's resolver).
        egress_report: awaited with every refusal those proxies report (also
            published as :class:`~supervisor.EgressRefused` events): the audit log.

    Entering returns once every extension is ready, failed, or crashed once (each
    wait is bounded by the handshake deadline and the ready cap), or, with
    ``config.late_after``, once those that said ``hello`` in time are; the late ones
    join or fail on their own afterwards. Bad manifests and
    refused extensions are reported (``list_extensions``, logs), never raised.

    Cancellation: leaving the block, normally, by an exception or by cancellation,
    runs the shutdown ladder for all extensions in parallel (shielded, bounded by
    ``shutdown_grace + term_grace`` plus reaping) and kills anything they left.
    """
    config = config or SupervisorConfig()
    sup = _Supervisor(
        config,
        sandbox if sandbox is not None else ChosenOnUse(config.sandbox),
        ext_paths=ext_paths,
        project_dir=project_dir,
        discover=discover,
        host=host or HostInfo(),
        guard=guard or NetGuard(),
        egress_report=egress_report,
    )
    async with trio.open_nursery() as nursery:
        sup._nursery = nursery
        try:
            await sup._start_all()
            yield sup.client
        finally:
            with trio.CancelScope(shield=True):
                await sup.aclose()
            nursery.cancel_scope.cancel()
