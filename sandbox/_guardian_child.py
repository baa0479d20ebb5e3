"""The guardian's child: everything between the guardian's ``fork`` and ``exec``.

Part of the guardian program (``_guardian_main.py``), not a module of the package:
standard library only, imported by the guardian from its own directory. A child
(or a spare, forked ahead of time and parked in its cgroups) carries out one
*order*, plain data built by :func:`sandbox._preexec.child_order`: a new session,
its descriptors in place and every other one closed, ``PR_SET_PDEATHSIG`` and
child subreaper for a prepared launch, cgroup membership, rlimits, a user and
mount namespace with inode-capped tmpfs mounts, and for a network list a network
namespace holding the egress proxy's listener, sent to the host before ``exec``.
It reports on the *exec pipe*: nothing (it closed at ``exec``: the program runs)
or ``(errno, step)``.
"""

from __future__ import annotations

# The C halves of ``socket`` and ``signal`` (see _guardian_main.py's imports).
import _signal as signal  # type: ignore[import-not-found]
import _socket as socket
import ctypes
import errno
import fcntl
import marshal
import os
import resource
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 0x4000
_MS_SLAVE = 1 << 19
#: A tmpfs entry of an order with this size and inode count is a ``/dev`` to build
#: (``sandbox._plan.DEV``).
DEV = 0
#: What bwrap's ``--dev`` makes: its device nodes (bound from the host's), links, and
#: a new ``devpts`` instance (with ``mode=620`` and no ``gid``: there may be no tty
#: group in the namespace).
_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
_DEV_LINKS = (
    ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"),
    ("fd", "/proc/self/fd"), ("core", "/proc/kcore"), ("ptmx", "pts/ptmx"),
)  # fmt: skip
_DEVPTS = b"newinstance,ptmxmode=0666,mode=620"
#: Exit status of a child whose preparation failed (a message went to its stderr).
SETUP_FAILED_EXIT = 125
#: Descriptors one message may carry (SCM_RIGHTS takes at most 253).
MAX_FDS = 250
#: Above any descriptor number (``os.closerange`` takes a C int).
_FD_END = (1 << 31) - 1

_libc = ctypes.CDLL(None, use_errno=True)
prctl = getattr(_libc, "prctl", None)
_unshare = getattr(_libc, "unshare", None)
_mount = getattr(_libc, "mount", None)
if prctl is not None:
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
if _mount is not None:
    _mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]


class suppress:
    """``contextlib.suppress``, without importing ``contextlib`` (see the imports)."""

    def __init__(self, *kinds: type[BaseException]) -> None:
        self.kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is not None and issubclass(kind, self.kinds)


class _SetupFailed(Exception):
    def __init__(self, step: str, err: int) -> None:
        super().__init__(step, err)
        self.step = step
        self.errno = err


def _place_fds(fds: list[int], targets: list[int], keep: list[int]) -> None:
    """Put received descriptor ``fds[i]`` at number ``targets[i]``; close all others."""
    if set(fds).isdisjoint(targets):
        # The common case (what the guardian received lies above the child's numbers):
        # no target is a source still to be placed, so each goes straight to its number.
        for fd, target in zip(fds, targets, strict=True):
            os.dup2(fd, target, inheritable=True)
    else:
        base = max([*targets, 2]) + 1
        temps = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, base) for fd in fds]
        for temp, target in zip(temps, targets, strict=True):
            os.dup2(temp, target, inheritable=True)
    # Every other descriptor, in one close_range(2) per gap (no listing of /proc/self/fd,
    # no close per descriptor: the guardian holds a few per child it runs).
    low = 0
    for fd in sorted({*targets, *keep}):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, fd_end)


