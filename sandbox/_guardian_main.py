"""corral's guardian: starts every child corral spawns, and ends them all with the host.

This file is a program, not a module of the package: the host runs it as
``python -I -S _guardian_main.py FD SOFT`` (standard library only, no site packages),
once per host process, with one end of a ``SOCK_SEQPACKET`` socket pair as ``FD``
(see :mod:`sandbox._guardian`, the host's side).

* **Spawning.** Each request is a marshalled order (argv, environment, working
  directory, which descriptors go where, and what to prepare) with the child's
  descriptors attached (``SCM_RIGHTS``). The guardian forks, which is cheap for a
  small single-threaded process, and the child prepares itself and executes the
  program (its side is ``_guardian_child.py``, beside this file): new session,
  descriptors in place, ``PR_SET_PDEATHSIG`` (it dies if the guardian does), child
  subreaper (daemons of the extension stay its descendants), cgroup membership,
  rlimits, and inode-capped tmpfs mounts in a user and mount namespace of its own
  (see :mod:`sandbox._bwrap`), and for a network list a network namespace of its
  own, with the egress proxy's listener in it, handed to the host before ``exec``.
  The reply is the pid, the read end of a *status pipe* (the guardian writes there
  whether the program started, or why not, and once it reaped the child its wait
  status) and, where the kernel has them, a pidfd of the child (readable at its exit).
* **Guarding.** The guardian is a child subreaper itself, so every process the
  children leave behind (a double-forked daemon in a new session, with a clean
  environment) stays a descendant of it. When the host goes away, however it
  goes (its end of the socket closes when the process dies, even by SIGKILL),
  the guardian SIGKILLs every descendant and every cgroup it placed a child in,
  reaps them, removes those cgroups and exits. Nothing corral started outlives it.

Records on a status pipe: ``(b"x", 0, "")`` the program is running; ``(b"e", errno,
step)`` it could not be started (``step``: ``"exec"``, ``"chdir"``, ``"cgroup"``);
``(b"s", wait_status, "")`` it exited; ``(b"c", 0, "")`` right after: it left no
process behind (the guardian had adopted no orphan when it reaped it; no such
record: it may have). Each record is marshalled, after a 2-byte length.
"""

from __future__ import annotations

# The C halves of ``socket`` and ``signal``: the Python halves import ``enum`` (and
# ``typing``, ``contextlib``), which would double the guardian's start-up, and the
# host's first spawn waits for that.
import _signal as signal  # type: ignore[import-not-found]
import _socket as socket
import errno
import fcntl
import marshal
import mmap
import os
import resource
import select
import struct
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from sandbox import _guardian_child as child
else:
    # What a child does between fork and exec lives beside this file (standard
    # library only too). ``-I`` leaves this directory off sys.path: it goes last, so
    # that nothing here can shadow the standard library.
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import _guardian_child as child

#: How long the last clean-up may take before the guardian gives up and exits.
CLEANUP_LIMIT = 10.0
#: Milliseconds without a spawn order after which spares are parked for the next prepared
#: spawns into no cgroup (a burst of spawns forks each child instead of waiting for one).
SPARE_AFTER_IDLE = 20
#: At most this many spares in no cgroup: as many as the last burst of such spawns took
#: (a host that started ten at once may well do it again: a reload, restarts), at least one.
POOL_MAX = 8
#: Seconds without a spawn order after which the pool goes back to one spare.
POOL_SHRINK_AFTER = 2.0

#: Which orders a spare can take: the cgroups it joined, and the capped tmpfs it mounted
#: in a user and mount namespace of its own before its order (none: it mounts what
#: its order says, if anything, after it came).
Key = tuple[tuple[str, ...], tuple[tuple[str, int, int], ...]]


def record(tag: bytes, value: int, step: str = "") -> bytes:
    data = marshal.dumps((tag, value, step))
    return struct.pack("!H", len(data)) + data


