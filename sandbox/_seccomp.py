"""A small seccomp-BPF filter for the bwrap backend, assembled in Python.

bwrap installs a classic-BPF program read from ``--seccomp FD`` right before it
executes the extension (after ``PR_SET_NO_NEW_PRIVS``). The filter is a deny
list in the spirit of Flatpak's: it keeps everything a Python or Node program
does, and refuses the calls that only an attacker needs:

* ``ioctl(TIOCSTI)`` / ``ioctl(TIOCLINUX)``: push keystrokes into a terminal.
  Only the low 32 bits of the request are compared, as the kernel does: comparing
  64 bits lets ``0x1_0000_5412`` through (Flatpak's CVE-2019-10063);
* tracing and reading other processes (``ptrace``, ``process_vm_*``, ``pidfd_getfd``);
* kernel keyrings, modules, kexec, BPF, perf, userfaultfd, io_uring (a large
  attack surface that also bypasses seccomp for its own operations);
* namespace and mount manipulation (``unshare``, ``setns``, ``mount`` and the new
  mount API, ``clone(CLONE_NEWUSER)``); ``clone3`` answers ``ENOSYS`` because its
  flags live in memory the filter cannot read, and libc then falls back to ``clone``;
* clock, swap, reboot, accounting and quota calls;
* socket families other than what a program needs (``EAFNOSUPPORT``): IPv4, IPv6,
  and netlink only for ``NETLINK_ROUTE`` (``getaddrinfo`` and ``getifaddrs`` use
  it); never ``AF_PACKET``, ``AF_VSOCK`` (the hypervisor), ``AF_ALG`` (the kernel's
  crypto), Bluetooth, CAN and the rest. ``AF_UNIX`` only with network permission:
  a fresh network namespace already hides TCP and abstract sockets, but a unix
  socket *file* in a granted directory is reachable through the filesystem
  (``socketpair(AF_UNIX)`` stays allowed, no other family);
* ``personality`` except the values libc and Python use (``PER_LINUX``,
  ``PER_LINUX32`` and the query): the other flags turn off address-space
  randomisation or map page zero; and on x86-64, ``modify_ldt`` and ``uselib``;
* setting the set-user-ID or set-group-ID bit (``chmod`` and friends, or a mode
  given to ``open``/``mknod`` when creating a file). When the host runs as root,
  files the extension creates are owned by root on the host: a set-user-ID copy
  of a shell in a shared directory would hand root to any local user. ``openat2``
  answers ``ENOSYS`` as its mode lives in memory (libc does not use it).

Any other architecture than the native one (32-bit ``int 0x80`` calls on x86-64,
x32) is refused outright, since its system call numbers differ.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import platform
import struct
import threading

__all__ = ["build_filter", "filter_fd", "native_arch"]

# Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

# seccomp return actions (linux/seccomp.h).
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

# Offsets into struct seccomp_data; arguments are 64-bit, little-endian low word first.
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0_LO = 16
_OFF_ARG1_LO = 24
_OFF_ARG2_LO = 32

_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C
_AF_UNIX = 1
_AF_INET = 2
_AF_INET6 = 10
_AF_NETLINK = 16
_NETLINK_ROUTE = 0
#: personality(2) values allowed: PER_LINUX, PER_LINUX32, and 0xffffffff (query).
_PERSONALITIES = (0, 0x0008, 0xFFFFFFFF)
_CLONE_NEWUSER = 0x10000000
_SETID_BITS = 0o6000  # S_ISUID | S_ISGID
_X32_SYSCALL_BIT = 0x40000000

#: Calls refused with EPERM, by name; numbers per architecture below.
_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "process_madvise",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "mount", "umount2", "pivot_root", "unshare", "setns", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "open_by_handle_at", "name_to_handle_at", "syslog", "acct", "swapon", "swapoff",
    "reboot", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "quotactl", "quotactl_fd", "vhangup", "lookup_dcookie", "modify_ldt", "uselib",
)  # fmt: skip

#: Calls whose mode argument (index) must not carry the set-ID bits.
_MODE_ARG = {
    "chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2, "creat": 1,
    "openat": 3, "mknod": 1, "mknodat": 2,
}  # fmt: skip

#: Per-architecture syscall numbers (checked against the kernel headers when written).
_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,  # AUDIT_ARCH_X86_64
        {
            "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
            "pidfd_getfd": 438, "process_madvise": 440, "kexec_load": 246,
            "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
            "delete_module": 176, "keyctl": 250, "add_key": 248, "request_key": 249,
            "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
            "io_uring_enter": 426, "io_uring_register": 427, "mount": 165, "umount2": 166,
            "pivot_root": 155, "unshare": 272, "setns": 308, "open_tree": 428,
            "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
            "mount_setattr": 442, "open_by_handle_at": 304, "name_to_handle_at": 303,
            "syslog": 103, "acct": 163, "swapon": 167, "swapoff": 168, "reboot": 169,
            "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
            "quotactl": 179, "quotactl_fd": 443, "vhangup": 153, "lookup_dcookie": 212,
            "ioctl": 16, "socket": 41, "clone": 56, "clone3": 435, "openat2": 437,
            "socketpair": 53, "personality": 135, "modify_ldt": 154, "uselib": 134,
            "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "open": 2,
            "creat": 85, "openat": 257, "mknod": 133, "mknodat": 259,
        },
    ),
    "aarch64": (
        0xC00000B7,  # AUDIT_ARCH_AARCH64
        {
            "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
            "pidfd_getfd": 438, "process_madvise": 440, "kexec_load": 104,
            "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
            "delete_module": 106, "keyctl": 219, "add_key": 217, "request_key": 218,
            "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425,
            "io_uring_enter": 426, "io_uring_register": 427, "mount": 40, "umount2": 39,
            "pivot_root": 41, "unshare": 97, "setns": 268, "open_tree": 428,
            "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
            "mount_setattr": 442, "open_by_handle_at": 265, "name_to_handle_at": 264,
            "syslog": 116, "acct": 89, "swapon": 224, "swapoff": 225, "reboot": 142,
            "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
            "quotactl": 60, "quotactl_fd": 443, "vhangup": 58, "lookup_dcookie": 18,
            "ioctl": 29, "socket": 198, "clone": 220, "clone3": 435, "openat2": 437,
            "socketpair": 199, "personality": 92,
            "fchmod": 52, "fchmodat": 53, "fchmodat2": 452, "openat": 56, "mknodat": 33,
        },
    ),
}  # fmt: skip


def native_arch() -> str | None:
    """The architecture name used in :data:`_ARCHES`, or None if we have no table."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return machine if machine in _ARCHES else None