def find_fd_end() -> int:
    """Above every descriptor the guardian has: all of them are below its soft limit
    (it moves the host's socket down; see _guardian_main.main), and so are a child's."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if 0 < soft < _FD_END else _FD_END


#: See :func:`find_fd_end`; the guardian sets it again once it has its own soft limit.
fd_end = find_fd_end()


def _write_file(path: str, data: bytes, step: str) -> None:
    """Write ``data`` to ``path`` (a /proc file), failing as ``step``."""
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _SetupFailed(step, exc.errno or errno.EIO) from None


def _namespaces(mounts: list[tuple[str, int, int]], egress: list[int] | None) -> None:
    """A user namespace of our own, mapping only our ids, with (``mounts``) a mount
    namespace holding inode-capped tmpfs and (``egress``) a network namespace with
    the egress proxy's listener; bwrap, run inside, uses both."""
    uid, gid = os.getuid(), os.getgid()
    if _unshare is None or _mount is None:
        raise _SetupFailed("unshare", errno.ENOSYS)
    flags = _CLONE_NEWUSER | (_CLONE_NEWNS if mounts else 0) | (_CLONE_NEWNET if egress else 0)
    if _unshare(flags) != 0:
        raise _SetupFailed("unshare", ctypes.get_errno())
    for path, data in (
        ("/proc/self/setgroups", b"deny"),
        ("/proc/self/uid_map", f"{uid} {uid} 1".encode()),
        ("/proc/self/gid_map", f"{gid} {gid} 1".encode()),
    ):
        _write_file(path, data, "userns-map")
    if mounts and uid == 0:
        # Only bwrap's (the extension's) user namespace may be made in this one: bwrap's
        # --disable-userns without the second nested namespace it costs a root host
        # (~0.25 ms a spawn; bwrap makes that one anyway for any other user, to mount
        # /dev/pts as root first); bwrap checks it (--assert-userns-disabled, see
        # sandbox._bwrap.BwrapSandbox.namespace_args).
        _write_file("/proc/sys/user/max_user_namespaces", b"1", "max-userns")
    # Keep our mounts to ourselves whatever the host's propagation is.
    if mounts and _mount(None, b"/", None, _MS_REC | _MS_SLAVE, None) != 0:
        raise _SetupFailed("make-rslave", ctypes.get_errno())
    for target, size, inodes in mounts:
        if size == DEV and inodes == DEV:
            _build_dev(target)
            continue
        options = f"size={size},nr_inodes={inodes},mode=1777".encode()
        _mount_or_fail(b"tmpfs", target, b"tmpfs", _MS_NOSUID | _MS_NODEV, options, "mount")
    if egress:
        _listen(*egress)


def _mount_or_fail(
    source: bytes | None, target: str, kind: bytes | None, flags: int, data: bytes | None, step: str
) -> None:
    assert _mount is not None  # (see _namespaces)
    if _mount(source, os.fsencode(target), kind, flags, data) != 0:
        raise _SetupFailed(step, ctypes.get_errno())


def _build_dev(target: str) -> None:
    """Make over ``target`` the ``/dev`` bwrap's ``--dev`` would, read-only.

    A small tmpfs (no device, no set-user-ID, no program) holding the host's six
    device nodes, each bound over an empty file, the links, an empty ``shm`` (the
    order's next entry mounts the capped tmpfs there) and a new ``devpts``; then
    remounted read-only. The mounts are this namespace's: bwrap's namespace, made
    inside it, cannot undo them (they are locked), and the host's ``/dev`` is never
    shown. bwrap spends a bind and a read of the whole mount table on each node,
    and another on the read-only remount; here each is one system call.
    """
    step = "dev"
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    _mount_or_fail(b"tmpfs", target, b"tmpfs", flags, b"size=65536,nr_inodes=64,mode=0755", step)
    try:
        for name in _DEV_NODES:
            node = os.path.join(target, name)
            os.close(os.open(node, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444))
            _mount_or_fail(b"/dev/" + name.encode(), node, None, _MS_BIND, None, step)
        for name, points_to in _DEV_LINKS:
            os.symlink(points_to, os.path.join(target, name))
        for name in ("shm", "pts"):
            os.mkdir(os.path.join(target, name), 0o755)
    except OSError as exc:
        raise _SetupFailed(step, exc.errno or errno.EIO) from None
    pts = os.path.join(target, "pts")
    _mount_or_fail(b"devpts", pts, b"devpts", _MS_NOSUID | _MS_NOEXEC, _DEVPTS, step)
    _mount_or_fail(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags, None, step)


