"""One incarnation of a supervised child: serve its stdio, then one bounded cleanup.

An :class:`Incarnation` holds one spawned process of an extension, its pipes and
its exit, from spawn to reaped. :meth:`Incarnation.serve` runs, in one nursery,
the reader (the :class:`~supervisor._seams.Conversation` spoken over stdio; on
Linux it drains stderr too, elsewhere a task of its own does), the writer task
once a line has to wait, the deadline timer of the calls in flight and, for a
network list, the egress proxy (:mod:`supervisor._egress`), and waits for the
process to exit. It
always ends the same way, shielded and bounded, as trio's ``run_process`` does:

1. if the process is still running (:meth:`stop`, or the owner was cancelled), the
   shutdown ladder: the conversation's goodbye and end of stdin, SIGTERM to the
   group, SIGKILL to the group; each step bounded by a grace period; the process
   is always reaped. This is the one kill path;
2. the reader gets a moment to reach EOF (frames written just before the exit);
3. the group's leftovers and the daemons that escaped it are found and killed
   (see :mod:`supervisor._reap`), the pipes are closed and the sandbox releases
   the plan.

Nothing here knows the extension protocol: a
:class:`~supervisor._seams.Conversation` brings it, so
another kind of child speaking NDJSON over stdio (a tool host) needs another
conversation, not another lifecycle.
"""

from __future__ import annotations

import contextlib
import signal
import time
import typing

import trio

from sandbox import LaunchPlan, Sandbox
from sandbox.log import get_logger

from ._calls import PendingCalls
from ._config import SupervisorConfig
from ._egress import Egress
from ._exceptions import ExtensionGone, ExtensionStopping
from ._io import BESIDE, StderrBeside, StderrLog
from ._lines import LineReader, LineWriter, Unsent
from ._process import ChildProcess
from ._reap import reap_group, reaps_at_once, signal_group
from ._restart import describe_exit
from ._seams import Conversation

__all__ = ["Incarnation"]

log = get_logger(__name__)

_UNSENT = {
    Unsent.BROKEN: "the extension is not reading its stdin (pipe closed)",
    Unsent.FULL: "the extension is not reading its stdin (write backlog full)",
    Unsent.CLOSED: "the extension is not running",
}

#: After the process exits, how long the reader may take to reach EOF on stdout (a
#: grandchild can hold the pipe open forever).
_EOF_AFTER_EXIT = 0.5


