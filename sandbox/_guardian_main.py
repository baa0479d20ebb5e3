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
    from sandbox import _guardian_pool as pool
else:
    # What a child does between fork and exec lives beside this file (standard
    # library only too). ``-I`` leaves this directory off sys.path: it goes last, so
    # that nothing here can shadow the standard library.
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import _guardian_child as child
    import _guardian_pool as pool

#: How long the last clean-up may take before the guardian gives up and exits.
CLEANUP_LIMIT = 10.0


def record(tag: bytes, value: int, step: str = "") -> bytes:
    data = marshal.dumps((tag, value, step))
    return struct.pack("!H", len(data)) + data


#: The records every child gets, made once (see :meth:`Guardian.tell`).
STARTED = record(b"x", 0)
CLEAN = record(b"c", 0)


# --- the guardian ----------------------------------------------------------------------


class Guardian(pool.Pool):
    """The guardian's state: its children, their status pipes and their cgroups, and its
    spares (:class:`_guardian_pool.Pool`)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pid = os.getpid()
        #: pid -> (status pipe write end, cgroups)
        self.children: dict[int, tuple[int, list[str]]] = {}
        #: exec pipe read end -> pid, until the program started or failed to
        self.starting: dict[int, int] = {}
        super().__init__()
        #: The last order as it came, and whether it was rehearsed since the last
        #: spare was forked (see :meth:`rehearse`).
        self.last_order = marshal.dumps({})
        self.rehearsed = True
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
            if timeout and not self.rehearsed:  # once the pool forked its last spare
                self.rehearse()
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
                    self.last_order = bytes(msg)
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
        pid = self.use_spare(order, msg, fds, exec_w)
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

    def fork_spare(self, key: pool.Key) -> int:
        """Fork a spare (see ``Pool.fork_spare``); :meth:`serve` then rehearses."""
        self.rehearsed = False
        return super().fork_spare(key)

    def rehearse(self) -> None:
        """Write now the pages the next spawn order and the next exit report write
        (after forking spares: each fork shares every page again).

        After a fork every page is shared with the spare, which stays parked: the
        first write to a page copies it (5-6 us a page on a virtual machine). A spawn
        order and an exit report each wrote 30-37 pages, on the host's way; most are
        those of decoding an order and reading the children list, copied here at
        once, while nothing waits (16 and 9 are left)."""
        self.rehearsed = True
        self.adopted()
        record(b"s", 0)
        marshal.loads(self.last_order)

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