def _listen(reply: int, port: int) -> None:
    """Bring up the new namespace's loopback, listen on ``127.0.0.1:port`` there, and
    send the listening socket to the host over ``reply`` (then close both).

    The host accepts the child's connections on it directly: no process of ours
    stays in the namespace. No ``SO_REUSEPORT``: nothing else can bind the port.
    """
    try:
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            # struct ifreq: the name, then the flags (a short) of the interface.
            got = fcntl.ioctl(probe.fileno(), _SIOCGIFFLAGS, struct.pack("16sH14x", b"lo", 0))
            (flags,) = struct.unpack_from("16xH", got)
            up = struct.pack("16sH14x", b"lo", flags | _IFF_UP)
            fcntl.ioctl(probe.fileno(), _SIOCSIFFLAGS, up)
        finally:
            probe.close()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind(("127.0.0.1", port))
            listener.listen(128)
            rights = struct.pack("i", listener.fileno())
            sent = socket.socket(fileno=reply)
            try:
                sent.sendmsg([b"L"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
            finally:
                sent.close()
        finally:
            listener.close()
    except OSError as exc:
        raise _SetupFailed("egress", exc.errno or errno.EIO) from None


def _execute(argv: list[str], env: dict[str, str]) -> None:
    """``execve`` the program, looked up on the order's PATH like ``execvpe``; on
    failure, the most telling error."""
    program = argv[0]
    if "/" in program:
        os.execve(program, argv, env)
    found = None
    for directory in env.get("PATH", os.defpath).split(os.pathsep):
        try:
            os.execve(os.path.join(directory or ".", program), argv, env)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR) and found is None:
                found = exc
    raise found or FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def _join(cgroups: list[str]) -> None:
    """Move this process into ``cgroups`` (a kernel RCU grace period, 10-20 ms, unless
    another process joined one just before)."""
    for path in cgroups:
        try:
            # "0" means "the writing process" in both cgroup versions.
            fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        except OSError as exc:
            raise _SetupFailed("cgroup", exc.errno or errno.EIO) from None


#: The signals the guardian catches (it ignores none): ``exec`` resets them to their
#: default (see :func:`catch_signals`), and a child does first (:func:`default_signals`).
CAUGHT = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGINT, signal.SIGTERM)


def catch_signals(guardian: int) -> None:
    """The guardian's signal handling, set once: every signal it would ignore or act on
    is caught (it wakes the guardian through the wake-up descriptor, which reads it),
    none is ignored, none blocked. A caught signal goes back to its default at
    ``exec`` (an ignored one would stay ignored), so a child carries no signal state
    of the guardian's into its program without a call of its own; one that comes
    before ``exec`` does to the child what it would do by default."""

    def caught(signum: int, _frame: object) -> None:
        if os.getpid() != guardian:  # a child, before exec: what the default does
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    for sig in CAUGHT:
        signal.signal(sig, caught)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def default_signals() -> None:
    """In a child, first thing: the default disposition of every signal the guardian
    catches. Its handler runs only between two steps of Python, and the last step,
    ``execve`` converting its arguments, would lose a signal that came during it (the
    stop's SIGTERM of a child just starting); the kernel's default loses none. One
    caught before this runs here (``signal.signal`` runs what is pending first)."""
    signal.set_wakeup_fd(-1)  # nor may one write the guardian's wake-up byte
    for sig in CAUGHT:
        signal.signal(sig, signal.SIG_DFL)


def bind_calls(fd_end: int) -> None:
    """Call once, in the guardian, each C library function a child calls between fork and
    exec, to no effect: the dynamic linker binds a function on its first call, which
    in every child would be a symbol lookup and a page of the guardian's copied."""
    with suppress(OSError):
        os.setsid()  # EPERM: the guardian leads its session already
    with suppress(OSError):
        os.execve("/", ["/"], {})  # EACCES: a directory
    os.dup2(2, 2, inheritable=True)  # nothing to do
    os.closerange(fd_end - 1, fd_end)  # none open there yet (see _guardian_main.main)
    os.chdir(".")
    os.getppid()
    for which in (resource.RLIMIT_CORE, resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE):
        resource.setrlimit(which, resource.getrlimit(which))


