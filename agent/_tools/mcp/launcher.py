"""The seam between an MCP connection and the process of a stdio server: the supervisor.

A stdio MCP server is an untrusted process, like an extension, and corral
supervises it as one: a child of kind ``mcp-server`` (``supervisor/_relay.py``),
with the sandbox and its pins, the environment allowlist, its log (``corral ext
logs mcp-NAME``), restart with backoff and quarantine, the shutdown ladder (stdin
closed, 2 s, ``SIGTERM`` to the process group, 1 s, ``SIGKILL``, reaped, nothing
left), and a row in ``ext list`` / RPC ``ext_list``. What the connection needs of
it is small and is all this module offers:

* :class:`ServerLauncher`: start the server, and stop it when the block ends;
* :class:`ServerChild`: its incarnations, one after another (the supervisor starts
  the next one after a crash), and why there are no more;
* :class:`ServerProcess`: one incarnation's pipes, its stderr tail and its exit.

:class:`SupervisedLauncher` implements it with the supervisor
(``SupervisorClient.start_child`` / ``stop_child``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import typing
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Protocol

import trio

from sandbox.log import get_logger
from supervisor import ExtensionSpec, ManifestError, SupervisorError
from supervisor.lowlevel import Relay, mcp_server_spec

from .config import ServerConfig
from .errors import ConnectFailed

__all__ = [
    "ServerChild",
    "ServerLauncher",
    "ServerProcess",
    "SupervisedLauncher",
    "Supervisor",
    "server_identity",
]

log = get_logger(__name__)


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

    @property
    def violation(self) -> str:
        """Why corral ended it (a line over the limit), or ""."""
        ...

    def stderr_tail(self) -> list[str]:
        """The last lines of its stderr."""
        ...

    def kill(self) -> None:
        """End it now; the supervisor starts the next incarnation after its backoff."""
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


class ServerChild(Protocol):
    """A supervised stdio server across its incarnations."""

    @property
    def problem(self) -> str:
        """Why it will not run again, once :meth:`next` gave None."""
        ...

    @property
    def restarts(self) -> int:
        """Incarnations after the first."""
        ...

    async def next(self) -> ServerProcess | None:
        """The next incarnation (the first, or one after a restart); None: no more.

        Cancellation: only the wait is abandoned.
        """
        ...


class ServerLauncher(Protocol):
    """Starts stdio servers; each is stopped when its block ends."""

    def launch(
        self, name: str, config: ServerConfig, identity: str
    ) -> AbstractAsyncContextManager[ServerChild]:
        """Start ``name`` as ``config`` says (``${VAR}`` already substituted).

        ``identity`` keys the server's private state (see :func:`server_identity`).

        Raises (on entry):
            ConnectFailed: it cannot be planned or started.
        """
        ...


def server_identity(name: str, origin: str, path: str) -> str:
    """A key for a server's state (data directory): its name and where it was declared."""
    digest = hashlib.sha256(f"{origin}\0{os.path.realpath(path) if path else ''}".encode())
    return f"{name}-{digest.hexdigest()[:12]}"


class Supervisor(Protocol):
    """The part of :class:`~supervisor.SupervisorClient` the launcher needs."""

    async def start_child(self, spec: ExtensionSpec) -> Relay: ...

    async def stop_child(self, name: str) -> None: ...


#: Bound on stopping a server when its connection ends (the ladder is about 3 s).
_STOP_GRACE = 10.0


@typing.final
class SupervisedLauncher:
    """Starts stdio servers as supervised children.

    Args:
        supervisor: the session's supervisor (its sandbox mode applies: ``required``
            refuses a server it cannot confine).
        home: corral's home; each server's directory (its working directory, and
            its data) is ``$CORRAL_HOME/mcp/<identity>``.
    """

    def __init__(self, supervisor: Supervisor, home: str | Path) -> None:
        self._supervisor = supervisor
        self._home = str(Path(home).absolute())

    def __repr__(self) -> str:
        return f"<SupervisedLauncher home={self._home!r}>"

    @asynccontextmanager
    async def launch(
        self, name: str, config: ServerConfig, identity: str
    ) -> AsyncIterator[ServerChild]:
        """Supervise the server as the child ``mcp-<name>``; stop it when the block ends.

        Raises:
            ConnectFailed: the permissions are invalid, or the supervisor refuses it.

        Cancellation: the server is stopped (its ladder, shielded and bounded).
        """
        argv = [config.command or "", *config.args]
        try:
            spec = await trio.to_thread.run_sync(
                functools.partial(
                    mcp_server_spec,
                    f"mcp-{name}",
                    argv,
                    env=dict(config.env),
                    permissions=config.permissions,
                    identity=identity,
                    home=self._home,
                )
            )
            relay = await self._supervisor.start_child(spec)
        except (ManifestError, SupervisorError, OSError) as exc:
            raise ConnectFailed(name, f"cannot start {config.command}: {exc}") from exc
        log.info("mcp_server_supervised", server=name, child=spec.name)
        try:
            yield relay
        finally:
            with (
                trio.CancelScope(shield=True),
                trio.move_on_after(_STOP_GRACE),
                contextlib.suppress(SupervisorError),
            ):
                await self._supervisor.stop_child(spec.name)
