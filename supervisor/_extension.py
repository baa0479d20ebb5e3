"""One extension: the owner task of its processes, across restarts.

:meth:`Extension.supervise` is the only task that spawns the extension's process,
owns its pipes and reaps it (with reader, writer and stderr tasks in its own
nursery). Everyone else talks to it through :meth:`Extension.call`,
:meth:`Extension.send_event` and :meth:`Extension.stop`, which never block.

One incarnation goes: spawn → ``hello`` within the handshake deadline (raced
against exit) → ``hello_ack`` → registrations until ``ready`` or a quiet period →
serving → exit. An exit we did not ask for is a crash: pending calls fail at once,
and the restart policy, backoff and quarantine decide what happens next.
"""

from __future__ import annotations

import enum
import os
import re
import signal
import time
import typing
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
import trio

from sandbox import GrantChanged, LaunchPlan, Pin, Sandbox, SandboxError, carry_pins, changed_pins

from . import _frames as f
from ._api import (
    CommandOutcome,
    Displayed,
    ExtensionCrashed,
    ExtensionStats,
    Notified,
    Quarantined,
    Reply,
    SupervisorEvent,
    ToolOutcome,
)
from ._calls import PendingCalls
from ._config import HostInfo, SupervisorConfig, log_file
from ._exceptions import (
    ExtensionGone,
    ExtensionStopping,
)
from ._io import LineReader, Oversize, StderrLog
from ._manifest import ExtensionSpec
from ._process import ChildProcess
from ._reap import (
    Claimed,
    descendants,
    find_leftovers,
    kill_and_wait,
    signal_all,
    signal_group,
)
from ._restart import Verdict, decide, describe_exit
from ._spawn import launch_request, spawn

__all__ = ["Extension", "ExtensionState"]

log = structlog.get_logger("corral.supervisor")

_TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
_ID_RE = re.compile(rb'"id"\s*:\s*"([^"]{1,128})"')
_INTERCEPTABLE = frozenset({"tool_call", "turn_start", "assistant_message"})
#: Bad frames logged per incarnation before logging goes quiet (they are still counted).
_BAD_FRAME_LOG_LIMIT = 10
#: After the process exits, how long the reader may take to reach EOF on stdout (a
#: grandchild can hold the pipe open forever).
_EOF_AFTER_EXIT = 0.5


class ExtensionState(enum.Enum):
    """Lifecycle of one extension."""

    #: ``enabled: false`` in its manifest; never started.
    DISABLED = "disabled"
    #: Spawned; waiting for ``hello``.
    STARTING = "starting"
    #: ``hello`` accepted; collecting registrations until ready.
    REGISTERING = "registering"
    #: Ready and serving.
    RUNNING = "running"
    #: Crashed; waiting out the restart delay.
    BACKOFF = "backoff"
    #: The shutdown ladder is running.
    STOPPING = "stopping"
    #: Exited after a stop, or exited cleanly under a policy that does not restart.
    STOPPED = "stopped"
    #: Refused (handshake) or could not be spawned; not restarted.
    FAILED = "failed"
    #: Crashed too often; not restarted until enabled or reloaded.
    QUARANTINED = "quarantined"
    #: Not trusted (never, or changed since): not started, or not restarted.
    UNTRUSTED = "untrusted"


_LISTED = frozenset(
    {
        ExtensionState.STARTING,
        ExtensionState.REGISTERING,
        ExtensionState.RUNNING,
        ExtensionState.BACKOFF,
    }
)


class _Exit(typing.NamedTuple):
    returncode: int | None
    refused: str | None