def spare(
    sock: socket.socket, cgroups: list[str], tmpfs: list[tuple[str, int, int]], guardian: int
) -> None:
    """A child parked in its cgroups before anyone needs it, then given its order.

    Joining a cgroup costs a grace period; a spare pays it while nothing waits
    (see ``Pool.park`` in _guardian_pool.py), so the spawn that takes it starts at
    once. So does all of a prepared launch that does not depend on its order (spares
    serve only those): nothing of the guardian's open, death with the guardian, child
    subreaper, and (``tmpfs``: the guardian hands it only orders with exactly these)
    the capped tmpfs in a user and mount namespace of its own. Its order then places
    its descriptors, sets its session, working directory and limits, and executes.
    """
    default_signals()
    _place_fds([], [], [0, 1, 2, sock.fileno()])  # nothing of the guardian's while it waits
    try:
        _die_with(guardian)
        _join(cgroups)
    except _SetupFailed:
        os._exit(SETUP_FAILED_EXIT)
    failed = None
    if tmpfs:
        try:
            _namespaces(tmpfs, None)
        except _SetupFailed as exc:
            failed = exc  # said on the order's stderr, as a child would
    msg, ancdata, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(MAX_FDS * 4))
    if not msg:
        os._exit(0)  # the guardian let it go
    fds = received(ancdata)
    order = marshal.loads(msg)
    order["cgroups"] = []  # joined already
    if tmpfs:
        order["tmpfs"] = []  # mounted already (or failed to be)
    # Received descriptors are inheritable: the exec pipe must close at exec.
    os.set_inheritable(fds[-1], False)
    run_child(order, fds[:-1], fds[-1], guardian, ready=True, failed=failed)


def _die_with(guardian: int) -> None:
    """``PR_SET_PDEATHSIG`` (SIGKILL when the guardian dies) and child subreaper: orphans
    of the program's own children stay its descendants while it runs (the supervisor
    finds daemons that cleared their environment that way)."""
    if prctl is None:
        return
    if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise _SetupFailed("pdeathsig", ctypes.get_errno())
    if os.getppid() != guardian:  # the guardian died before the line above
        os._exit(SETUP_FAILED_EXIT)
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _child(
    order: dict[str, Any],
    fds: list[int],
    exec_w: int,
    guardian: int,
    ready: bool,
    failed: _SetupFailed | None,
) -> None:
    """Everything between fork and exec (the guardian is single-threaded: any Python is safe).

    Every step costs a copy of the pages its Python touches (shared with the guardian
    until ``exec``) and their teardown at ``exec``: what does not depend on the order
    is done once in the guardian (:func:`catch_signals`) or in a spare before its order.
    """
    if not ready:  # (a spare did when it was forked)
        default_signals()
    if order.get("session", True):
        os.setsid()
    _place_fds(fds, order["targets"], [exec_w])
    try:
        os.chdir(order["cwd"])
    except OSError as exc:
        raise _SetupFailed("chdir", exc.errno or errno.EIO) from None
    if order.get("prepare") and not ready:  # a spare did before its order came
        _die_with(guardian)
    _join(order.get("cgroups", ()))
    for which, soft, hard in order.get("rlimits", ()):
        resource.setrlimit(which, (soft, hard))
    if failed is None and (order.get("tmpfs") or order.get("egress")):
        try:
            _namespaces(order.get("tmpfs", ()), order.get("egress"))
        except _SetupFailed as exc:
            failed = exc
    if failed is not None:  # (here or in the spare that took the order)
        message = "corral sandbox: cannot prepare the sandbox's namespaces (%s: errno %d)\n"
        os.write(2, (message % (failed.step, failed.errno)).encode())
        os._exit(SETUP_FAILED_EXIT)
    try:
        _execute(order["argv"], order["env"])
    except OSError as exc:
        raise _SetupFailed("exec", exc.errno or errno.EIO) from None


def run_child(
    order: dict[str, Any],
    fds: list[int],
    exec_w: int,
    guardian: int,
    *,
    ready: bool = False,
    failed: _SetupFailed | None = None,
) -> None:
    """Carry out ``order`` and execute; never returns. ``ready``: a spare, prepared
    already (``failed``: its namespaces could not be made)."""
    if exec_w in order["targets"]:
        # A descriptor placed at exec_w's number would close the exec pipe: the guardian
        # would report the program started before it even ran (a spare's exec_w is small).
        moved = fcntl.fcntl(exec_w, fcntl.F_DUPFD_CLOEXEC, max(order["targets"]) + 1)
        os.close(exec_w)
        exec_w = moved
    try:
        _child(order, fds, exec_w, guardian, ready, failed)
    except _SetupFailed as exc:
        os.write(exec_w, marshal.dumps((exc.errno, exc.step)))
    except BaseException:  # a bug here: report it as a failure to start
        os.write(exec_w, marshal.dumps((errno.EIO, "setup")))
    os._exit(127)


def received(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4])
    return fds
