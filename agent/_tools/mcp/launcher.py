"""The seam between an MCP connection and the process of a stdio server.

A stdio MCP server is an untrusted process, like an extension. What the
connection needs from it is small and is all this module offers:

* :class:`ServerLauncher`: start the server confined, with the allowlisted
  environment, and stop it when the block ends (the shutdown ladder: stdin closed,
  2 s, ``SIGTERM`` to the process group, 1 s, ``SIGKILL``, reaped, nothing left);
* :class:`ServerProcess`: its pipes, its stderr tail, and its exit (:meth:`wait`);
* :class:`Backoff`: when to start it again after it died, and when to give up.

:class:`SandboxLauncher` implements it with the :mod:`sandbox` package directly
(plan, spawn, cleanup, through :func:`~agent._tools.child.open_child`).

When the supervisor supervises stdio MCP servers as a kind of child, it replaces
:class:`SandboxLauncher` (start, ladder, reaping, logs, ``ext list``) and
:class:`Backoff` (its restart policy with backoff and quarantine); the connection
keeps talking to a :class:`ServerProcess`.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import random
import typing
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Protocol

import msgspec
import structlog
import trio

from sandbox import LaunchRequest, Sandbox, check_permissions

from ..child import Child, StopLadder, open_child
from .config import ServerConfig
from .errors import ConnectFailed

__all__ = [
    "ENV_ALLOW",
    "LADDER",
    "Backoff",
    "SandboxLauncher",
    "ServerLauncher",
    "ServerProcess",
    "server_identity",
]

log = structlog.get_logger(__name__)

#: Host variables every stdio server gets (the extensions' allowlist); anything
#: else only when its entry names it in ``permissions.env`` or sets it in ``env``.
ENV_ALLOW = (
    "PATH", "HOME", "TERM", "TMPDIR", "USER", "LANG", "LANGUAGE", "LC_ALL", "LC_ADDRESS",
    "LC_COLLATE", "LC_CTYPE", "LC_IDENTIFICATION", "LC_MEASUREMENT", "LC_MESSAGES",
    "LC_MONETARY", "LC_NAME", "LC_NUMERIC", "LC_PAPER", "LC_TELEPHONE", "LC_TIME",
)  # fmt: skip
#: The extensions' shutdown ladder.
LADDER = StopLadder(close_grace=2.0, term_grace=1.0)
_TAIL_LINES = 20


class ServerProcess(Protocol):
    """A running stdio server, as its connection sees it."""

    @property
    def pid(self) -> int:
        """Its process id."""
        ...

    @property
    def sandboxed(self) -> bool:
        """It runs inside a sandbox backend."""
        ...

    @property
    def stdin(self) -> trio.abc.SendStream:
        """Where requests go, one JSON-RPC message per line."""
        ...

    @property
    def stdout(self) -> trio.abc.ReceiveStream:
        """Where responses come from."""
        ...

    @property
    def returncode(self) -> int | None:
        """Its exit status once it was reaped (negative: killed by that signal)."""
        ...

    def stderr_tail(self) -> list[str]:
        """The last lines of its stderr."""
        ...

    async def drain_stderr(self) -> None:
        """Read stderr to its end (run it in the connection's nursery).

        Cancellation: stops reading.
        """
        ...

    async def wait(self) -> int:
        """Wait for it to exit; its exit status.

        Cancellation: only the wait is abandoned.
        """
        ...


class ServerLauncher(Protocol):
    """Starts stdio servers; each is stopped when its block ends."""

    def launch(
        self, name: str, config: ServerConfig, identity: str
    ) -> AbstractAsyncContextManager[ServerProcess]:
        """Start ``name`` as ``config`` says (``${VAR}`` already substituted).

        ``identity`` keys the server's private state (see :func:`server_identity`).

        Raises (on entry):
            ConnectFailed: it cannot be planned or started.
        """
        ...


@typing.final
class Backoff:
    """Restart delays after deaths: doubling from ``base`` up to ``cap``, with jitter.

    More than ``max_crashes`` deaths within ``window`` seconds means giving up.
    Pure: the caller passes the clock.
    """

    def __init__(
        self, *, base: float = 0.5, cap: float = 30.0, max_crashes: int = 5, window: float = 60.0
    ) -> None:
        self.base = base
        self.cap = cap
        self.max_crashes = max_crashes
        self.window = window
        self._crashes: collections.deque[float] = collections.deque()

    def __repr__(self) -> str:
        return f"<Backoff crashes={len(self._crashes)}/{self.max_crashes} in {self.window:g} s>"

    def died(self, now: float) -> float | None:
        """Record a death at ``now``; the delay before the restart, or None: give up."""
        self._crashes.append(now)
        while self._crashes and now - self._crashes[0] > self.window:
            self._crashes.popleft()
        count = len(self._crashes)
        if count > self.max_crashes:
            return None
        return min(self.cap, self.base * 2.0 ** (count - 1)) * random.uniform(0.8, 1.2)


def server_identity(name: str, origin: str, path: str) -> str:
    """A key for a server's state (data directory): its name and where it was declared."""
    digest = hashlib.sha256(f"{origin}\0{os.path.realpath(path) if path else ''}".encode())
    return f"{name}-{digest.hexdigest()[:12]}"


@typing.final
class _Process:
    """A :class:`ServerProcess` over a :class:`~agent._tools.child.Child`."""

    def __init__(self, child: Child) -> None:
        assert child.stdin is not None
        assert child.stdout is not None
        self._child = child
        self._stdin = child.stdin
        self._stdout = child.stdout
        self._tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)

    def __repr__(self) -> str:
        return f"<_Process {self._child!r}>"

    @property
    def pid(self) -> int:
        return self._child.pid

    @property
    def sandboxed(self) -> bool:
        return self._child.plan.sandboxed

    @property
    def stdin(self) -> trio.abc.SendStream:
        return self._stdin

    @property
    def stdout(self) -> trio.abc.ReceiveStream:
        return self._stdout

    @property
    def returncode(self) -> int | None:
        return self._child.returncode

    def stderr_tail(self) -> list[str]:
        return list(self._tail)

    async def drain_stderr(self) -> None:
        stream = self._child.stderr
        if stream is None:
            return
        partial = b""
        try:
            while chunk := await stream.receive_some(65536):
                *lines, partial = (partial + chunk).split(b"\n")
                partial = partial[-4096:]
                for line in lines:
                    if line.strip():
                        self._tail.append(line[:1000].decode("utf-8", "replace"))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    async def wait(self) -> int:
        return await self._child.wait()