@typing.final
class Extension:
    """Supervises one extension (see the module docstring)."""

    def __init__(
        self,
        spec: ExtensionSpec,
        index: int,
        config: SupervisorConfig,
        sandbox: Sandbox,
        *,
        host_info: Callable[[], HostInfo],
        publish: Callable[[SupervisorEvent], None],
        on_change: Callable[[Extension], None],
        quarantine_file: Path,
        trust: Callable[[ExtensionSpec], str | None] | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.index = index
        self._config = config
        self._sandbox = sandbox
        self._host_info = host_info
        self._publish = publish
        self._on_change = on_change
        self._quarantine_file = quarantine_file
        #: Why the extension may not start now (None: it may); asked before every spawn.
        self._trust = trust

        self.state = ExtensionState.STOPPED
        self.problem = ""
        self.pid: int | None = None
        self.plan: LaunchPlan | None = None
        self.tools: dict[str, f.RegisterTool] = {}
        self.commands: dict[str, f.RegisterCommand] = {}
        self.events: frozenset[str] = frozenset()
        self.intercepts: frozenset[str] = frozenset()
        #: Set when the current :meth:`supervise` run reached ready or gave up.
        self.settled = trio.Event()
        #: Set when :meth:`supervise` returned.
        self.finished = trio.Event()
        self.ever_ready = False
        self.restarts = 0
        self.started_at: float | None = None
        #: Instance tokens of incarnations that exited, for the final sweep.
        self.tokens: list[str] = []
        #: When True the supervisor sweeps descendants once for everyone at stop.
        self.defer_sweep = False
        #: Processes of the current incarnation to kill (and wait for) once it exits.
        self._doomed: list[Claimed] = []
        #: What every spawn must bind: the validated paths, then what the first
        #: spawn bound (see :mod:`sandbox._pin`).
        self.pins: list[Pin] = list(spec.pins)

        self._crashes: deque[float] = deque()
        self._calls = PendingCalls(
            spec.name,
            {
                "tool": config.tool_timeout,
                "command": config.command_timeout,
                "intercept": config.intercept_timeout,
            },
        )
        self._out: trio.MemorySendChannel[bytes] | None = None
        self._proc: ChildProcess | None = None
        self._stop_requested = False
        self._interruptible: trio.CancelScope | None = None
        self._writer_scope: trio.CancelScope | None = None
        self._writing = False
        #: Frames sitting in the writer's channel.
        self._queued = 0
        #: The stdin pipe's fd while the writer task owns it (-1 otherwise).
        self._stdin_fd = -1
        self._ready = False
        self._acked = trio.Event()
        self._refused: str | None = None
        self._early_exit = False
        self._stderr = StderrLog(
            log_file(config.home, spec.identity),
            config.log_max_bytes,
            config.stderr_tail_lines,
        )

    def __repr__(self) -> str:
        return f"<Extension {self.name!r} {self.state.name} pid={self.pid}>"

    # --- state ---------------------------------------------------------------

    def _set_state(self, new: ExtensionState) -> None:
        log.debug("extension_state", old=self.state.value, new=new.value)
        self.state = new

    @property
    def listed(self) -> bool:
        """Its registrations count: running, or restarting after a crash."""
        return self.state in _LISTED

    @property
    def serving(self) -> bool:
        """True when calls can be sent (registered and not stopping)."""
        return self.state in (ExtensionState.RUNNING, ExtensionState.REGISTERING)

    # --- the owner task ---------------------------------------------------------

    def prepare(self) -> None:
        """Reset for a new :meth:`supervise` run; call before starting it."""
        self._stop_requested = False
        self.settled = trio.Event()
        self.finished = trio.Event()
        self.problem = ""

    async def supervise(self) -> None:
        """Run the extension until it is stopped, refused or quarantined.

        Call :meth:`prepare` first. Never raises for anything the extension does.

        Cancellation: runs the shutdown ladder (shielded, bounded by the configured
        grace periods) and reaps every process before re-raising.
        """
        with structlog.contextvars.bound_contextvars(extension=self.name):
            try:
                await self._supervise_loop()
            finally:
                self.settled.set()
                self.finished.set()

    async def _supervise_loop(self) -> None:
        if not self.spec.manifest.enabled:
            self._set_state(ExtensionState.DISABLED)  # STOPPED -> DISABLED
            return
        if self._quarantine_file.exists():
            self.problem = self._quarantine_file.read_text(errors="replace").strip()
            self._set_state(ExtensionState.QUARANTINED)  # STOPPED -> QUARANTINED
            return
        self._stderr.open()
        try:
            while True:
                if await self._untrusted():
                    return
                exit_ = await self._incarnation()
                ended = (ExtensionState.FAILED, ExtensionState.QUARANTINED)
                if self._stop_requested or self.state in ended:
                    if self.state not in ended:
                        self._set_state(ExtensionState.STOPPED)  # STOPPING -> STOPPED
                    return
                delay = self._after_crash(exit_)
                if delay is None:
                    return
                self._set_state(ExtensionState.BACKOFF)  # RUNNING -> BACKOFF
                with trio.CancelScope() as scope:
                    self._interruptible = scope
                    if self.stop_requested:
                        scope.cancel()
                    await trio.sleep(delay)
                self._interruptible = None
                if self.stop_requested:
                    self._set_state(ExtensionState.STOPPED)  # BACKOFF -> STOPPED
                    return
                self.restarts += 1
        finally:
            self._stderr.close()

    @property
    def stop_requested(self) -> bool:
        """:meth:`stop` was called (it may change across any await)."""
        return self._stop_requested

    def reset_crashes(self) -> None:
        """Forget the crash history and what was pinned at spawn (a quarantine was lifted)."""
        self._crashes.clear()
        self.pins = list(self.spec.pins)

    def stop(self) -> None:
        """Ask the owner task to stop the extension (returns at once).

        Pending calls fail with :class:`ExtensionStopping`; await :attr:`finished`
        to know the process is gone.
        """
        self._stop_requested = True
        if self._interruptible is not None:
            self._interruptible.cancel()

    # --- one incarnation -----------------------------------------------------------

    async def _incarnation(self) -> _Exit:
        # Planning opens every path again and compares it with what was validated
        # (or bound the first time): a restart never binds something else.
        request, token = launch_request(self.spec, self._config, self.pins)
        try:
            plan = self._sandbox.plan(request)
        except GrantChanged as exc:
            log.error("extension_quarantined", reason=exc.reason)
            self._quarantine(exc.reason, len(self._crashes))  # BACKOFF -> QUARANTINED
            self._on_change(self)
            self.settled.set()
            return _Exit(None, exc.reason)
        except SandboxError as exc:
            return self._refuse_start(f"cannot sandbox: {exc}")
        self.plan = plan
        self.pins = list(plan.pins) or self.pins
        try:
            proc = await spawn(plan)
        except OSError as exc:
            self._sandbox.cleanup(plan)
            return self._refuse_start(f"cannot start {plan.argv[0]}: {exc.strerror or exc}")
        self._proc = proc
        self.pid = proc.pid
        self.started_at = time.monotonic()
        self._ready = False
        self._refused = None
        self._early_exit = False
        self._acked = trio.Event()
        self._set_state(ExtensionState.STARTING)  # STOPPED/BACKOFF -> STARTING
        sandboxed = "sandboxed" if plan.sandboxed else "UNSANDBOXED"
        self._stderr.note(f"started pid {proc.pid} ({plan.backend}, {sandboxed})")
        for note in plan.notes:
            self._stderr.note(f"sandbox: {note}")
        log.info("extension_spawned", pid=proc.pid, backend=plan.backend, sandboxed=plan.sandboxed)
        send, recv = trio.open_memory_channel[bytes](self._config.write_backlog)
        self._out = send
        self._queued = 0
        self._stdin_fd = proc.stdin.fileno()
        reader_done = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._stderr.drain, proc.stderr)
                nursery.start_soon(self._write_loop, proc.stdin, recv)
                nursery.start_soon(self._read_loop, proc.stdout, reader_done)
                nursery.start_soon(self._calls.run_timer)
                with trio.CancelScope() as scope:
                    self._interruptible = scope
                    if self._stop_requested:
                        scope.cancel()
                    await proc.wait()
                self._interruptible = None
                if proc.returncode is None:
                    with trio.CancelScope(shield=True):
                        await self._ladder(proc)
                # Frames written just before exit are still in the pipe: let the
                # reader reach EOF, but not forever (a grandchild may hold stdout).
                with trio.move_on_after(_EOF_AFTER_EXIT):
                    await reader_done.wait()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await self._reap(proc, plan, token)
        return _Exit(proc.returncode, self._refused)

    async def _untrusted(self) -> bool:
        """Check trust right before a spawn (restarts too): the directory may have changed."""
        if self._trust is None:
            return False
        problem = await trio.to_thread.run_sync(self._trust, self.spec)
        if problem is None:
            return False
        self.problem = problem
        self._stderr.note(f"not started: {problem}")
        log.error("extension_untrusted", problem=problem)
        self._set_state(ExtensionState.UNTRUSTED)  # STOPPED/BACKOFF -> UNTRUSTED
        self._on_change(self)
        return True

    def _refuse_start(self, reason: str) -> _Exit:
        self.problem = reason
        self._stderr.note(f"refused: {reason}")
        log.error("extension_refused", reason=reason)
        self._set_state(ExtensionState.FAILED)  # STOPPED/BACKOFF -> FAILED
        self._report_crash(None, None, reason, [], None)
        self._on_change(self)
        self.settled.set()
        return _Exit(None, reason)

    async def _reap(self, proc: ChildProcess, plan: LaunchPlan, token: str) -> None:
        """Kill whatever is left of an incarnation and wait for it; bounded."""
        if proc.returncode is None:
            await self._ladder(proc)
        # The extension is gone; its group (ordinary children) has no reason to live.
        # Found before the group is killed, so that what is killed is waited for.
        found: list[Claimed] = []
        if self.defer_sweep:
            self.tokens.append(token)
        else:
            found = await trio.to_thread.run_sync(find_leftovers, [token], [proc.pid])
        signal_group(proc.pid, signal.SIGKILL)
        doomed, self._doomed = [*self._doomed, *found], []
        with trio.move_on_after(self._config.term_grace) as waited:
            await kill_and_wait(doomed)
        if waited.cancelled_caught:
            log.warning("leftovers_still_running", pids=[c.pid for c in doomed])
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                await stream.aclose()
        self._sandbox.cleanup(plan)
        self._out = None
        self._proc = None
        self._calls.fail_all(self._gone_error(proc.returncode))

    async def _ladder(self, proc: ChildProcess) -> None:
        """The shutdown ladder: ``shutdown`` + close stdin, SIGTERM, SIGKILL; always reaps.

        An extension that answered ``shutdown_ack`` said it is done: it gets
        ``ack_grace`` to exit by itself and is then killed, instead of holding the
        stop up for the rest of ``shutdown_grace`` while its runtime tears down.
        Bounded by ``shutdown_grace + term_grace`` plus the time to reap a killed
        process. Callers shield it.
        """
        self._set_state(ExtensionState.STOPPING)  # * -> STOPPING
        self._calls.fail_all(ExtensionStopping(self.name, "call", "the extension is being stopped"))
        cfg = self._config
        if self.plan is None or self.plan.backend != "bwrap":
            # Taken before asking it to stop: once it exits, the daemons it adopted as
            # a subreaper are handed to init, and one with a clean environment would
            # be lost. (bwrap's PID namespace takes everything down by itself.)
            self._doomed += await trio.to_thread.run_sync(descendants, proc.pid)
        with trio.move_on_after(cfg.shutdown_grace):
            if self._writer_scope is not None:
                self._writer_scope.cancel()
            assert proc.stdin is not None
            # A write cut short by the cancel leaves half a line: end it first.
            frame = (b"\n" if self._writing or self._queued else b"") + f.encode_frame(f.Shutdown())
            try:
                await proc.stdin.send_all(frame)
                await proc.stdin.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                pass
            async with trio.open_nursery() as race:
                race.start_soon(self._cut_after_ack, race.cancel_scope)
                await proc.wait()
                race.cancel_scope.cancel()
        if proc.returncode is not None:
            return
        if self._acked.is_set():
            signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
            return
        log.warning("extension_sigterm", pid=proc.pid)
        signal_group(proc.pid, signal.SIGTERM)
        signal_all(self._doomed, signal.SIGTERM)
        with trio.move_on_after(cfg.term_grace):
            await proc.wait()
        if proc.returncode is None:
            log.warning("extension_sigkill", pid=proc.pid)
            self._doomed += await trio.to_thread.run_sync(descendants, proc.pid)
        signal_group(proc.pid, signal.SIGKILL)
        signal_all(self._doomed, signal.SIGKILL)
        await proc.wait()

    def _report_crash(
        self,
        returncode: int | None,
        sig: str | None,
        reason: str,
        tail: list[str],
        restart_in: float | None,
    ) -> None:
        self._publish(
            ExtensionCrashed(
                extension=self.name,
                returncode=returncode,
                signal=sig,
                reason=reason,
                stderr_tail=tail,
                restart_in=restart_in,
            )
        )

    async def _cut_after_ack(self, race: trio.CancelScope) -> None:
        await self._acked.wait()
        await trio.sleep(self._config.ack_grace)
        race.cancel()

    def _after_crash(self, exit_: _Exit) -> float | None:
        """Carry out the restart policy's decision; None means "do not restart"."""
        tail = self._stderr.flush_tail()
        code = exit_.returncode
        _, sig = describe_exit(code)
        d = decide(
            name=self.name,
            policy=self.spec.manifest.restart,
            returncode=code,
            refused=exit_.refused,
            early_exit=self._early_exit,
            crashes=self._crashes,
            now=time.monotonic(),
            config=self._config,
        )
        self._stderr.note(f"exited: {d.reason}")
        # Whoever waits for start-up learns of the crash now; restarts go on behind it.
        self.settled.set()
        if d.verdict is Verdict.RESTART:
            self.problem = d.reason
            log.warning(
                "extension_crashed",
                reason=d.reason,
                restart_in=round(d.delay or 0, 3),
                stderr_tail=tail,
            )
            self._report_crash(code, sig, d.reason, tail, d.delay)
            return d.delay
        if d.verdict is Verdict.FAILED:
            self.problem = d.reason
            self._set_state(ExtensionState.FAILED)  # STARTING -> FAILED
            log.error("extension_refused", reason=d.reason, returncode=code)
            self._report_crash(code, sig, d.reason, tail, None)
        elif d.verdict is Verdict.STOPPED:
            self.problem = "" if code == 0 and not self._early_exit else d.reason
            self._set_state(ExtensionState.STOPPED)  # RUNNING -> STOPPED
            self._report_crash(code, sig, d.reason, tail, None)
        else:
            log.error("extension_quarantined", reason=d.reason, stderr_tail=tail)
            self._quarantine(d.reason, d.crashes)  # RUNNING -> QUARANTINED
        self._on_change(self)
        return None

    def _quarantine(self, reason: str, crashes: int) -> None:
        """Record a quarantine (it outlives this process) and announce it."""
        self.problem = reason
        self._quarantine_file.parent.mkdir(parents=True, exist_ok=True)
        self._quarantine_file.write_text(reason + "\n")
        self._set_state(ExtensionState.QUARANTINED)  # * -> QUARANTINED
        self._publish(Quarantined(extension=self.name, reason=reason, crashes=crashes))

    def adopt(self, previous: Extension) -> None:
        """Continue from the same extension's previous run (a reload); before :meth:`prepare`.

        Its validated paths must still be what the previous run bound, and what the
        previous run pinned at spawn (the data directory, the runtime) carries over:
        any change quarantines it until ``ext enable``.
        """
        changes = changed_pins(previous.pins, self.pins)
        self.pins = carry_pins(previous.pins, self.pins)
        if changes:
            reason = "its paths changed since it last ran: " + "; ".join(changes)
            log.error("extension_quarantined", extension=self.name, reason=reason)
            self._quarantine(reason, 0)

    # --- writing -----------------------------------------------------------------------

    async def _write_loop(
        self, stdin: trio.abc.SendStream, frames: trio.MemoryReceiveChannel[bytes]
    ) -> None:
        with trio.CancelScope() as scope:
            self._writer_scope = scope
            try:
                async for data in frames:
                    # Coalesce what is already queued into one write.
                    chunks = [data]
                    while len(chunks) < 64:
                        try:
                            chunks.append(frames.receive_nowait())
                        except trio.WouldBlock:
                            break
                    self._queued -= len(chunks)
                    self._writing = True
                    await stdin.send_all(b"".join(chunks) if len(chunks) > 1 else data)
                    self._writing = False
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                # The extension closed its stdin or exited: the exit path reports it.
                pass
            finally:
                self._stdin_fd = -1
        self._writer_scope = None

    def _send(self, data: bytes) -> str | None:
        """Queue a frame; returns an error text when it cannot be queued.

        Fast path: when the writer task is idle with nothing queued, the frame is
        written straight to the non-blocking pipe, saving a task switch per call.
        Whatever the pipe does not take at once goes to the writer task, which
        owns blocking writes, ordering and closing.
        """
        out = self._out
        if out is None:
            return "the extension is not running"
        if self._stdin_fd >= 0 and not self._writing and not self._queued:
            try:
                n = os.write(self._stdin_fd, data)
            except BlockingIOError:
                n = 0
            except OSError:
                return "the extension is not reading its stdin (pipe closed)"
            if n == len(data):
                return None
            data = data[n:]
        try:
            out.send_nowait(data)
        except trio.WouldBlock:
            return "the extension is not reading its stdin (write backlog full)"
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return "the extension is not running"
        self._queued += 1
        return None

    # --- calls ---------------------------------------------------------------------------

    def call(
        self, kind: str, what: str, frame_for: Callable[[str], f.HostFrame], reply: Reply[Any]
    ) -> None:
        """Send a request frame and answer ``reply`` when the extension does.

        ``kind`` is ``"tool"``, ``"command"`` or ``"intercept"``; ``frame_for(id)``
        builds the frame. Never blocks: failures answer the reply at once. The
        kind's deadline (``tool_timeout``, ``command_timeout``, ``intercept_timeout``)
        starts now, so it covers writing the request, and is enforced here by the
        owner's timer task rather than by a cancel scope in every caller.
        """
        if reply.done:
            return
        counts = self._calls.counts
        counts["calls"] += 1
        if not self.serving:
            counts["errors"] += 1
            reply.fail(self._unavailable(what))
            return
        rid = self._calls.new_id(kind)
        error = self._send(f.encode_frame(frame_for(rid)))
        if error is not None:
            counts["errors"] += 1
            reply.fail(ExtensionGone(self.name, what, error))
            return
        self._calls.add(rid, kind, what, reply)

    def send_event(self, frame: f.Event) -> None:
        """Queue a one-way lifecycle event if the extension subscribed to it."""
        if self.serving and frame.event in self.events:
            self._send(f.encode_frame(frame))

    def _unavailable(self, what: str) -> ExtensionGone:
        state = self.state
        if state is ExtensionState.STOPPING or self._stop_requested:
            return ExtensionStopping(self.name, what, "the extension is being stopped")
        if state in (ExtensionState.BACKOFF, ExtensionState.STARTING):
            why = f" (last exit: {self.problem})" if self.problem else ""
            return ExtensionGone(self.name, what, f"the extension is restarting{why}")
        return ExtensionGone(self.name, what, f"the extension is {state.value}")

    def _gone_error(self, returncode: int | None) -> ExtensionGone:
        if self._stop_requested:
            return ExtensionStopping(self.name, "call", "the extension was stopped")
        if returncode is None:
            return ExtensionGone(self.name, "call", "the extension closed its stdout")
        tail = self._stderr.tail[-1] if self._stderr.tail else ""
        status, _ = describe_exit(returncode)
        msg = f"the extension exited ({status})" + (f"; stderr: {tail}" if tail else "")
        return ExtensionGone(self.name, "call", msg, returncode=returncode)

    # --- reading ----------------------------------------------------------------------------

    async def _read_loop(self, stdout: trio.abc.ReceiveStream, done: trio.Event) -> None:
        reader = LineReader(stdout, self._config.max_frame_bytes)
        try:
            if await self._handshake(reader):
                await self._registration(reader)
                while True:
                    item = await reader.next()
                    if item is None:
                        break
                    self._handle(item)
        finally:
            done.set()
        # EOF: the extension is going away; nothing pending can be answered now. Its
        # exit usually comes with the EOF: wait for it (briefly) so errors carry it.
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with trio.move_on_after(_EOF_AFTER_EXIT):
                await proc.wait()
        self._calls.fail_all(self._gone_error(proc.returncode if proc else None))

    def _refuse(self, reason: str) -> None:
        self._refused = reason
        log.error("extension_refused", reason=reason)
        if self._proc is not None:
            signal_group(self._proc.pid, signal.SIGKILL)

    async def _handshake(self, reader: LineReader) -> bool:
        timeout = self._config.handshake_timeout
        item: bytes | Oversize | None = None
        with trio.move_on_after(timeout):
            item = await reader.next()
            if item is None:
                self._early_exit = True
                return False
        if item is None:
            self._refuse(f"no hello within {timeout:g} s")
            return False
        if isinstance(item, Oversize):
            self._refuse(f"first frame is larger than {self._config.max_frame_bytes} bytes")
            return False
        try:
            frame = f.decode_ext_frame(item)
        except f.FrameError as exc:
            self._refuse(f"first frame is not a valid hello ({exc.detail}): {exc.excerpt}")
            return False
        if not isinstance(frame, f.Hello):
            self._refuse(f"first frame must be hello, got {type(frame).__name__}")
            return False
        if frame.name != self.name:
            self._refuse(f"hello names {frame.name!r} but the manifest names {self.name!r}")
            return False
        self.tools, self.commands = {}, {}
        self.events = self.intercepts = frozenset()
        self._set_state(ExtensionState.REGISTERING)  # STARTING -> REGISTERING
        info = self._host_info()
        ack = f.HelloAck(
            corral_version=_VERSION,
            zot_version=_VERSION,
            provider=info.provider,
            model=info.model,
            cwd=info.cwd,
        )
        self._send(f.encode_frame(ack))
        return True

    async def _registration(self, reader: LineReader) -> None:
        cfg = self._config
        cap = trio.current_time() + cfg.ready_cap
        last = trio.current_time()
        while not self._ready:
            item: bytes | Oversize | None = None
            with trio.move_on_at(min(cap, last + cfg.ready_quiet)) as scope:
                item = await reader.next()
            if scope.cancelled_caught:
                self._mark_ready("quiet period" if trio.current_time() < cap else "cap")
                return
            if item is None:
                return
            self._handle(item)
            last = trio.current_time()

    def _mark_ready(self, how: str) -> None:
        if self._ready:
            return
        self._ready = True
        self._set_state(ExtensionState.RUNNING)  # REGISTERING -> RUNNING
        self.problem = ""
        log.info(
            "extension_ready", how=how, tools=sorted(self.tools), commands=sorted(self.commands)
        )
        self._on_change(self)
        self.ever_ready = True
        self.settled.set()

    def _bad_frame(self, message: str, excerpt: str, frame_id: str | None) -> None:
        self._calls.counts["bad_frames"] += 1
        n = self._calls.counts["bad_frames"]
        if n <= _BAD_FRAME_LOG_LIMIT or n % 1000 == 0:
            log.warning("bad_frame", problem=message, excerpt=excerpt, count=n)
        if frame_id is not None:
            self._calls.violated(frame_id, message, excerpt)

    def _handle(self, item: bytes | Oversize) -> None:
        if isinstance(item, Oversize):
            match = _ID_RE.search(item.head)
            fid = match.group(1).decode("utf-8", "replace") if match else None
            self._bad_frame(
                f"line of {item.size} bytes exceeds the {self._config.max_frame_bytes}-byte limit",
                f.excerpt(item.head),
                fid,
            )
            return
        if not item.strip():
            return
        try:
            frame = f.decode_ext_frame(item)
        except f.FrameError as exc:
            self._bad_frame(exc.detail, exc.excerpt, exc.frame_id)
            return
        if isinstance(frame, f.ToolResult):
            self._resolve(frame.id, "tool", frame)
        elif isinstance(frame, f.EventInterceptResponse):
            self._resolve(frame.id, "intercept", frame)
        elif isinstance(frame, f.CommandResponse):
            self._resolve(frame.id, "command", frame)
        elif isinstance(frame, f.Notify):
            self._publish(Notified(extension=self.name, level=frame.level, message=frame.message))
        elif isinstance(frame, f.RegisterTool | f.RegisterCommand | f.Subscribe):
            self._register(frame)
        elif isinstance(frame, f.Ready):
            self._mark_ready("ready frame")
        elif isinstance(frame, f.ShutdownAck):
            log.debug("shutdown_ack")
            self._acked.set()
        else:  # a second hello
            self._bad_frame("hello sent twice", f.excerpt(item), None)

    def _register(self, frame: f.RegisterTool | f.RegisterCommand | f.Subscribe) -> None:
        if isinstance(frame, f.Subscribe):
            unknown = set(frame.intercept) - _INTERCEPTABLE
            if unknown:
                log.warning("subscribe_unknown_intercept", events=sorted(unknown))
            self.events = frozenset(frame.events)
            self.intercepts = frozenset(e for e in frame.intercept if e in _INTERCEPTABLE)
        elif isinstance(frame, f.RegisterTool):
            schema = frame.schema
            if not _TOOL_NAME_RE.match(frame.name):
                log.warning("tool_rejected", tool=frame.name, problem="name is not an identifier")
                return
            if not isinstance(schema, dict) or schema.get("type") != "object":
                log.warning(
                    "tool_rejected",
                    tool=frame.name,
                    problem="schema must be a JSON object schema with type: object",
                )
                return
            self.tools[frame.name] = frame
        else:
            name = frame.name.lstrip("/")
            if not name or any(c.isspace() for c in name):
                log.warning("command_rejected", command=frame.name, problem="invalid name")
                return
            self.commands[name] = f.RegisterCommand(name=name, description=frame.description)
        if self._ready:
            self._on_change(self)

    def _resolve(self, rid: str, kind: str, frame: Any) -> None:
        pending = self._calls.take(rid, kind)
        if pending is None:
            self._bad_frame(f"reply to unknown id {rid!r}", rid, None)
            return
        reply = pending.reply
        if kind == "tool":
            if frame.is_error:
                self._calls.counts["errors"] += 1
            reply.set(
                ToolOutcome(
                    content=list(frame.content),
                    is_error=frame.is_error,
                    tool=pending.what.split(" ", 1)[-1],
                    extension=self.name,
                )
            )
        elif kind == "command":
            if frame.action == "display" and frame.display:
                self._publish(Displayed(extension=self.name, text=frame.display))
            reply.set(
                CommandOutcome(
                    action=frame.action,
                    prompt=frame.prompt,
                    insert=frame.insert,
                    display=frame.display,
                    error=frame.error,
                    extension=self.name,
                )
            )
        else:
            reply.set(frame)

    # --- stats -----------------------------------------------------------------------------

    def stats(self, proc_figures: dict[str, Any] | None = None) -> ExtensionStats:
        """Counters, latency percentiles and (given) psutil figures."""
        uptime = (
            round(time.monotonic() - self.started_at, 3)
            if self.started_at is not None and self.pid is not None and self.serving
            else None
        )
        figures = proc_figures or {}
        return self._calls.stats(
            restarts=self.restarts,
            rss_bytes=figures.get("rss"),
            cpu_percent=figures.get("cpu"),
            open_fds=figures.get("fds"),
            uptime_s=uptime,
        )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("corral")
    except PackageNotFoundError:
        return "0.0.0"


_VERSION = _version()
