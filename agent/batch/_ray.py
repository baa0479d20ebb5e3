"""The Ray backend: sessions on a Ray cluster, results streamed back to the driver.

Sessions run in long-lived actors (:class:`~._ray_host.SessionHost`), each the
local backend's shape (one trio host, many sessions) with declared resources
(``num_cpus``, ``memory``), spread over the cluster's nodes by Ray. The driver
(this process) hands each host tasks up to its number of slots and writes
nothing but what comes back: the outcomes go to the caller, who alone writes the
results file.

A lost node (or a host process that died) fails the calls in flight on its hosts
with an actor error: each such task is queued again (``attempts`` + 1, at most
``max_attempts``) and runs on a live host; Ray restarts the lost hosts where the
cluster has room (``max_restarts``), and a restarted host gets tasks again once
it answers a ``ping``. An outcome that arrives for a task already delivered is
dropped by the driver (:mod:`._run`), so each id is written once.

What travels: a task is self-contained (its script inline); its workspace
directory and each extension directory travel as tars through Ray's object store
(each directory put once and shared by the tasks that name it), unless
``shared_paths`` says every node sees the same paths (NFS, the same image).

``ray`` is imported only when a batch runs here (``pip install 'corral[ray]'``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import typing
from collections import deque
from collections.abc import Sequence
from typing import Any

import msgspec
import trio

from sandbox.log import get_logger

from ._exceptions import BackendError
from ._results import Result, Status
from ._session import Outcome
from ._tasks import Task
from ._workspace import pack_dir

__all__ = ["RayBackend"]

log = get_logger(__name__)

#: How long the batch waits with tasks left and no host up before it gives them up.
LOST_PATIENCE = 300.0


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise BackendError(
            "--ray needs Ray: pip install 'corral[ray]' (or: pip install ray)"
        ) from None
    return ray


@typing.final
class _Host:
    """The driver's view of one actor: its handle, free slots, and whether it is up."""

    def __init__(self, index: int, handle: Any, slots: int) -> None:
        self.index = index
        self.handle = handle
        self.slots = slots
        self.free = slots
        self.up = False
        #: Counts the times it came up: a failure of a call sent to an earlier life
        #: of the host (reported after it came back) says nothing about this one.
        self.life = 0


