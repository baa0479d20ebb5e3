"""One supervised child (an extension or a tool host): the owner task of its processes.

:meth:`Extension.run` is the only task that spawns the extension's processes; it
is started with ``nursery.start`` and reports started once the first incarnation
is ready or the run gave up (disabled, quarantined, untrusted, refused, or
crashed once: restarts go on behind). Everyone else talks to it through methods
that never block (:meth:`~Extension.call_tool`, :meth:`~Extension.send_event`, ...)
and :meth:`~Extension.stop`, and reads it through read-only properties.

The parts, each in its own module:

* the lifecycle (:mod:`supervisor._lifecycle`): the state and its transition
  table; every move below is checked there;
* one incarnation (:mod:`supervisor._incarnation`): spawn → serve → one shielded,
  bounded cleanup (ladder, reap, sweep);
* the protocol its kind speaks (:mod:`supervisor._talk`);
* the requests it answers (:mod:`supervisor._door`: tool calls, commands,
  intercepts, events), its base class.

An exit we did not ask for is a crash: pending calls fail at once, and the
restart policy (:mod:`supervisor._restart`), backoff and quarantine decide what
happens next.
"""

from __future__ import annotations

import os
import random
import time
import typing
from collections.abc import Callable, Mapping
from pathlib import Path

import msgspec
import trio

from sandbox import GrantChanged, LaunchPlan, Pin, Sandbox, SandboxError, carry_pins, changed_pins
from sandbox.log import bound_contextvars, get_logger

from . import _frames as f
from ._api import EgressRefused, Quarantined
from ._calls import CallKind, PendingCalls
from ._config import SupervisorConfig, log_path, quarantine_path
from ._door import Door
from ._egress import egress_of
from ._incarnation import Incarnation
from ._io import StderrLog
from ._lifecycle import LISTED, SERVING, ExtensionState, Lifecycle
from ._manifest import ChildKind, ExtensionSpec
from ._process import spawn_child
from ._protocol import ExtensionProtocol, Registrations
from ._restart import Verdict, crash_event, decide
from ._runners import exit_hint
from ._spawn import launch_request
from ._talk import Host, Session, Talk, new_session, open_talk

__all__ = ["Extension"]

log = get_logger(__name__)

S = ExtensionState
#: States a stop request moves to STOPPING (a process is there to stop).
_ALIVE = frozenset({S.STARTING, S.REGISTERING, S.RUNNING})
#: States ``enable`` may start again from.
_ENDED = frozenset({S.FAILED, S.QUARANTINED, S.UNTRUSTED})


class _Exit(typing.NamedTuple):
    returncode: int | None
    refused: str | None
    #: What it exited before doing ("sending hello"), or None.
    early_exit: str | None
    #: It died with the guardian that started it.
    guardian_lost: bool