#: The records every child gets, made once (see :meth:`Guardian.tell`).
STARTED = record(b"x", 0)
CLEAN = record(b"c", 0)


# --- the guardian ----------------------------------------------------------------------


class Guardian:
    """The guardian's state: its children, their status pipes and their cgroups."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pid = os.getpid()
        #: pid -> (status pipe write end, cgroups)
        self.children: dict[int, tuple[int, list[str]]] = {}
        #: exec pipe read end -> pid, until the program started or failed to
        self.starting: dict[int, int] = {}
        #: Spare children by what they prepared (:data:`Key`): pid and the socket of their
        #: order, oldest first (one per cgroup set the host parks in; a pool for no cgroup).
        self.spares: dict[Key, list[tuple[int, socket.socket]]] = {}
        #: The tmpfs of the last prepared spawn into no cgroup: what the pool's spares
        #: mount before their order (see :meth:`tend_pool`).
        self.shape: tuple[tuple[str, int, int], ...] = ()
        #: The tmpfs the pool's spares mounted.
        self.parked: tuple[tuple[str, int, int], ...] = ()
        #: Their pids.
        self.spare_set: set[int] = set()
        #: How many spares in no cgroup to keep parked (see :meth:`tend_pool`).
        self.pool = 1
        #: Prepared spawns into no cgroup since the pool was last sized.
        self.burst = 0
        #: Spares let go (they exit), until reaped: ours still, not orphans.
        self.released: set[int] = set()
        #: When the last request came (monotonic seconds).
        self.asked = time.monotonic()
        self.poller = select.poll()
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        child.catch_signals(self.pid)  # SIGCHLD, SIGTERM (see woken), SIGPIPE, ...
        self.poller.register(sock.fileno(), select.POLLIN)
        self.poller.register(self.wake_r, select.POLLIN)
        #: Where requests are received: one buffer for all (no allocation of a megabyte
        #: per request), whose pages only a request writes, and not shared with children
        #: (none reads it; a page of it shared would be copied on the next request).
        self.buffer = mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        with child.suppress(AttributeError, OSError):
            self.buffer.madvise(mmap.MADV_DONTFORK)
        self.view = memoryview(self.buffer)
        self.ancillary = socket.CMSG_SPACE(child.MAX_FDS * 4)
        #: Whether a request waits (see :meth:`tend_pool`).
        self.waiting = select.poll()
        self.waiting.register(sock.fileno(), select.POLLIN)

    def serve(self) -> None:
        while True:
            timeout = self.tend_pool()
            try:
                events = self.poller.poll(timeout)
            except InterruptedError:
                continue
            for fd, _ in events:
                if fd == self.sock.fileno():
                    if not self.request():
                        return
                elif fd == self.wake_r:
                    if self.woken():
                        return
                elif fd in self.starting:
                    self.started(fd)
            self.reap()

    def tend_pool(self) -> int:
        """Park or release one spare in no cgroup, as the demand says, while the host is
        quiet; returns the poll's timeout (ms) until the next step (-1: none due).

        Spares are forked only once no spawn was ordered for ``SPARE_AFTER_IDLE``: a
        burst of spawns forks its children back to back and never waits for a spare.
        The pool is sized by the last burst (at least one, at most ``POOL_MAX``), one
        fork per step (a request that comes meanwhile is served first), and goes back
        to one after ``POOL_SHRINK_AFTER`` without a spawn.

        The pool's spares mount the capped tmpfs of the last such spawn before their
        order (its namespaces cost a sandboxed spawn about 0.4 ms): a spawn with other
        caps (or none) forks its child. Spares made for other caps are let go.
        """
        if self.shape != self.parked:
            self.release(self.spares.pop(((), self.parked), []))
            self.parked = self.shape
        pool = self.spares.get(((), self.shape), [])
        quiet = time.monotonic() - self.asked
        if len(pool) < self.pool or self.burst:
            if quiet < SPARE_AFTER_IDLE / 1000:
                return int((SPARE_AFTER_IDLE / 1000 - quiet) * 1000) + 1
            if self.waiting.poll(0):
                return 0  # a request came (a starved guardian is not a quiet host)
            if self.burst:
                self.pool = max(self.pool, min(self.burst, POOL_MAX))
                self.burst = 0
            if len(pool) < self.pool:
                try:
                    self.fork_spare(((), self.shape))
                except OSError:  # no room for more now: the next spawns fork
                    self.pool = len(pool)
                return 0
        if len(pool) > 1 or self.pool > 1:
            if quiet < POOL_SHRINK_AFTER:
                return int((POOL_SHRINK_AFTER - quiet) * 1000) + 1
            self.pool = 1
            self.release(pool[1:])
            del pool[1:]
        return -1

    def release(self, spares: list[tuple[int, socket.socket]]) -> None:
        """Let spares go: each exits, and is reaped like any child."""
        for pid, sock in spares:
            sock.close()
            self.spare_set.discard(pid)
            self.released.add(pid)

    def woken(self) -> bool:
        """Drain the signal wake-up pipe; True on SIGTERM (end everything, like EOF)."""
        try:
            signals = os.read(self.wake_r, 512)
        except BlockingIOError:
            return False
        return signal.SIGTERM in signals

    def request(self) -> bool:
        """Handle one request; False when the host is gone."""
        try:
            size, ancdata, _, _ = self.sock.recvmsg_into([self.buffer], self.ancillary)
        except (ConnectionError, OSError):
            return False
        if not size:
            return False
        msg = self.view[:size]
        fds = child.received(ancdata)
        reply: dict[str, Any] = {}
        give: list[int] = []
        try:
            order = marshal.loads(msg)
            if order.get("op") == "sweep":
                reply, give = self.sweep()
            elif order.get("op") == "spares":
                reply = {"pids": list(self.spare_set)}
            else:  # a spawn (or a park) is what keeps the host busy: a query is not
                self.asked = time.monotonic()
                if order.get("op") == "park":
                    reply = self.park(order["cgroups"])
                else:
                    reply, give = self.spawn(order, fds, msg)
        except OSError as exc:
            reply = {"errno": exc.errno or errno.EIO}
        except Exception as exc:  # a bad order must not end the guardian
            reply = {"errno": errno.EINVAL, "detail": repr(exc)}
        finally:
            for fd in fds:
                os.close(fd)
        try:
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(give)}i", *give))]
            self.sock.sendmsg([marshal.dumps(reply)], rights if give else [])
        except OSError:
            return False
        finally:
            for fd in give:
                os.close(fd)
        return True

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

    def _use_spare(
        self, order: dict[str, Any], msg: memoryview, fds: list[int], exec_w: int
    ) -> int | None:
        """Hand a prepared order (``msg``, as the host sent it) to the spare parked in its
        cgroups, if one is alive; its pid."""
        if not order.get("prepare"):
            return None  # a spare dies with the guardian: only prepared children may
        cgroups = tuple(order.get("cgroups", ()))
        key: Key = (cgroups, ())
        if not order.get("egress"):  # (its namespaces are made with the listener's)
            shape = tuple(map(tuple, order.get("tmpfs", ())))
            if not cgroups:
                self.shape = shape  # the next spares' (see tend_pool)
            if self.spares.get((cgroups, shape)):
                key = (cgroups, shape)
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

    def spawn(
        self, order: dict[str, Any], fds: list[int], msg: memoryview
    ) -> tuple[dict[str, Any], list[int]]:
        status_r, status_w = os.pipe()
        try:
            exec_r, exec_w = os.pipe()
        except OSError:
            os.close(status_r)
            os.close(status_w)
            raise
        pid = self._use_spare(order, msg, fds, exec_w)
        if pid is None:
            try:
                pid = os.fork()
            except OSError:
                for fd in (status_r, status_w, exec_r, exec_w):
                    os.close(fd)
                raise
            if pid == 0:
                child.run_child(order, fds, exec_w, self.pid)
        os.close(exec_w)
        self.children[pid] = (status_w, list(order.get("cgroups", ())))
        self.starting[exec_r] = pid
        self.poller.register(exec_r, select.POLLIN)
        if order.get("prepare") and not order.get("cgroups"):
            self.burst += 1  # the pool is sized by it once no spawn is ordered
        try:  # (the pidfd's process is this child: only we reap it)
            return {"pid": pid}, [status_r, os.pidfd_open(pid)]
        except (AttributeError, OSError):  # no pidfds here
            return {"pid": pid}, [status_r]

    def started(self, exec_r: int) -> None:
        """The exec pipe closed (the program runs) or says why it did not start."""
        pid = self.starting.pop(exec_r)
        self.poller.unregister(exec_r)
        try:
            data = os.read(exec_r, 4096)
        except OSError:
            data = b""
        os.close(exec_r)
        entry = self.children.get(pid)
        if entry is None:
            return
        if data:
            try:
                err, step = marshal.loads(data)
            except Exception:
                err, step = errno.EIO, "setup"
            self.tell(entry[0], record(b"e", err, step))
        else:
            self.tell(entry[0], STARTED)

    def tell(self, fd: int, data: bytes) -> None:
        """Write one record to a status pipe, with as little Python as it takes (each
        page touched after a fork is copied: 2-6 us a page on a virtual machine)."""
        try:
            os.write(fd, data)
        except OSError:  # the host closed its end: it no longer cares
            return

    def reap(self) -> None:
        """Reap every child that exited, ours or adopted; report ours."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for exec_r, owner in list(self.starting.items()):
                if owner == pid:
                    self.started(exec_r)  # its exec pipe is closed by now
            self.released.discard(pid)
            entry = self.children.pop(pid, None)
            if entry is not None:
                # With its exit status, whether it left anything behind, in one write: the
                # host wakes once (a wake-up is what a loaded machine makes expensive).
                # Its orphans are ours from the moment it exited (the kernel reparents
                # them before it can be reaped): with no child of ours but those we
                # forked, nothing of it lives on and the host need not sweep.
                clean = CLEAN if self.adopted() == 0 else b""
                self.tell(entry[0], record(b"s", status) + clean)
                os.close(entry[0])
            if pid in self.spare_set:  # a spare that could not join its cgroups
                self.drop_spare(pid)

    def drop_spare(self, pid: int) -> None:
        self.spare_set.discard(pid)
        for key, pool in list(self.spares.items()):
            for spare, sock in pool:
                if spare == pid:
                    sock.close()
                    pool.remove((spare, sock))
                    if not pool:
                        del self.spares[key]
                    return

    def adopted(self) -> int | None:
        """How many of our children we did not fork (orphans we adopted); None where
        ``/proc`` cannot tell. One small read, on every exit's way to the host: the
        guardian has one thread, whose ``children`` list is all of them."""
        data = b""
        try:
            fd = os.open(f"/proc/{self.pid}/task/{self.pid}/children", os.O_RDONLY)
            try:
                while chunk := os.read(fd, 65536):
                    data += chunk
            finally:
                os.close(fd)
        except OSError:
            return None
        count = 0
        for p in data.split():
            pid = int(p)
            if pid not in self.children and pid not in self.spare_set and pid not in self.released:
                count += 1
        return count

    def ours(self) -> set[int]:
        """The processes we forked that live: children and parked spares."""
        return {*self.children, *self.spare_set, *self.released}

    def sweep(self) -> tuple[dict[str, Any], list[int]]:
        """SIGKILL every orphan we adopted (and its descendants); pidfds to wait on.

        An orphan is a process whose parent died: what a child that exited left
        behind (its group, a daemon in a session of its own, with a clean
        environment or not). Nobody supervises it any more, so it is a leftover.
        """
        doomed = self.orphans(self.ours())
        pids: list[int] = []
        fds: list[int] = []
        for pid in doomed:
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue  # gone already
            with child.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            if len(fds) < child.MAX_FDS:
                pids.append(pid)
                fds.append(fd)
            else:
                os.close(fd)  # killed all the same; the host waits for the first ones
        return {"pids": pids}, fds

    def orphans(self, ours: set[int]) -> list[int]:
        """Our children not in ``ours``, and their descendants (one snapshot).

        Read from each process's ``children`` list in ``/proc`` (a handful of
        files); where the kernel has no such lists, from one pass over ``/proc``.
        """
        kids = _children(self.pid)
        doomed = [p for p in (kids or ()) if p not in ours]
        for pid in doomed:
            more = _children(pid)
            if more is None:
                kids = None
                break
            doomed += more
        if kids is None:
            tree = self.tree()
            doomed = [p for p in tree.get(self.pid, ()) if p not in ours]
            for pid in doomed:
                doomed += tree.get(pid, ())
        return doomed

    def tree(self) -> dict[int, list[int]]:
        """Parent pid -> child pids, of every process (one pass over /proc)."""
        parents: dict[int, list[int]] = {}
        try:
            names = os.listdir("/proc")
        except OSError:  # no procfs (macOS): the guardian's own children only
            return {self.pid: list(self.children)}
        for name in names:
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            parents.setdefault(int(fields[1]), []).append(int(name))
        return parents

    def descendants(self) -> list[int]:
        """Every live descendant of the guardian (children first)."""
        parents = self.tree()
        found, todo = [], [self.pid]
        while todo:
            for child in parents.get(todo.pop(), ()):
                found.append(child)
                todo.append(child)
        return found

    def end_all(self) -> None:
        """The host is gone: kill everything we started and what it started; reap."""
        cgroups = [c for _, groups in self.children.values() for c in groups]
        cgroups += [c for key in self.spares for c in key[0]]
        waiter = select.poll()
        waiter.register(self.wake_r, select.POLLIN)
        deadline = time.monotonic() + CLEANUP_LIMIT
        while time.monotonic() < deadline:
            doomed = self.descendants()
            for pid in self.children:  # their groups too, where /proc cannot tell
                with child.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            for path in cgroups:
                doomed += _cgroup_kill(path)
            for pid in doomed:
                with child.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self.reap()
            if not doomed:
                break
            # Killed processes take a moment to exit: SIGCHLD (or the timeout) wakes us.
            with child.suppress(InterruptedError):
                waiter.poll(10)
            self.woken()
        for path in cgroups:
            with child.suppress(OSError):
                os.rmdir(path)