@typing.final
class RayBackend:
    """Run sessions on a Ray cluster.

    Args:
        address: the cluster: ``"auto"`` (the one this machine is part of, or
            ``RAY_ADDRESS``) or ``host:port``; None connects as ``ray.init()``
            does (starts a local Ray when there is none). Ignored when this
            process is connected already.
        jobs: sessions at once over the whole cluster; None: its CPUs.
        hosts: session-hosting actors; None: one per ``cpus`` CPUs of the cluster.
        cpus: CPUs each host declares (Ray places hosts by it).
        memory: bytes of memory each host declares; None: none declared.
        max_attempts: runs of a task whose host was lost before it is given up.
        shared_paths: every node sees the tasks' paths (nothing is packed).
    """

    def __init__(
        self,
        address: str | None = "auto",
        *,
        jobs: int | None = None,
        hosts: int | None = None,
        cpus: float = 1.0,
        memory: int | None = None,
        max_attempts: int = 3,
        shared_paths: bool = False,
    ) -> None:
        if cpus <= 0:
            raise ValueError("cpus must be above 0")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.address = address
        self.jobs = jobs
        self.hosts = hosts
        self.cpus = cpus
        self.memory = memory
        self.max_attempts = max_attempts
        self.shared_paths = shared_paths
        self._concurrency = jobs or 1

    def __repr__(self) -> str:
        return f"<RayBackend address={self.address!r} jobs={self.jobs} hosts={self.hosts}>"

    @property
    def concurrency(self) -> int:
        """Sessions that run at once (known once connected: the cluster's CPUs)."""
        return self._concurrency

    def _connect(self) -> tuple[Any, int]:
        """``(ray, the cluster's CPUs)`` (blocking)."""
        ray = _import_ray()
        if not ray.is_initialized():
            # Off the main thread Ray sets no SIGTERM handler and says so; the
            # caller handles signals (corral batch stops the batch on SIGTERM).
            quiet = logging.getLogger("ray._private.worker")
            level = quiet.level
            quiet.setLevel(logging.ERROR)
            try:
                ray.init(
                    address=self.address,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                    configure_logging=False,
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise BackendError(f"cannot connect to Ray at {self.address}: {exc}") from None
            finally:
                quiet.setLevel(level)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if cpus < 1:
            raise BackendError("the Ray cluster has no CPUs to run sessions on")
        return ray, cpus

    async def serve(
        self,
        tasks: Sequence[Task],
        out: trio.MemorySendChannel[Outcome],
        stop: trio.Event,
        *,
        transcripts: bool = False,
    ) -> None:
        """Run ``tasks`` on the cluster; see :class:`~._run.Backend`.

        Cancellation: the hosts are killed (``ray.kill``; their guardians then kill
        every extension) and nothing more is sent.
        """
        ray, cpus = await trio.to_thread.run_sync(self._connect)
        from ._ray_host import SessionHost

        count = self.hosts or max(1, int(cpus // self.cpus))
        jobs = self.jobs or cpus
        count = min(count, jobs)
        self._concurrency = jobs
        slots = math.ceil(jobs / count)
        options: dict[str, Any] = {
            "num_cpus": self.cpus,
            "max_restarts": -1,
            "max_task_retries": 0,
            "max_concurrency": slots + 2,
            "scheduling_strategy": "SPREAD",
        }
        if self.memory:
            options["memory"] = self.memory
        actor = ray.remote(SessionHost).options(**options)
        hosts = [_Host(i, actor.remote(), slots) for i in range(count)]
        log.info("batch_ray_hosts", hosts=count, slots=slots, cluster_cpus=cpus)
        try:
            await _Dispatch(ray, hosts, self, transcripts).run(list(tasks), out, stop)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_kill, ray, hosts)


def _kill(ray: Any, hosts: list[_Host]) -> None:
    closing = [host.handle.close.remote() for host in hosts if host.up]
    # Their directories first (bounded: a host that hangs is killed all the same).
    if closing:
        try:
            ray.wait(closing, num_returns=len(closing), timeout=10)
        except Exception as exc:  # cleanup: the kill below still happens
            log.debug("batch_ray_close_failed", error=repr(exc))
    for host in hosts:
        try:
            ray.kill(host.handle, no_restart=True)
        except Exception as exc:  # a host that is gone already
            log.debug("batch_ray_kill_failed", host=host.index, error=repr(exc))


def _digest(path: str) -> str:
    return hashlib.sha256(path.encode()).hexdigest()


@typing.final
class _Dispatch:
    """The driver's loop: hand tasks to hosts with free slots, collect what returns.

    Completions arrive through the object references' futures (a callback per
    reference, in Ray's thread, that hands it to the trio loop): no polling.
    """

    def __init__(self, ray: Any, hosts: list[_Host], backend: RayBackend, transcripts: bool):
        self.ray = ray
        self.hosts = hosts
        self.backend = backend
        self.transcripts = transcripts
        #: Object reference of each call in flight -> its task, attempt, host and
        #: the host's life it was sent to.
        self.inflight: dict[Any, tuple[Task, int, _Host, int]] = {}
        self.packed: dict[str, tuple[str, Any]] = {}
        self.send, self.receive = trio.open_memory_channel[tuple[str, Any, Any]](math.inf)
        self.token = trio.lowlevel.current_trio_token()
        errors = ray.exceptions
        #: What a lost host (node, process) fails its calls with.
        self.lost_errors = (
            errors.RayActorError,
            errors.NodeDiedError,
            errors.WorkerCrashedError,
            errors.ObjectLostError,
        )

    def _notify(self, kind: str, key: Any, future: Any) -> None:
        try:
            value = future.result()
        except BaseException as exc:  # the outcome is the exception
            value = exc
        # After the batch is over nobody waits for this any more.
        with contextlib.suppress(trio.RunFinishedError):
            self.token.run_sync_soon(self.send.send_nowait, (kind, key, value))

    def _watch(self, kind: str, key: Any, ref: Any) -> None:
        ref.future().add_done_callback(lambda future: self._notify(kind, key, future))

    def _pack(self, path: str) -> tuple[str, Any]:
        """An extension directory in the object store, put once for every task."""
        found = self.packed.get(path)
        if found is None:
            found = (_digest(path), self.ray.put(pack_dir(path)))
            self.packed[path] = found
        return found

    def _pack_workspace(self, path: str) -> Any:
        # Not kept: the object is freed once the task that holds it is over (a
        # retry puts it again), so a batch of large workspaces never piles up.
        return self.ray.put(pack_dir(path))

    async def _submit(self, task: Task, attempt: int, host: _Host) -> None:
        workspace = extensions = None
        if not self.backend.shared_paths:
            try:
                extensions = [
                    await trio.to_thread.run_sync(self._pack, path) for path in task.extensions
                ]
                if isinstance(task.workspace, str):
                    workspace = await trio.to_thread.run_sync(self._pack_workspace, task.workspace)
            except (OSError, ValueError) as exc:
                await self._give_up(task, attempt, f"cannot send it to Ray: {exc}")
                return
        ref = host.handle.run.remote(task, self.transcripts, workspace, extensions)
        host.free -= 1
        self.inflight[ref] = (task, attempt, host, host.life)
        self._watch("run", ref, ref)

    async def _give_up(self, task: Task, attempts: int, error: str) -> None:
        result = Result(
            id=task.id, status=Status.ERROR, attempts=attempts, error=error, meta=task.meta
        )
        await self.out.send(Outcome(result=result))

    def _lost(self, host: _Host, life: int, error: BaseException) -> None:
        if host.up and host.life == life:
            log.warning("batch_ray_host_lost", host=host.index, error=str(error)[:300])
            host.up = False
            self._watch("ping", host, host.handle.ping.remote())

    async def _ping_later(self, host: _Host) -> None:
        # A host being restarted may refuse calls at once: ask again a second later.
        await trio.sleep(1.0)
        self._watch("ping", host, host.handle.ping.remote())

    async def run(
        self, tasks: list[Task], out: trio.MemorySendChannel[Outcome], stop: trio.Event
    ) -> None:
        async with trio.open_nursery() as nursery:
            await self._loop(nursery, tasks, out, stop)
            nursery.cancel_scope.cancel()

    async def _loop(
        self,
        nursery: trio.Nursery,
        tasks: list[Task],
        out: trio.MemorySendChannel[Outcome],
        stop: trio.Event,
    ) -> None:
        self.out = out
        queue: deque[tuple[Task, int]] = deque((task, 1) for task in tasks)
        for host in self.hosts:
            self._watch("ping", host, host.handle.ping.remote())
        stopping = False
        while queue or self.inflight:
            if stop.is_set() and not stopping:
                stopping = True
                queue.clear()
                for host in self.hosts:
                    if host.up:
                        host.handle.cancel_all.remote()
            if not stopping:
                for host in self.hosts:
                    while host.up and host.free > 0 and queue:
                        task, attempt = queue.popleft()
                        await self._submit(task, attempt, host)
            if not (queue or self.inflight):
                break
            kind, key, value = await self._next(stop, waiting=bool(queue) and not self.inflight)
            if kind == "ping":
                host = key
                if isinstance(value, BaseException):
                    nursery.start_soon(self._ping_later, host)
                elif not host.up:
                    host.up, host.free, host.life = True, host.slots, host.life + 1
                    log.info("batch_ray_host_up", host=host.index, node=value)
                continue
            if kind != "run":
                continue
            task, attempt, host, life = self.inflight.pop(key)
            if isinstance(value, Outcome):
                host.free += 1
                result = msgspec.structs.replace(value.result, attempts=attempt)
                await out.send(msgspec.structs.replace(value, result=result))
            elif isinstance(value, self.lost_errors):
                self._lost(host, life, value)
                if stopping:
                    await self._give_up(task, attempt, "its host was lost as the batch stopped")
                elif attempt < self.backend.max_attempts:
                    queue.appendleft((task, attempt + 1))
                else:
                    why = f"its host was lost {attempt} times: {value}"
                    await self._give_up(task, attempt, why)
            else:
                host.free += 1
                await self._give_up(task, attempt, f"internal error on its host: {value!r}")

    async def _next(self, stop: trio.Event, *, waiting: bool) -> tuple[str, Any, Any]:
        """The next completion; also wakes on ``stop``. With tasks queued and none in
        flight (no host up), gives up after :data:`LOST_PATIENCE`."""
        patience = LOST_PATIENCE if waiting else math.inf
        result: tuple[str, Any, Any] | None = None
        with trio.move_on_after(patience):
            async with trio.open_nursery() as nursery:

                async def on_stop() -> None:
                    await stop.wait()
                    nursery.cancel_scope.cancel()

                if not stop.is_set():
                    nursery.start_soon(on_stop)
                result = await self.receive.receive()
                nursery.cancel_scope.cancel()
        if result is not None:
            return result
        if stop.is_set():
            return ("stop", None, None)
        raise BackendError(f"no Ray host has been up for {LOST_PATIENCE:g} s; tasks are left")
