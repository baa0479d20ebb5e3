"""The guardian's spares: children forked before their order, parked until one comes.

Part of the guardian program (``_guardian_main.py``), not a module of the package:
standard library only, imported by the guardian from its own directory. A spare
(``spare`` in ``_guardian_child.py``) does, while nothing waits, what a prepared
launch does before its order: it dies with the guardian, is a child subreaper, and
(``Guardian.park``) joins its cgroups, or (the pool, in no cgroup) mounts the capped
tmpfs of a *shape* (see :data:`Shape`) in a user and mount namespace of its own.

The pool keeps spares for the shapes of the last ``SHAPES`` kinds of prepared spawns
into no cgroup (a host mixing sandboxed extensions with unsandboxed children, or two
tmpfs caps, finds its spare either way), sized per shape by the last burst of its
spawns, at most ``POOL_MAX`` in all. Only an order of exactly a spare's shape is
handed a spare that mounted tmpfs; a spare of shape ``()`` prepared none and takes
any prepared order of its cgroups (it mounts the order's tmpfs after it came).
"""

from __future__ import annotations

# The C half of ``socket`` (see _guardian_main.py's imports).
import _socket as socket
import os
import select
import struct
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from sandbox import _guardian_child as child
else:
    import _guardian_child as child  # from the guardian's directory (see _guardian_main.py)

#: Milliseconds without a spawn order after which spares are parked for the next prepared
#: spawns into no cgroup (a burst of spawns forks each child instead of waiting for one).
SPARE_AFTER_IDLE = 20
#: At most this many spares in no cgroup, of all shapes: per shape as many as the last
#: burst of its spawns took (a host that started ten at once may well do it again: a
#: reload, restarts), at least one.
POOL_MAX = 8
#: Seconds without a spawn order after which the pool goes back to one spare, of the last
#: shape ordered; a shape not ordered for as long loses its spares.
POOL_SHRINK_AFTER = 2.0
#: The pool keeps spares for the tmpfs shapes of this many kinds of spawns, the most
#: recently ordered (sandboxed extensions, unsandboxed children, a second cap).
SHAPES = 3

#: The capped tmpfs a spare mounts before its order: ``(directory, bytes, inodes)`` each.
Shape = tuple[tuple[str, int, int], ...]
#: Which orders a spare can take: the cgroups it joined, and the :data:`Shape` it
#: mounted (none: it mounts what its order says, if anything, after it came).
Key = tuple[tuple[str, ...], Shape]


class Demand:
    """What the prepared spawns into no cgroup of one shape ask of the pool."""

    __slots__ = ("burst", "seen", "want")

    def __init__(self, now: float) -> None:
        #: When the last such spawn was ordered (monotonic seconds).
        self.seen = now
        #: How many spares of this shape to keep parked.
        self.want = 1
        #: Spawns of this shape since the pool was last sized.
        self.burst = 0