def _children(pid: int) -> list[int] | None:
    """The children of ``pid`` (of all its threads); None where ``/proc`` cannot tell."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []  # it is gone
    except OSError:
        return None
    found: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended
            return None  # a kernel without CONFIG_PROC_CHILDREN
        except OSError:
            return None
    return found


def _cgroup_kill(path: str) -> list[int]:
    """Processes left in a cgroup (after asking v2 to kill them all at once)."""
    with child.suppress(OSError), open(os.path.join(path, "cgroup.kill"), "w") as f:
        f.write("1")
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def main() -> None:
    fd = int(sys.argv[1])
    if len(sys.argv) > 2:  # the host's soft limit of descriptors before it raised its own
        soft = int(sys.argv[2])
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        with child.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard), hard))
    # Below the soft limit, with every other descriptor of ours (a child closes all
    # of them in one close_range: see _guardian_child._place_fds).
    low = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    sock = socket.socket(fileno=low)
    child.fd_end = child.find_fd_end()  # below the soft limit just set
    child.bind_calls(child.fd_end)
    if child.prctl is not None:
        child.prctl(child.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    guardian = Guardian(sock)
    try:
        guardian.serve()
    finally:
        sock.close()
        guardian.end_all()


if __name__ == "__main__":
    main()
