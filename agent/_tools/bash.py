"""The built-in ``bash`` tool: one shell command, bounded in time and output.

The command runs in the working directory, in a new session (its own process
group, detached from the terminal), with stdin from ``/dev/null`` and a small
allowlisted environment (no API keys or other secrets of the host).

Confinement, so that a command an extension rewrote cannot plant an extension or
touch the user's dotfiles:

* **bwrap** (:func:`sandbox.plan_shell`): the host's file system read-only, the
  working directory read-write except its protected paths
  (:class:`sandbox.ProtectedPaths`, the rule the file tools follow too: corral's
  own installation, ``.corral``, git's hooks and configuration, the user's own;
  read-only, created empty if missing), corral's home and every credential store
  hidden, no network, or with a network setting (``--bash-network``) TCP to those
  destinations only, through corral's egress proxy (:class:`supervisor.lowlevel.Egress`),
  served while the command runs. A working directory that is the home directory
  (or contains it), or is itself protected, is not writable.
* **sandbox-exec** (macOS): the extension profile with the working directory as
  the only writable path (none when it is the home directory) and no network;
  the protected paths inside it are *not* protected there.
* **no backend** (``--sandbox off``, or none available): a plain process group.
  Nothing confines the command: it can write anywhere the user can, ``.corral``,
  ``.git/hooks``, corral's installation and ``~/.bashrc`` included. Only the
  ``intercept_builtin`` permission stands between an extension and the shell then.

The command runs on the supervisor's child helper
(:func:`supervisor.lowlevel.open_child`): whatever happens (normal exit, timeout,
cancellation) the whole process group, and whatever left it, is killed with
``SIGKILL`` afterwards, so background jobs cannot outlive the call, the shell is
always reaped and the sandbox's plan released. Output keeps the first and the last half of the limit
with a marker in between.

``bash`` is a typed tool of the builder (see :mod:`.typed`): :class:`BashArgs`
gives its schema and its repair-aware decoding.

While the command runs, its output lines are reported as progress
(``tool_progress`` events), at most :data:`PROGRESS_BURST` lines every
:data:`PROGRESS_INTERVAL` seconds: past that the oldest waiting lines are dropped
and counted (``[… N more lines]``), so a flood of output cannot flood the events,
and the latest lines are always the ones shown.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import typing
from collections.abc import Callable, Sequence
from typing import Annotated

import msgspec
import trio
from msgspec import Meta

from sandbox import (
    LaunchPlan,
    LaunchRequest,
    Permissions,
    Sandbox,
    ShellRequest,
    host_environment,
    plan_shell,
)
from supervisor import EgressReport, NetGuard, toolkit
from supervisor.lowlevel import Egress, describe_exit, open_child

from .._exceptions import ToolError
from .base import Progress
from .confine import Workspace
from .typed import BuiltinTool

__all__ = ["PROGRESS_BURST", "PROGRESS_INTERVAL", "BashTool", "BoundedOutput", "ProgressLines"]

#: Host variables the shell sees besides the allowlist of everything corral starts.
_ENV_EXTRA = ("SHELL", "TZ")
#: After the shell exits or is killed, wait this long for the pipe to close.
_DRAIN_GRACE = 2.0
#: Progress lines sent at most every interval (seconds), and at most this many at a time.
PROGRESS_INTERVAL = 0.1
PROGRESS_BURST = 8
#: A progress line is cut to this many characters; a longer unfinished line is sent as is.
_PROGRESS_LINE_MAX = 1000


@typing.final
class BoundedOutput:
    """Keeps the first and last ``limit // 2`` bytes of a stream, counting the rest."""

    def __init__(self, limit: int) -> None:
        self._half = max(limit // 2, 1)
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def __repr__(self) -> str:
        return f"<BoundedOutput total={self.total} limit={self._half * 2}>"

    def feed(self, data: bytes | bytearray) -> None:
        """Add a chunk."""
        self.total += len(data)
        room = self._half - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            if len(self._tail) > self._half:
                del self._tail[: len(self._tail) - self._half]

    def text(self) -> str:
        """What was kept, decoded, with a marker where bytes were dropped."""
        dropped = self.total - len(self._head) - len(self._tail)
        head = self._head.decode("utf-8", errors="replace")
        tail = self._tail.decode("utf-8", errors="replace")
        if dropped > 0:
            return f"{head}\n[... {dropped} bytes of output omitted ...]\n{tail}"
        return head + tail


@typing.final
class ProgressLines:
    """Output split into lines for :data:`~agent._tools.base.Progress`, rate-limited.

    :meth:`feed` takes chunks as they come (never blocks); :meth:`run_pump` sends the
    waiting lines; :meth:`flush` sends what is left once the output ended.
    """

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._partial = b""
        self._waiting: collections.deque[str] = collections.deque(maxlen=PROGRESS_BURST)
        self._dropped = 0
        self._wake = trio.Event()

    def __repr__(self) -> str:
        return f"<ProgressLines waiting={len(self._waiting)} dropped={self._dropped}>"

    def _add(self, raw: bytes) -> None:
        if len(self._waiting) == self._waiting.maxlen:
            self._dropped += 1
        self._waiting.append(raw.decode("utf-8", "replace").rstrip("\r")[:_PROGRESS_LINE_MAX])

    def feed(self, chunk: bytes) -> None:
        """Add a chunk of output."""
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        if len(self._partial) > _PROGRESS_LINE_MAX:
            lines.append(self._partial)
            self._partial = b""
        for line in lines:
            self._add(line)
        if lines:
            self._wake.set()

    async def _send(self) -> None:
        lines, dropped = list(self._waiting), self._dropped
        self._waiting.clear()
        self._dropped = 0
        if dropped:
            await self._progress(f"[… {dropped} more lines]")
        for line in lines:
            await self._progress(line)

    async def run_pump(self) -> None:
        """Send waiting lines as they come, one batch per interval, until cancelled.

        Cancellation: stops; lines still waiting are kept for :meth:`flush`.
        """
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            await self._send()
            await trio.sleep(PROGRESS_INTERVAL)  # the rate limit, not a poll

    async def flush(self) -> None:
        """Send what is left, including an unfinished last line.

        Cancellation: what was not sent is dropped.
        """
        if self._partial:
            self._add(self._partial)
            self._partial = b""
        await self._send()


class BashArgs(msgspec.Struct, frozen=True, kw_only=True):
    """Arguments of ``bash``."""

    command: Annotated[str, Meta(description="The command line to run.")]
    timeout: Annotated[float | None, Meta(description="Seconds before it is killed.")] = None


def _environment(root: str) -> dict[str, str]:
    env = host_environment(_ENV_EXTRA)
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PWD"] = root
    return env


@typing.final
class BashTool(BuiltinTool):
    """``bash``: run a shell command in the working directory."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        sandbox: Sandbox | None = None,
        choose_sandbox: Callable[[], Sandbox | None] | None = None,
        require_sandbox: bool = False,
        default_timeout: float = 120.0,
        max_timeout: float = 600.0,
        output_limit: int = 64 * 1024,
        network: Sequence[str] = (),
        guard: NetGuard | None = None,
        report: EgressReport | None = None,
    ) -> None:
        """The tool on ``workspace``.

        Args:
            workspace: where commands run.
            sandbox: the backend confining commands (None, or ``none``: no sandbox).
            choose_sandbox: instead of ``sandbox``, a blocking function that picks the
                backend, called in a worker thread before the first command (choosing
                probes the machine, which a session that runs no command need not
                pay for); called at once when the workspace is read-only, since the
                description depends on the backend then.
            require_sandbox: refuse to run commands without a sandbox.
            default_timeout: seconds a command may run when it does not say.
            max_timeout: seconds a command may ask for at most.
            output_limit: bytes of output kept.
            network: destinations commands may reach through corral's egress proxy
                (checked entries of a network list, see :func:`sandbox.check_network`;
                under bwrap only); none by default.
            guard: the network guard of that proxy (default: public addresses only).
            report: awaited with each connection the proxy refuses (the audit log).
        """
        self.workspace = workspace
        if choose_sandbox is not None and not workspace.writable:
            sandbox, choose_sandbox = choose_sandbox(), None
        self._choose = choose_sandbox
        self._choosing = trio.Lock()
        self._sandbox = sandbox if sandbox is not None and sandbox.backend != "none" else None
        self._require_sandbox = require_sandbox
        self._default_timeout = default_timeout
        self._max_timeout = max_timeout
        self._output_limit = output_limit
        self._program = shutil.which("bash") or "/bin/sh"
        self._network = list(network)
        self._egress = None
        if self._network:
            self._egress = Egress(
                "bash",
                self._network,
                guard or NetGuard(),
                grant="the bash tool's network setting (--bash-network)",
                report=report,
            )
        net = (
            f"Network when sandboxed: only TCP to {', '.join(self._network)} (through "
            "corral's proxy: HTTP_PROXY is set)."
            if self._network
            else "No network when sandboxed."
        )
        description = (
            "Run a shell command in the working directory and return its combined "
            f"stdout and stderr (at most {output_limit // 1024} KiB; longer output keeps "
            f"the start and the end). Default timeout {default_timeout:g} s, at most "
            f"{max_timeout:g} s. {net}"
            + (
                ""
                if workspace.writable or self._sandbox is None
                else " The working directory is read-only: "
                + workspace.read_only_reason.split(". ")[0]
                + "."
            )
        )

        @toolkit.tool(name="bash", description=description)
        async def bash(args: BashArgs, emit: Progress) -> str:
            return await self._command(args, emit)

        super().__init__(bash)

    def __repr__(self) -> str:
        backend = "unchosen" if self._choose else self._sandbox.backend if self._sandbox else "none"
        return f"<BashTool root={self.workspace.root!r} sandbox={backend}>"

    @property
    def sandboxed(self) -> bool:
        """True when commands run inside a sandbox backend (blocking when the backend
        is still to be chosen: it is chosen now)."""
        if self._choose is not None:
            self._chosen(self._choose())
        return self._sandbox is not None

    def _chosen(self, sandbox: Sandbox | None) -> None:
        self._sandbox = sandbox if sandbox is not None and sandbox.backend != "none" else None
        self._choose = None

    async def _choose_sandbox(self) -> None:
        """Choose the backend in a worker thread, once (concurrent first commands wait).

        Cancellation: takes effect once the choice is made (the thread is not abandoned).
        """
        async with self._choosing:
            if self._choose is not None:
                self._chosen(await trio.to_thread.run_sync(self._choose))

    def _plan(self, argv: list[str], env: dict[str, str]) -> LaunchPlan | None:
        ws = self.workspace
        if ws.corral_home and (ws.root + "/").startswith(ws.corral_home + "/"):
            raise ToolError(
                f"bash: refused: the working directory is inside corral's home "
                f"({ws.corral_home}); start corral in a project directory"
            )
        if self._sandbox is None:
            if self._require_sandbox:
                raise ToolError(
                    "bash: --sandbox required, but no sandbox backend is available "
                    "(install bubblewrap on Linux), or run with --sandbox auto"
                )
            return None
        try:
            shell = ShellRequest(
                argv=argv,
                env=env,
                workspace=ws.root,
                writable=ws.writable,
                # Read at each command: a repository made by the last one counts.
                protected=ws.protected.paths(),
                hidden=[ws.corral_home] if ws.corral_home else [],
                home=ws.home,
                network=self._network,
            )
            plan = plan_shell(self._sandbox, shell)
            if plan is not None:
                return plan
            # sandbox-exec: the extension profile, the workspace its only writable path.
            request = LaunchRequest(
                name="bash",
                argv=argv,
                env=env,
                ext_dir=ws.root,
                data_dir=None,
                permissions=Permissions(
                    network=False, read_write=[ws.root] if ws.writable else [], data_dir=False
                ),
            )
            return self._sandbox.plan(request)
        except Exception as exc:  # a backend failure must not take the tool down
            raise ToolError(f"bash: the sandbox cannot run the command: {exc}") from exc

    async def _command(self, args: BashArgs, progress: Progress) -> str:
        """Run the command to its end, its timeout, or cancellation.

        Raises:
            ToolError: the command cannot run, failed, or timed out (with its output).

        Cancellation: the process group is killed with ``SIGKILL`` and the shell is
        reaped (shielded, bounded) before ``Cancelled`` propagates.
        """
        if not args.command.strip():
            raise ToolError("bash: command must not be empty")
        timeout = min(args.timeout or self._default_timeout, self._max_timeout)
        if timeout <= 0:
            raise ToolError("bash: timeout must be positive")
        argv = [self._program, "-c", args.command]
        env = _environment(self.workspace.root)
        if self._choose is not None:
            await self._choose_sandbox()
        plan = self._plan(argv, env)
        return await self._execute(argv, env, plan, timeout, ProgressLines(progress))

    def _plain(self, argv: list[str], env: dict[str, str]) -> LaunchPlan:
        """No sandbox: a plain process in a new session, output and errors merged."""
        return LaunchPlan(
            argv=argv, env=env, cwd=self.workspace.root, backend="none", sandboxed=False
        )

    async def _execute(
        self,
        argv: list[str],
        env: dict[str, str],
        plan: LaunchPlan | None,
        seconds: float,
        lines: ProgressLines,
    ) -> str:
        output = BoundedOutput(self._output_limit)
        timed_out = started = False
        try:
            # The sandbox's plan is released with the child, also when an abort lands
            # while the program starts (the bound paths, the seccomp filter).
            async with open_child(
                self._sandbox if plan is not None else None,
                plan if plan is not None else self._plain(argv, env),
                egress=self._egress,
                stdin=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                prepare=plan is not None,
            ) as child:
                started = True
                stdout = child.stdout
                assert stdout is not None
                drained = trio.Event()

                async def drain() -> None:
                    try:
                        while chunk := await stdout.receive_some(65536):
                            output.feed(chunk)
                            lines.feed(bytes(chunk))
                    except (trio.ClosedResourceError, trio.BrokenResourceError):
                        pass
                    drained.set()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(drain)
                    nursery.start_soon(lines.run_pump)
                    with trio.move_on_after(seconds) as scope:
                        await child.wait()
                    timed_out = scope.cancelled_caught
                    # Background jobs keep the pipe open; nothing may outlive the call.
                    child.kill()
                    with trio.move_on_after(_DRAIN_GRACE):
                        await drained.wait()
                    nursery.cancel_scope.cancel()
                await lines.flush()
        except OSError as exc:
            if started:
                raise
            raise ToolError(f"bash: cannot start {argv[0]}: {exc.strerror}") from exc
        return self._result(output, child.returncode, timed_out, seconds)

    def _result(
        self, output: BoundedOutput, returncode: int | None, timed_out: bool, timeout: float
    ) -> str:
        text = output.text().rstrip("\n")
        if timed_out:
            note = f"[timed out after {timeout:g} s; the command and its children were killed]"
            raise ToolError(f"{text}\n{note}" if text else note)
        if returncode != 0:
            note = f"[{describe_exit(returncode)}]"
            raise ToolError(f"{text}\n{note}" if text else note)
        return text or "(no output)"
