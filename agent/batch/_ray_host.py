"""The Ray actor that hosts sessions: one trio host, many sessions, on a Ray node.

:class:`SessionHost` is the local backend's shape placed by Ray: its process runs
one trio loop (in a thread of its own: Ray calls the actor's methods from its own
threads) that holds up to ``slots`` sessions at once, each with its own supervisor
and sandboxed extensions, sharing the process's sandbox guardian. A method call
(:meth:`SessionHost.run`) hands one task to that loop and waits for its outcome.

What travels with a task (see :mod:`._ray`): the task itself, its workspace as a
tar (an object reference; fetched by the call) and its extensions as tars keyed
by digest, unpacked once per host into its own directory. When the host's process
dies (its node was lost, or Ray killed it), its sandbox guardian sees the host go
and kills every extension it started.

The driver wraps the class with ``ray.remote``; ray is imported only in the
actor's process (this module is imported by ``agent.batch`` without it).
"""

from __future__ import annotations

import logging
import os
import threading
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from sandbox.log import configure_when_loaded, get_logger

from ._local import session_area
from ._session import Outcome, Session
from ._tasks import Task
from ._workspace import unpack

__all__ = ["SessionHost"]

log = get_logger(__name__)


@typing.final
class SessionHost:
    """A Ray actor holding many sessions at once in one trio loop (the driver
    decides how many through the actor's ``max_concurrency``)."""

    def __init__(self) -> None:
        import ray

        # A process of its own, started by Ray: its entry point, so it configures
        # its logging (warnings and errors to stderr, which Ray keeps in its logs).
        configure_when_loaded(
            lambda structlog: structlog.configure(
                wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING)
            )
        )
        node_id = ray.get_runtime_context().get_node_id()
        self.node = f"ray:{node_id[:12]}:{os.getpid()}"
        self._get: Callable[[Any], Any] = ray.get
        self._sessions: set[Session] = set()
        self._numbers = iter(range(1, 1 << 62))
        self._area_cm = session_area()
        self._area = self._area_cm.__enter__()
        self._extensions: dict[str, str] = {}
        self._unpacking = threading.Lock()
        ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None

        async def host() -> None:
            self._token = trio.lowlevel.current_trio_token()
            ready.set()
            await trio.sleep_forever()

        # A daemon thread: the host lives as long as the actor's process.
        self._thread = threading.Thread(
            target=trio.run, args=(host,), name="corral-session-host", daemon=True
        )
        self._thread.start()
        ready.wait()

    def __repr__(self) -> str:
        return f"<SessionHost {self.node} sessions={len(self._sessions)}>"

    def ping(self) -> str:
        """Where this host runs (the driver's sign that it is up)."""
        return self.node

    def _extension_dir(self, digest: str, ref: Any) -> str:
        with self._unpacking:
            found = self._extensions.get(digest)
            if found is None:
                found = str(self._area / f"ext-{digest[:16]}")
                unpack(self._get(ref), Path(found))
                self._extensions[digest] = found
            return found

    def run(
        self,
        task: Task,
        transcript: bool,
        workspace: Any = None,
        extensions: list[tuple[str, Any]] | None = None,
    ) -> Outcome:
        """Run ``task`` in this host's trio loop and return its outcome.

        Args:
            task: a resolved task.
            transcript: also return its transcript.
            workspace: an object reference to the workspace's tar, or None (the
                task's own ``workspace`` is used).
            extensions: ``(digest, object reference)`` per extension tar, in the
                task's order; None: the task's paths are used as they are.
        """
        dirs = None
        if extensions is not None:
            dirs = [self._extension_dir(digest, ref) for digest, ref in extensions]
        tar = self._get(workspace) if workspace is not None else None
        session = Session(
            task,
            root=self._area / f"s{next(self._numbers)}",
            node=self.node,
            transcript=transcript,
            workspace_tar=tar,
            extension_dirs=dirs,
        )
        return trio.from_thread.run(self._run, session, trio_token=self._token)

    async def _run(self, session: Session) -> Outcome:
        self._sessions.add(session)
        try:
            return await session.run()
        finally:
            self._sessions.discard(session)

    def close(self) -> None:
        """Remove this host's directory (the driver calls this before it kills the
        host at the end of a batch; a host that dies instead leaves it to be swept
        by the next batch on its node)."""
        self._area_cm.__exit__(None, None, None)

    def cancel_all(self) -> int:
        """Cancel every running session (each returns a ``cancelled`` outcome).

        Returns:
            How many were running.
        """

        def cancel() -> int:
            for session in list(self._sessions):
                session.cancel()
            return len(self._sessions)

        return trio.from_thread.run_sync(cancel, trio_token=self._token)