class _Asm:
    """A tiny classic-BPF assembler with forward labels (jumps are 8-bit offsets)."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.code.append((_LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, jt: int | str, jf: int | str) -> None:
        self.code.append((op, jt, jf, k))

    def ret(self, value: int) -> None:
        self.code.append((_RET_K, 0, 0, value))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (op, jt, jf, k) in enumerate(self.code):
            offsets = []
            for target in (jt, jf):
                offset = target if isinstance(target, int) else self.labels[target] - index - 1
                if not 0 <= offset <= 255:
                    raise ValueError(f"BPF jump out of range at {index}")
                offsets.append(offset)
            out += struct.pack("<HBBI", op, offsets[0], offsets[1], k)
        return bytes(out)


#: Calls a leaf of the dispatch tree compares one by one (see :func:`_dispatch`).
_LEAF = 4


def _dispatch(a: _Asm, calls: list[tuple[int, str]]) -> None:
    """Jump to each call's label, by a binary search on its number; allow the rest.

    The kernel runs the filter once per system call number when it installs it (to
    cache the calls it always allows), and then on every call it could not cache:
    a search takes ~7 instructions where a list of comparisons took up to ~70.
    """
    if len(calls) <= _LEAF:
        for nr, label in calls:
            a.jump(_JEQ_K, nr, label, 0)
        a.ret(_RET_ALLOW)
        return
    middle = len(calls) // 2
    upper = f"ge{calls[middle][0]}"
    a.jump(_JGE_K, calls[middle][0], upper, 0)
    _dispatch(a, calls[:middle])
    a.label(upper)
    _dispatch(a, calls[middle:])


@functools.cache
def build_filter(*, network: bool, arch: str | None = None) -> bytes:
    """Assemble the filter as raw ``struct sock_filter`` instructions.

    Args:
        network: the extension may use the network, so ``socket(AF_UNIX)`` is allowed
            (IPv4 and IPv6 sockets are allowed either way: without network they only
            reach the sandbox's own loopback).
        arch: ``"x86_64"`` or ``"aarch64"``; defaults to this machine's.

    Returns:
        The program, in the form bwrap's ``--seccomp`` expects (8 bytes per instruction).

    Raises:
        ValueError: no syscall table for this architecture.
    """
    arch = arch or native_arch()
    if arch is None or arch not in _ARCHES:
        raise ValueError(f"no seccomp syscall table for {platform.machine()}")
    audit_arch, numbers = _ARCHES[arch]
    deny = _RET_ERRNO | errno.EPERM
    a = _Asm()
    a.load(_OFF_ARCH)
    a.jump(_JEQ_K, audit_arch, 0, "kill")
    a.load(_OFF_NR)
    if arch == "x86_64":
        a.jump(_JGE_K, _X32_SYSCALL_BIT, "kill", 0)
    special = {numbers[name]: "deny" for name in _DENIED if name in numbers}
    special[numbers["ioctl"]] = "ioctl"
    special[numbers["clone"]] = "clone"
    special[numbers["clone3"]] = special[numbers["openat2"]] = "enosys"
    for name, index in _MODE_ARG.items():
        if name in numbers:  # aarch64 has no chmod, open, creat or mknod
            special[numbers[name]] = f"mode{index}"
    for name in ("socket", "socketpair", "personality"):
        special[numbers[name]] = name
    _dispatch(a, sorted(special.items()))
    a.label("ioctl")
    a.load(_OFF_ARG1_LO)
    a.jump(_JEQ_K, _TIOCSTI, "deny", 0)
    a.jump(_JEQ_K, _TIOCLINUX, "deny", 0)
    a.ret(_RET_ALLOW)
    a.label("clone")
    a.load(_OFF_ARG0_LO)
    a.jump(_JSET_K, _CLONE_NEWUSER, "deny", 0)
    a.ret(_RET_ALLOW)
    for index in sorted(set(_MODE_ARG.values())):
        a.label(f"mode{index}")
        a.load(_OFF_ARG0_LO + 8 * index)
        a.jump(_JSET_K, _SETID_BITS, "deny", 0)
        a.ret(_RET_ALLOW)
    # Domains and protocols are ints: the kernel reads the low 32 bits only.
    a.label("socket")
    a.load(_OFF_ARG0_LO)
    a.jump(_JEQ_K, _AF_UNIX, "allow" if network else "deny", 0)
    a.jump(_JEQ_K, _AF_INET, "allow", 0)
    a.jump(_JEQ_K, _AF_INET6, "allow", 0)
    a.jump(_JEQ_K, _AF_NETLINK, 0, "nofamily")
    a.load(_OFF_ARG2_LO)
    a.jump(_JEQ_K, _NETLINK_ROUTE, "allow", 0)
    a.ret(_RET_ERRNO | errno.EPROTONOSUPPORT)
    a.label("socketpair")
    a.load(_OFF_ARG0_LO)
    a.jump(_JEQ_K, _AF_UNIX, "allow", "nofamily")
    a.label("personality")
    a.load(_OFF_ARG0_LO)
    for value in _PERSONALITIES:
        a.jump(_JEQ_K, value, "allow", 0)
    a.ret(deny)
    a.label("nofamily")
    a.ret(_RET_ERRNO | errno.EAFNOSUPPORT)
    a.label("allow")  # classic BPF only jumps forward: the shared exits come last
    a.ret(_RET_ALLOW)
    a.label("enosys")
    a.ret(_RET_ERRNO | errno.ENOSYS)
    a.label("deny")
    a.ret(deny)
    a.label("kill")
    a.ret(_RET_KILL_PROCESS)
    return a.assemble()


#: Sealed memory files by content: ``(descriptor, device, inode)``, kept open.
_sealed: dict[bytes, tuple[int, int, int]] = {}
_sealed_lock = threading.Lock()
#: Contents kept sealed at most (a few: the filters).
_SEALED_MAX = 64
_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def _memory_file(program: bytes, *, seal: bool) -> int:
    """``program`` in a new anonymous memory file, rewound (sealed: unchangeable)."""
    fd = os.memfd_create("corral-seccomp", os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if seal else 0))
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
        if seal:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _reopen(program: bytes) -> int | None:
    """A new read-only descriptor (own offset) of the sealed file holding ``program``."""
    with _sealed_lock:
        held = _sealed.get(program)
        if held is None:
            if len(_sealed) >= _SEALED_MAX:
                for fd, _, _ in _sealed.values():
                    os.close(fd)
                _sealed.clear()
            fd = _memory_file(program, seal=True)
            st = os.fstat(fd)
            held = _sealed[program] = (fd, st.st_dev, st.st_ino)
        fd, dev, ino = held
        try:
            new = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            new = -1
        if new >= 0:
            st = os.fstat(new)
            if (st.st_dev, st.st_ino) == (dev, ino):
                return new
            os.close(new)
        # Not ours any more (/proc missing, or the number closed and reused by someone
        # else): forget it, never close what is no longer ours.
        del _sealed[program]
        return None


def filter_fd(program: bytes) -> int:
    """Put ``program`` in an anonymous memory file, rewound, for ``--seccomp FD``.

    The descriptor is close-on-exec in this process; ``Popen(pass_fds=...)`` makes
    it inheritable in the child only. bwrap reads it from the current offset, so one
    descriptor serves exactly one spawn; the caller closes it.

    The content is written once per process into a sealed memory file (nobody can
    change it, whoever gets a descriptor), and each call opens that file anew (its
    own offset) instead of copying the content again.
    """
    fd = _reopen(program)
    return fd if fd is not None else _memory_file(program, seal=False)