@typing.final
class Incarnation:
    """One spawned process, from spawn to reaped (see the module docstring)."""

    def __init__(
        self,
        name: str,
        proc: ChildProcess,
        plan: LaunchPlan,
        token: str,
        *,
        config: SupervisorConfig,
        sandbox: Sandbox,
        calls: PendingCalls,
        stderr: StderrLog,
        egress: Egress | None = None,
    ) -> None:
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        self._name = name
        self._proc = proc
        self._stdin: trio.lowlevel.FdStream = proc.stdin
        self._stdout: trio.lowlevel.FdStream = proc.stdout
        self._stderr_pipe: trio.lowlevel.FdStream = proc.stderr
        self._plan = plan
        #: The instance token in its environment (for the sweep of leftovers).
        self._token = token
        self._config = config
        self._sandbox = sandbox
        self._calls = calls
        self._stderr = stderr
        #: Its egress proxy (a network list), served while it is.
        self._egress = egress
        self._reaped = False
        self.started_at = time.monotonic()
        self._writer = LineWriter(self._stdin, config.write_backlog)
        #: Cancelled by :meth:`stop`: ends the wait for the exit, and the ladder runs.
        self._wait_scope = trio.CancelScope()
        self._stopping = False
        #: Where to leave the token instead of sweeping now (see :meth:`stop`).
        self._sweep_into: list[str] | None = None
        #: The stderr pipe reached its end (everything the extension said is logged).
        self._stderr_done = trio.Event()
        #: stderr served by the reader task (see :class:`~supervisor._io.StderrBeside`),
        #: where one descriptor can watch both pipes (from :meth:`serve` on); else its
        #: own task drains it.
        self._beside: StderrBeside | None = None
        #: What :meth:`serve` speaks (None until it runs).
        self._conversation: Conversation | None = None
        #: The part of the goodbye the pipe did not take (None: not said yet).
        self._bye_rest: bytes | None = None
        #: The goodbye and the end of stdin both went out (nothing else to send).
        self._said_all = False
        #: When the stop began (trio time; None: not stopped): the ladder's windows
        #: count from here.
        self._stop_at: float | None = None

    def __repr__(self) -> str:
        return f"<Incarnation {self._name!r} pid={self.pid} returncode={self.returncode}>"

    @property
    def pid(self) -> int:
        """The spawned process (under bwrap: bwrap itself)."""
        return self._proc.pid

    @property
    def sandboxed(self) -> bool:
        """It runs inside a sandbox backend."""
        return self._plan.sandboxed

    @property
    def guardian_lost(self) -> bool:
        """It died because the guardian that started it died."""
        return self._proc.guardian_lost

    @property
    def returncode(self) -> int | None:
        """Exit status once reaped (negative: killed by that signal), else None."""
        return self._proc.returncode

    # --- control (never blocks) ----------------------------------------------------

    def stop(self, *, sweep_into: list[str] | None = None) -> None:
        """Run the shutdown ladder now (or as soon as :meth:`serve` waits).

        Args:
            sweep_into: leave this incarnation's token here for the caller to sweep
                leftovers of many extensions in one pass, instead of sweeping now.
        """
        self._stopping = True
        self._sweep_into = sweep_into
        if self._stop_at is None:
            self._stop_at = trio.current_time()
        self.say_goodbye()
        if self._said_all:
            # The child has all it needs to leave: the wait for its exit goes on
            # (no ladder, no cancellation for a child that leaves at once) and
            # becomes the ladder after ack_grace.
            self._calls.fail_all(ExtensionStopping, "the extension is being stopped")
            deadline = self._stop_at + self._config.ack_grace
            self._wait_scope.deadline = min(self._wait_scope.deadline, deadline)
            return
        if self._bye_rest is not None:
            self._end_stdin()
        self._wait_scope.cancel()

    def say_goodbye(self) -> None:
        """Write the conversation's goodbye now, once, if :meth:`serve` runs, and end
        stdin when the pipe took all of it (never blocks); else :meth:`stop` ends it.

        The first thing a stop does: a stop of many says all its goodbyes in one
        tight pass, so that all of them begin to exit at once, as when a host closes
        their stdins, and only then does the rest of each stop.
        """
        if self._conversation is None or self._bye_rest is not None or self.returncode is not None:
            return
        # A write cut short by a cancel leaves half a line: end it first.
        busy = self._writer.busy
        bye = (b"\n" if busy else b"") + self._conversation.goodbye
        self._bye_rest = self._writer.end_nowait(bye)
        if not busy and not self._bye_rest:
            # All of it went out and no write is under way: end stdin in the same
            # breath, as a host closing the stdins of many does, and let the idle
            # writer task end by itself (no cancellation).
            self._writer.close()
            self._stdin.close()
            self._said_all = True

    def kill(self) -> None:
        """SIGKILL the process group now (a refused handshake); :meth:`serve` reaps."""
        signal_group(self._proc.pid, signal.SIGKILL)

    def send(self, data: bytes, *, coalesce: bool = False) -> str | None:
        """Queue a frame for stdin (never blocks); returns an error text when it cannot.

        A frame that finds the writer idle goes straight to the pipe, unless
        ``coalesce`` asks to batch it with the others of this scheduler pass (see
        :class:`~supervisor._lines.LineWriter`).
        """
        unsent = self._writer.write_nowait(data, coalesce=coalesce)
        return None if unsent is None else _UNSENT[unsent]

    # --- the owner's part --------------------------------------------------------------

    async def serve(self, conversation: Conversation) -> int:
        """Serve the process until it exits or is stopped; returns its exit status.

        Every pending call fails at once when the process goes (see
        :class:`~supervisor._calls.PendingCalls`).

        Cancellation: runs the shutdown ladder (shielded, bounded by the grace
        periods) and reaps every process before re-raising.
        """
        proc = self._proc
        reader_done = trio.Event()
        self._conversation = conversation
        try:
            if BESIDE:
                self._beside = StderrBeside(self._stderr, self._stderr_pipe, self._stdout.fileno())
            async with trio.open_nursery() as nursery:
                if self._beside is None:
                    nursery.start_soon(self._drain_stderr)
                self._writer.run_in(nursery)  # a task only once a line has to wait
                nursery.start_soon(self._read_loop, conversation, reader_done)
                listener = proc.egress_listener
                if self._egress is not None and listener is not None:
                    nursery.start_soon(self._egress.serve, listener)
                try:
                    with self._calls.timer_in(nursery), self._wait_scope:
                        await proc.exited()
                finally:
                    # (A stop whose child left at once, with its stdout read to the
                    # end, has nothing to wait for here: no scope.)
                    if not proc.gone or not reader_done.is_set():
                        with trio.CancelScope(shield=True):
                            if not proc.gone:
                                await self._ladder(conversation)
                            # Frames written just before exit are still in the pipe:
                            # let the reader reach EOF, but not forever (a grandchild
                            # may hold stdout).
                            if not reader_done.is_set():
                                with trio.move_on_after(_EOF_AFTER_EXIT):
                                    await reader_done.wait()
                    if nursery.child_tasks:
                        nursery.cancel_scope.cancel()
                    self._writer.cancel()  # also when it has no task: nothing is sent now
        finally:
            # Shielded, unless the reap has nothing to wait for (no checkpoint in it).
            at_once = reaps_at_once(proc, sweep=self._sweep_into is None)
            with contextlib.nullcontext() if at_once else trio.CancelScope(shield=True):
                await self._reap()
        rc = proc.returncode
        assert rc is not None
        return rc

    async def _reap(self) -> None:
        """Kill whatever is left of the incarnation and wait for it; bounded."""
        proc = self._proc
        # The extension is gone; its group (ordinary children) has no reason to live,
        # nor has what escaped the group (the guardian adopted it: see _reap), unless
        # the caller sweeps many at once.
        await reap_group(
            proc,
            grace=self._config.term_grace,
            tokens=[self._token],
            sweep=self._sweep_into is None,
        )
        if self._sweep_into is not None and not proc.left_nothing:
            self._sweep_into.append(self._token)  # the caller sweeps it with the others
        self._writer.close()
        log.debug("incarnation_reaped", pid=proc.pid, returncode=proc.returncode)
        self._reaped = True  # from here on the pipes may be closed
        if self._beside is not None:
            self._beside.close()
        proc.close()  # no checkpoint: a stop of many ends each one in fewer steps
        self._sandbox.cleanup(self._plan)
        self._fail_calls()

    async def _ladder(self, conversation: Conversation) -> None:
        """The shutdown ladder: goodbye + close stdin, SIGTERM, SIGKILL; always reaps.

        A child that acknowledged the goodbye said it is done: it gets ``ack_grace``
        to exit by itself (counted from the ack, or from the end of a first
        ``ack_grace`` after the goodbye, whichever is later) and is then killed,
        instead of holding the stop up for the rest of ``shutdown_grace`` while
        its runtime tears down. Bounded by ``shutdown_grace + term_grace`` plus
        the time to reap a killed process. Callers shield it.
        """
        proc = self._proc
        self._calls.fail_all(ExtensionStopping, "the extension is being stopped")
        cfg = self._config
        # Its daemons are not chased here: once it exits they are the guardian's
        # orphans, killed by the sweep in _reap (or the caller's, for many at once).
        if self._stop_at is None:  # the owner was cancelled: the stop begins now
            self._stop_at = trio.current_time()
        with trio.move_on_at(self._stop_at + cfg.shutdown_grace):
            self.say_goodbye()
            rest = self._end_stdin()
            if rest:  # a full pipe: wait for room, bounded by the grace period
                try:
                    await self._stdin.send_all(rest)
                    await self._stdin.aclose()
                except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                    pass
            # Most children are gone within ack_grace: no timer task for them.
            with trio.move_on_at(self._stop_at + cfg.ack_grace):
                await proc.wait()
            if proc.returncode is None:
                async with trio.open_nursery() as race:
                    race.start_soon(self._cut_after_ack, conversation.acked, race.cancel_scope)
                    await proc.wait()
                    race.cancel_scope.cancel()
        if proc.returncode is not None:
            return
        if conversation.acked.is_set():
            signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
            return
        log.warning("extension_sigterm", pid=proc.pid)
        signal_group(proc.pid, signal.SIGTERM)
        with trio.move_on_after(cfg.term_grace):
            await proc.wait()
        if proc.returncode is None:
            log.warning("extension_sigkill", pid=proc.pid)
        signal_group(proc.pid, signal.SIGKILL)
        await proc.wait()

    def _end_stdin(self) -> bytes:
        """After the goodbye: stop the writer and close stdin, unless a full pipe did not
        take all of it; returns that rest (idempotent)."""
        self._writer.cancel()
        rest = self._bye_rest or b""
        if not rest:
            self._stdin.close()
        return rest

    async def _cut_after_ack(self, acked: trio.Event, race: trio.CancelScope) -> None:
        await acked.wait()
        await trio.sleep(self._config.ack_grace)
        race.cancel()

    def _fail_calls(self) -> None:
        """Fail every pending call: the process is going, nothing can answer them now."""
        if self._stopping:
            self._calls.fail_all(ExtensionStopping, "the extension was stopped")
            return
        rc = self._proc.returncode
        if rc is None:
            self._calls.fail_all(ExtensionGone, "the extension closed its stdout")
            return
        if not self._reaped:
            self._stderr.feed_pending(self._stderr_pipe)
        tail = self._stderr.tail[-1] if self._stderr.tail else ""
        status = describe_exit(rc, guardian_lost=self._proc.guardian_lost)
        msg = f"the extension exited ({status})" + (f"; stderr: {tail}" if tail else "")
        self._calls.fail_all(ExtensionGone, msg, returncode=rc)

    # --- the pipes ---------------------------------------------------------------------

    async def _read_loop(self, conversation: Conversation, done: trio.Event) -> None:
        beside = self._beside
        reader = LineReader(self._stdout, self._config.max_frame_bytes, beside=beside)
        try:
            await conversation.converse(reader)
        finally:
            done.set()
        if not self._stopping:  # (else the ladder failed the calls, and its reap what came since)
            # EOF: the extension is going away; nothing pending can be answered now. Its
            # exit usually comes with the EOF, and its last words (why it crashed) are
            # in the stderr pipe: wait for both (briefly) so that errors carry them.
            with trio.move_on_after(_EOF_AFTER_EXIT):
                if beside is not None:
                    await self._stderr_rest(beside)
                await self._proc.wait()
                await self._stderr_done.wait()
            self._fail_calls()
        if beside is not None:  # the rest of stderr, until its end (or the incarnation's)
            await self._stderr_rest(beside)

    async def _stderr_rest(self, beside: StderrBeside) -> None:
        await beside.rest()
        self._stderr_done.set()

    async def _drain_stderr(self) -> None:
        try:
            await self._stderr.drain(self._stderr_pipe)
        finally:
            self._stderr_done.set()