@typing.final
class Extension(Door):
    """Supervises one extension (see the module docstring); what is asked of it
    (calls, commands, intercepts, events) comes in through :class:`Door`."""

    def __init__(
        self,
        spec: ExtensionSpec,
        config: SupervisorConfig,
        sandbox: Sandbox,
        host: Host,
    ) -> None:
        self._spec = spec
        self._config = config
        self._sandbox = sandbox
        self._host = host
        self._lifecycle = Lifecycle(spec.name)
        self._quarantine_path = quarantine_path(config.home, spec.identity)
        self._problem = ""
        self._pid: int | None = None
        self._plan: LaunchPlan | None = None
        self._started_at: float | None = None
        self._regs = Registrations()
        self._restarts = 0
        self._crashes: tuple[float, ...] = ()
        #: What every spawn must bind: the validated paths, then what the first
        #: spawn bound (see :mod:`sandbox._pin`).
        self._pins: list[Pin] = list(spec.pins)
        self._calls = PendingCalls(
            spec.name,
            {
                CallKind.TOOL: config.tool_timeout,
                CallKind.COMMAND: config.command_timeout,
                CallKind.INTERCEPT: config.intercept_timeout,
                CallKind.HOOK: config.hook_timeout,
            },
        )
        self._stderr = StderrLog(
            log_path(config.home, spec.identity),
            config.log_max_bytes,
            config.stderr_tail_lines,
        )
        #: The egress proxy of a network list (its counters span restarts).
        self.egress = egress_of(spec, host.net_guard(), self._egress_refused)
        # One run of the owner task:
        self._active = False
        self._ended = trio.Event()
        self._started: Callable[[], None] | None = None
        self._stop_requested = False
        self._sweep_into: list[str] | None = None
        self._inc: Incarnation | None = None
        self._talk: Talk | None = None
        self._session = new_session(spec.kind)
        self._backoff: trio.CancelScope | None = None

    def __repr__(self) -> str:
        return f"<Extension {self.name!r} {self.state.name} pid={self._pid}>"

    # --- what others read --------------------------------------------------------

    @property
    def name(self) -> str:
        """The manifest's name."""
        return self._spec.name

    @property
    def spec(self) -> ExtensionSpec:
        """The manifest as discovery loaded it."""
        return self._spec

    @property
    def kind(self) -> ChildKind:
        """What it speaks: an extension or a tool host."""
        return self._spec.kind

    @property
    def session(self) -> Session:
        """What outlives an incarnation: a tool host's state, a relayed child's incarnations."""
        return self._session

    @property
    def state(self) -> ExtensionState:
        """Where the extension is in its lifecycle."""
        return self._lifecycle.state

    @property
    def problem(self) -> str:
        """Why it is not running, or what its last exit was ("" when none)."""
        return self._problem

    @property
    def pid(self) -> int | None:
        """The last spawned process (under bwrap: bwrap itself)."""
        return self._pid

    @property
    def plan(self) -> LaunchPlan | None:
        """The last launch plan (backend, sandboxed, notes)."""
        return self._plan

    @property
    def restarts(self) -> int:
        """Restarts after crashes in this run."""
        return self._restarts

    @property
    def tools(self) -> Mapping[str, f.RegisterTool]:
        """Tools it registered."""
        return self._regs.tools

    @property
    def commands(self) -> Mapping[str, f.RegisterCommand]:
        """Commands it registered."""
        return self._regs.commands

    @property
    def intercepts(self) -> frozenset[str]:
        """Events it intercepts."""
        return self._regs.intercepts

    @property
    def listed(self) -> bool:
        """Its registrations count: running, or restarting after a crash."""
        return self._lifecycle.state in LISTED

    @property
    def serving(self) -> bool:
        """True when calls can be sent (registered and not stopping)."""
        return self._lifecycle.state in SERVING

    @property
    def active(self) -> bool:
        """Its owner task is running (it may be in backoff)."""
        return self._active

    # --- the owner task --------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the extension until it is stopped, refused or quarantined.

        Start it with ``nursery.start``: it reports started once the first
        incarnation is ready, or the run gave up (disabled, quarantined, untrusted,
        refused, or crashed once; restarts go on behind). Never raises for anything
        the extension does.

        Cancellation: runs the shutdown ladder (shielded, bounded by the configured
        grace periods) and reaps every process before re-raising.
        """
        assert not self._active, "one run at a time"
        self._active = True
        self._ended = trio.Event()
        self._started = task_status.started
        self._stop_requested = False
        self._sweep_into = None
        self._problem = ""
        with bound_contextvars(extension=self.name):
            try:
                await self._run()
            finally:
                self._active = False
                self._ended.set()
        self._settle()

    def _settle(self) -> None:
        """Start-up is over for whoever waits in ``nursery.start`` (once per run)."""
        started, self._started = self._started, None
        if started is not None:
            started()

    async def _run(self) -> None:
        try:
            if not self._spec.manifest.enabled:
                self._lifecycle.move(S.DISABLED)  # STOPPED -> DISABLED
                return
            recorded = self._recorded_quarantine()
            if recorded is not None:
                self._quarantine(recorded, None)
                return
            self._stderr.open()
            try:
                await self._incarnations()
            finally:
                self._stderr.close()
        finally:
            # Also when no run began: whoever follows the session (a relay's next()) learns
            # that none is coming.
            self._session.closed(self._problem)

    def _recorded_quarantine(self) -> str | None:
        """The reason of a quarantine recorded by an earlier run; None when there is none."""
        if not os.path.exists(self._quarantine_path):
            return None
        return Path(self._quarantine_path).read_text(errors="replace").strip()

    async def _incarnations(self) -> None:
        """Spawn, serve and restart by the policy until the run ends."""
        while True:
            if self._untrusted():
                return
            exit_ = await self._incarnation()
            if exit_ is None:  # refused before a spawn
                return
            if self._stop_requested:
                self._lifecycle.move(S.STOPPED)  # STOPPING -> STOPPED
                return
            delay = self._after_exit(exit_)
            self._session.exited(exit_.returncode, list(self._stderr.tail))
            if delay is None:
                return
            self._lifecycle.move(S.BACKOFF)  # STARTING/REGISTERING/RUNNING -> BACKOFF
            with trio.CancelScope() as self._backoff:  # stop() cancels it
                await trio.sleep(delay)
            self._backoff = None
            if self._backoff_interrupted():
                self._lifecycle.move(S.STOPPED)  # BACKOFF -> STOPPED
                return
            self._restarts += 1

    def _backoff_interrupted(self) -> bool:
        # A method, not the attribute: it changed during the sleep.
        return self._stop_requested

    async def stop(self, *, sweep_into: list[str] | None = None) -> None:
        """Stop the extension and wait until its processes are gone.

        Pending calls fail with :class:`ExtensionStopping`. Returns at once when
        no run is active.

        Args:
            sweep_into: leave the instance tokens of what is stopped here, for the
                caller to sweep the leftovers of many extensions in one pass.

        Cancellation: stops waiting; the stop goes on.
        """
        if self._active:
            self.begin_stop(sweep_into=sweep_into)
            await self._ended.wait()

    def say_goodbye(self) -> None:
        """Write the goodbye to the running process now (never blocks): the first step
        of :meth:`begin_stop`, which a stop of many takes for all first."""
        if self._active and not self._stop_requested and self._inc is not None:
            self._inc.say_goodbye()

    def begin_stop(self, *, sweep_into: list[str] | None = None) -> None:
        """Begin to stop (never blocks): the goodbye goes out now; :meth:`stop` waits.

        Args:
            sweep_into: as for :meth:`stop`.
        """
        if not self._active or self._stop_requested:
            return
        self._stop_requested = True
        self._sweep_into = sweep_into
        self._stop_incarnation()
        if self._backoff is not None:
            self._backoff.cancel()

    def _stop_incarnation(self) -> None:
        if self._lifecycle.state in _ALIVE:
            self._lifecycle.move(S.STOPPING)  # STARTING/REGISTERING/RUNNING -> STOPPING
        if self._inc is not None:
            self._inc.stop(sweep_into=self._sweep_into)

    def reset(self) -> None:
        """Before a new run (``enable``): forget the crash history and the spawn pins."""
        assert not self._active
        self._crashes = ()
        self._session = new_session(self._spec.kind)
        self._pins = list(self._spec.pins)
        if self._lifecycle.state in _ENDED:
            self._lifecycle.move(S.STOPPED)  # FAILED/QUARANTINED/UNTRUSTED -> STOPPED

    def adopt(self, previous: Extension) -> None:
        """Continue from the same extension's previous run (a reload); before :meth:`run`.

        Its validated paths must still be what the previous run bound, and what the
        previous run pinned at spawn (the data directory, the runtime) carries over:
        any change quarantines it until ``ext enable``.
        """
        changes = changed_pins(previous._pins, self._pins)
        self._pins = carry_pins(previous._pins, self._pins)
        if changes:
            reason = "its paths changed since it last ran: " + "; ".join(changes)
            log.error("extension_quarantined", extension=self.name, reason=reason)
            self._record_quarantine(reason, 0)

    # --- one incarnation ----------------------------------------------------------------

    def _untrusted(self) -> bool:
        """Check trust right before a spawn (restarts too): the directory may have changed."""
        # Here, not in a worker thread: unchanged files are known by their stat (0.1 ms
        # for a typical extension, 10 ms for 1,000 files), less than the trip there.
        # The spawn that follows lets the other tasks run; no scheduler pass between.
        problem = self._host.trust_problem(self._spec)
        if problem is None:
            return False
        self._problem = problem
        self._stderr.note(f"not started: {problem}")
        log.error("extension_untrusted", problem=problem)
        self._lifecycle.move(S.UNTRUSTED)  # STOPPED/BACKOFF -> UNTRUSTED
        self._host.extension_changed(self)
        return True

    async def _incarnation(self) -> _Exit | None:
        # Planning opens every path again and compares it with what was validated
        # (or bound the first time): a restart never binds something else.
        request, token = launch_request(self._spec, self._config, self._pins)
        try:
            plan = self._sandbox.plan(request)
        except GrantChanged as exc:
            log.error("extension_quarantined", reason=exc.reason)
            self._quarantine(exc.reason, len(self._crashes))
            self._host.extension_changed(self)
            return None
        except SandboxError as exc:
            self._refuse_start(f"cannot sandbox: {exc}")
            return None
        self._plan = plan
        self._pins = list(plan.pins) or self._pins
        try:
            proc = await spawn_child(plan)
        except BaseException as exc:
            # Also when cancelled while it starts: the plan's descriptors go with it.
            self._sandbox.cleanup(plan)
            if not isinstance(exc, OSError):
                raise
            self._refuse_start(f"cannot start {plan.argv[0]}: {exc.strerror or exc}")
            return None
        inc = Incarnation(
            self.name,
            proc,
            plan,
            token,
            config=self._config,
            sandbox=self._sandbox,
            calls=self._calls,
            stderr=self._stderr,
            egress=self.egress if plan.egress_port else None,
        )
        self._inc = inc
        self._pid = proc.pid
        self._started_at = inc.started_at
        self._lifecycle.move(S.STARTING)  # STOPPED/BACKOFF -> STARTING
        sandboxed = "sandboxed" if plan.sandboxed else "UNSANDBOXED"
        self._stderr.note(
            f"started pid {proc.pid} ({plan.backend}, {sandboxed})",
            *(f"sandbox: {note}" for note in plan.notes),
        )
        log.info("extension_spawned", pid=proc.pid, backend=plan.backend, sandboxed=plan.sandboxed)
        if self._stop_requested:
            self._stop_incarnation()
        talk = open_talk(
            self, inc, self._calls, self._config, self._host, self._session, plan.sandboxed
        )
        self._talk = talk
        try:
            returncode = await inc.serve(talk)
        finally:
            self._inc = self._talk = None
            if isinstance(talk, ExtensionProtocol):
                why = (
                    "the extension was stopped" if self._stop_requested else "the extension exited"
                )
                talk.panels.gone(why)
        early = talk.first_step if talk.early_exit else None
        return _Exit(returncode, talk.refused, early, inc.guardian_lost)

    async def _egress_refused(self, event: EgressRefused) -> None:
        """Its egress proxy refused a connection: its log, and the event (the audit log)."""
        more = f" (and {event.unreported} more before it)" if event.unreported else ""
        self._stderr.note(f"network: refused {event.destination}: {event.reason}{more}")
        await self._host.egress_refused(event)

    def _refuse_start(self, reason: str) -> None:
        self._problem = reason
        self._stderr.note(f"refused: {reason}")
        log.error("extension_refused", reason=reason)
        self._lifecycle.move(S.FAILED)  # STOPPED/BACKOFF -> FAILED
        self._host.publish(crash_event(self.name, None, reason, [], None))
        self._host.extension_changed(self)

    # --- what the protocol reports (see supervisor._protocol.Owner) ------------------

    def hello_accepted(self, registrations: Registrations) -> None:
        """``hello`` was valid: its registrations replace the previous incarnation's."""
        if self._lifecycle.state is not S.STARTING:  # a stop came first
            log.debug("late_frame_ignored", frame="hello", state=self.state.value)
            return
        self._regs = registrations
        self._lifecycle.move(S.REGISTERING)  # STARTING -> REGISTERING

    def ready(self, how: str) -> None:
        """The incarnation is ready: serving, announced, start-up settled."""
        if self._lifecycle.state is not S.REGISTERING:  # a stop came first
            log.debug("late_frame_ignored", frame="ready", state=self.state.value)
            return
        self._lifecycle.move(S.RUNNING)  # REGISTERING -> RUNNING
        self._problem = ""
        log.info(
            "extension_ready", how=how, tools=sorted(self.tools), commands=sorted(self.commands)
        )
        self._host.extension_changed(self)
        self._settle()

    def registrations_changed(self) -> None:
        """A registration arrived after ready."""
        self._host.extension_changed(self)

    def note(self, text: str, *, problem: bool = False) -> None:
        """Write ``text`` to its log file (``ext logs``); a ``problem`` (something it
        sent is wrong) is also its status until it is ready again."""
        self._stderr.note(f"protocol error: {text}" if problem else text)
        if problem:
            self._problem = text

    def host_changed(self) -> None:
        """The provider or model changed (a tool host asks its tags again)."""
        if self._talk is not None and self.serving:
            self._talk.host_changed()

    # --- after an exit we did not ask for ----------------------------------------------

    def _after_exit(self, exit_: _Exit) -> float | None:
        """Carry out the restart policy's decision; None means "do not restart"."""
        tail = self._stderr.flush_tail()
        code = exit_.returncode
        d = decide(
            name=self.name,
            policy=self._spec.manifest.restart,
            returncode=code,
            refused=exit_.refused,
            early_exit=exit_.early_exit,
            crashes=self._crashes,
            now=time.monotonic(),
            config=self._config,
            jitter=random.uniform(0.8, 1.2),
            guardian_lost=exit_.guardian_lost,
            retry="connect the server again" if self._spec.source == "mcp" else None,
        )
        self._crashes = d.recent
        if code != 0 or exit_.refused:  # say which permission a known runner missed
            perms = self._spec.manifest.permissions
            hint = exit_hint(self._spec.exec_note, tail, perms.network is True)
            if hint:
                d = msgspec.structs.replace(d, reason=f"{d.reason}; {hint}")
        self._stderr.note(f"exited: {d.reason}")
        # Whoever waits for start-up learns of the crash now; restarts go on behind it.
        self._settle()
        if d.verdict is Verdict.RESTART:
            self._problem = d.reason
            log.warning(
                "extension_crashed",
                reason=d.reason,
                restart_in=round(d.delay or 0, 3),
                stderr_tail=tail,
            )
            self._host.publish(crash_event(self.name, code, d.reason, tail, d.delay))
            return d.delay
        if d.verdict is Verdict.FAILED:
            self._problem = d.reason
            self._lifecycle.move(S.FAILED)  # STARTING -> FAILED (refused)
            log.error("extension_refused", reason=d.reason, returncode=code)
            self._host.publish(crash_event(self.name, code, d.reason, tail, None))
        elif d.verdict is Verdict.STOPPED:
            self._problem = "" if code == 0 and not exit_.early_exit else d.reason
            self._lifecycle.move(S.STOPPED)  # STARTING/REGISTERING/RUNNING -> STOPPED
            self._host.publish(crash_event(self.name, code, d.reason, tail, None))
        else:
            log.error("extension_quarantined", reason=d.reason, stderr_tail=tail)
            self._quarantine(d.reason, d.crashes)
        self._host.extension_changed(self)
        return None

    def _record_quarantine(self, reason: str, crashes: int) -> None:
        """Record a quarantine (it outlives this process) and announce it."""
        record = Path(self._quarantine_path)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(reason + "\n")
        self._host.publish(Quarantined(extension=self.name, reason=reason, crashes=crashes))

    def _quarantine(self, reason: str, crashes: int | None) -> None:
        """Go to QUARANTINED; ``crashes`` None: already recorded (a run found the record)."""
        self._problem = reason
        if crashes is not None:
            self._record_quarantine(reason, crashes)
        if self._lifecycle.state is not S.QUARANTINED:  # adopt() may have recorded one
            self._lifecycle.move(S.QUARANTINED)  # * -> QUARANTINED

    @property
    def uptime(self) -> float | None:
        """Seconds its serving process has run (None when none serves)."""
        if self._started_at is None or self._pid is None or not self.serving:
            return None
        return round(time.monotonic() - self._started_at, 3)