class Pool:
    """The guardian's spares (a part of ``Guardian``, which forks and reaps them)."""

    #: The guardian's pid, when it last got a spawn order, and whether a request waits.
    pid: int
    asked: float
    waiting: select.poll

    def __init__(self) -> None:
        #: Spare children by what they prepared (:data:`Key`): pid and the socket of their
        #: order, oldest first (one per cgroup set the host parks in; a pool for no cgroup).
        self.spares: dict[Key, list[tuple[int, socket.socket]]] = {}
        #: Their pids.
        self.spare_set: set[int] = set()
        #: Spares let go (they exit), until reaped: ours still, not orphans.
        self.released: set[int] = set()
        #: The shapes the pool keeps spares for, the most recently ordered last.
        self.shapes: dict[Shape, Demand] = {(): Demand(time.monotonic())}

    def tend_pool(self) -> int:
        """Park or release one spare in no cgroup, as the demand says, while the host is
        quiet; returns the poll's timeout (ms) until the next step (-1: none due).

        Spares are forked only once no spawn was ordered for ``SPARE_AFTER_IDLE``: a
        burst of spawns forks its children back to back and never waits for a spare.
        Each shape's pool is sized by its last burst (at least one), one fork per
        step (a request that comes meanwhile is served first), the last shape ordered
        first, at most ``POOL_MAX`` in all. After ``POOL_SHRINK_AFTER`` without a spawn
        the last shape's pool goes back to one; an older shape not ordered for as
        long is let go with its spares.
        """
        now = time.monotonic()
        quiet = now - self.asked
        latest = next(reversed(self.shapes))
        due = POOL_SHRINK_AFTER + 1.0
        for shape, demand in list(self.shapes.items()):
            if shape != latest:
                if now - demand.seen >= POOL_SHRINK_AFTER:
                    self.forget(shape)
                else:
                    due = min(due, demand.seen + POOL_SHRINK_AFTER - now)
        lacking = [s for s, d in self.shapes.items() if d.burst or len(self.pool(s)) < d.want]
        if lacking:
            if quiet < SPARE_AFTER_IDLE / 1000:
                return int((SPARE_AFTER_IDLE / 1000 - quiet) * 1000) + 1
            if self.waiting.poll(0):
                return 0  # a request came (a starved guardian is not a quiet host)
            parked = sum(len(pool) for key, pool in self.spares.items() if not key[0])
            for shape in reversed(lacking):  # the last ordered first
                demand = self.shapes[shape]
                if demand.burst:
                    demand.want = max(demand.want, min(demand.burst, POOL_MAX))
                    demand.burst = 0
                pool = self.pool(shape)
                if len(pool) < demand.want and parked < POOL_MAX:
                    try:
                        self.fork_spare(((), shape))
                    except OSError:  # no room for more now: the next spawns fork
                        demand.want = len(pool)
                    return 0
        demand, pool = self.shapes[latest], self.pool(latest)
        if len(pool) > 1 or demand.want > 1:
            if quiet < POOL_SHRINK_AFTER:
                due = min(due, POOL_SHRINK_AFTER - quiet)
            else:
                demand.want = 1
                self.release(pool[1:])
                del pool[1:]
        return int(due * 1000) + 1 if due <= POOL_SHRINK_AFTER else -1

    def pool(self, shape: Shape) -> list[tuple[int, socket.socket]]:
        """The spares of ``shape`` in no cgroup (the list itself, empty if none)."""
        return self.spares.get(((), shape)) or []

    def wanted(self, shape: Shape) -> None:
        """A prepared spawn of ``shape`` into no cgroup was ordered: it is the last shape
        now; the oldest beyond ``SHAPES`` is let go."""
        demand = self.shapes.pop(shape, None) or Demand(0.0)
        demand.seen = time.monotonic()
        demand.burst += 1  # the pool is sized by it once no spawn is ordered
        self.shapes[shape] = demand
        while len(self.shapes) > SHAPES:
            self.forget(next(iter(self.shapes)))

    def forget(self, shape: Shape) -> None:
        """Keep no spares of ``shape`` any more."""
        del self.shapes[shape]
        self.release(self.spares.pop(((), shape), []))

    def release(self, spares: list[tuple[int, socket.socket]]) -> None:
        """Let spares go: each exits, and is reaped like any child."""
        for pid, sock in spares:
            sock.close()
            self.spare_set.discard(pid)
            self.released.add(pid)

    def park(self, cgroups: list[str]) -> dict[str, Any]:
        """Fork a spare child into ``cgroups`` now, for a later spawn into them (one)."""
        key: Key = (tuple(cgroups), ())
        if self.spares.get(key):
            return {"pid": self.spares[key][0][0]}
        return {"pid": self.fork_spare(key)}

    def fork_spare(self, key: Key) -> int:
        """Fork one more spare that prepares what ``key`` says; its pid."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            raise
        if pid == 0:
            ours.close()
            try:
                child.spare(theirs, list(key[0]), list(key[1]), self.pid)
            finally:
                os._exit(127)
        theirs.close()
        self.spares.setdefault(key, []).append((pid, ours))
        self.spare_set.add(pid)
        return pid

    def use_spare(
        self, order: dict[str, Any], msg: memoryview, fds: list[int], exec_w: int
    ) -> int | None:
        """Hand a prepared order (``msg``, as the host sent it) to a spare parked in its
        cgroups that prepared its shape or nothing, if one is alive; its pid."""
        if not order.get("prepare"):
            return None  # a spare dies with the guardian: only prepared children may
        cgroups = tuple(order.get("cgroups", ()))
        # With a network list its namespaces are made with the listener's: a spare that
        # made none serves it.
        shape: Shape = () if order.get("egress") else tuple(map(tuple, order.get("tmpfs", ())))
        if not cgroups:
            self.wanted(shape)
        key: Key = (cgroups, shape)
        if not self.spares.get(key):
            key = (cgroups, ())
        pool = self.spares.get(key)
        if not pool:
            return None
        pid, sock = pool.pop(0)
        self.spare_set.discard(pid)
        if not pool:
            del self.spares[key]
        sent = struct.pack(f"{len(fds) + 1}i", *fds, exec_w)
        try:
            sock.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, sent)])
        except OSError:
            return None  # it died (it could not join its cgroups): fork a child instead
        finally:
            sock.close()
        return pid

    def drop_spare(self, pid: int) -> None:
        """Forget a spare that exited before its order (it could not join its cgroups)."""
        self.spare_set.discard(pid)
        for key, pool in list(self.spares.items()):
            for spare, sock in pool:
                if spare == pid:
                    sock.close()
                    pool.remove((spare, sock))
                    if not pool:
                        del self.spares[key]
                    return