@typing.final
class SandboxLauncher:
    """Starts stdio servers with the :mod:`sandbox` package.

    Args:
        sandbox: the session's backend (None: unconfined, ``--sandbox off``).
        home: corral's home; each server's private data directory (its ``$HOME``
            and working directory) is ``$CORRAL_HOME/mcp/<identity>``.
        require_sandbox: refuse to start a server without a sandbox.
    """

    def __init__(
        self, sandbox: Sandbox | None, home: str | Path, *, require_sandbox: bool = False
    ) -> None:
        self._sandbox = sandbox if sandbox is not None and sandbox.backend != "none" else None
        self._home = str(Path(home).absolute())
        self._require = require_sandbox

    def __repr__(self) -> str:
        backend = self._sandbox.backend if self._sandbox else "none"
        return f"<SandboxLauncher sandbox={backend}>"

    def _request(self, name: str, config: ServerConfig, identity: str) -> LaunchRequest:
        data = os.path.join(self._home, "mcp", identity)
        os.makedirs(data, mode=0o700, exist_ok=True)
        perms = msgspec.structs.replace(config.permissions, data_dir=True)
        home = os.path.expanduser("~")
        checked = check_permissions(perms, data, home=home, corral_home=self._home)
        host = os.environ
        env = {k: host[k] for k in ENV_ALLOW if k in host}
        env.update({k: host[k] for k in checked.permissions.env if k in host})
        env.update(config.env)
        command = config.command or ""
        return LaunchRequest(
            name=f"mcp-{name}",
            argv=[command, *config.args],
            env=env,
            ext_dir=data,
            data_dir=data,
            permissions=checked.permissions,
            interpreter=command,
            pins=checked.pins,
            hidden=[self._home],
        )

    @asynccontextmanager
    async def launch(
        self, name: str, config: ServerConfig, identity: str
    ) -> AsyncIterator[ServerProcess]:
        """Start the server confined; stop it (the ladder) when the block ends.

        Raises:
            ConnectFailed: a sandbox is required and missing, the permissions are
                invalid, or the program cannot be planned or started.

        Cancellation: the server is stopped and reaped (shielded, bounded).
        """
        if self._sandbox is None and self._require:
            raise ConnectFailed(name, "--sandbox required, but no sandbox backend is available")
        async with contextlib.AsyncExitStack() as stack:
            try:
                request = await trio.to_thread.run_sync(self._request, name, config, identity)
                child = await stack.enter_async_context(
                    open_child(self._sandbox, request, ladder=LADDER)
                )
            except Exception as exc:  # bad permissions, the sandbox's plan, the spawn
                raise ConnectFailed(name, f"cannot start {config.command}: {exc}") from exc
            log.info(
                "mcp_server_started", server=name, pid=child.pid, sandboxed=child.plan.sandboxed
            )
            yield _Process(child)
