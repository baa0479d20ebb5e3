"""The seccomp filter, run through a small classic-BPF interpreter.

The real kernel runs it in the attack tests; here every branch is checked for
both architectures, including the ones this machine cannot exercise (aarch64,
32-bit calls, x32, a request number with high bits set).
"""

from __future__ import annotations

import errno
import os
import struct

import pytest

from sandbox._seccomp import _ARCHES, _DENIED, _MODE_ARG, build_filter, filter_fd

ALLOW = 0x7FFF0000
KILL = 0x80000000
EPERM = 0x00050000 | errno.EPERM
ENOSYS = 0x00050000 | errno.ENOSYS
EAFNOSUPPORT = 0x00050000 | errno.EAFNOSUPPORT
EPROTONOSUPPORT = 0x00050000 | errno.EPROTONOSUPPORT
AUDIT_ARCH_I386 = 0x40000003
#: Calls the filter looks into beyond their number.
_ARG_CHECKED = ("ioctl", "clone", "clone3", "openat2", "socket", "socketpair", "personality")


def run_bpf(program: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """Evaluate a seccomp program on one system call (only the opcodes we emit)."""
    args = (*args, 0, 0, 0, 0, 0, 0)[:6]
    data = struct.pack("<iIQ6Q", nr, arch, 0, *[a & (2**64 - 1) for a in args])
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:  # ld [k]
            (acc,) = struct.unpack_from("<I", data, k)
        elif code == 0x15:  # jeq
            pc += jt if acc == k else jf
        elif code == 0x35:  # jge
            pc += jt if acc >= k else jf
        elif code == 0x45:  # jset
            pc += jt if acc & k else jf
        elif code == 0x06:  # ret
            return int(k)
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


@pytest.mark.parametrize("arch", sorted(_ARCHES))
@pytest.mark.parametrize("network", [False, True])
def test_filter_decisions(arch: str, network: bool) -> None:
    audit, nr = _ARCHES[arch]
    prog = build_filter(network=network, arch=arch)
    assert len(prog) % 8 == 0

    def decide(name: str, *args: int) -> int:
        return run_bpf(prog, nr[name], audit, args)

    for name in _DENIED:
        if name in nr:  # modify_ldt and uselib exist on x86-64 only
            assert decide(name) == EPERM, name
    # Harmless calls pass: read/write/openat have low numbers nothing matches.
    for harmless in (0, 1, 2, 3, 56 if arch == "aarch64" else 257):
        assert run_bpf(prog, harmless, audit) == ALLOW
    assert decide("ioctl", 1, 0x5412) == EPERM  # TIOCSTI
    assert decide("ioctl", 1, 0x1_0000_5412) == EPERM  # high bits ignored, like the kernel
    assert decide("ioctl", 1, 0x541C) == EPERM  # TIOCLINUX
    assert decide("ioctl", 1, 0x5401) == ALLOW  # TCGETS
    assert decide("clone", 0x10000000 | 0x11) == EPERM  # CLONE_NEWUSER
    assert decide("clone", 0x003D0F00) == ALLOW  # what pthread_create passes
    assert decide("clone3") == ENOSYS  # libc falls back to clone
    assert decide("socket", 2, 1) == ALLOW  # AF_INET (only loopback without network)
    assert decide("socket", 10, 2) == ALLOW  # AF_INET6
    assert decide("socket", 1, 1) == (ALLOW if network else EPERM)  # AF_UNIX
    # Every other family is unknown to the extension, network or not.
    for family in (17, 40, 38, 31, 29, 5, 44):  # PACKET, VSOCK, ALG, BLUETOOTH, CAN, APPLETALK, XDP
        assert decide("socket", family, 1) == EAFNOSUPPORT, family
    assert decide("socket", 0x1_0000_0028, 1) == EAFNOSUPPORT  # VSOCK with high bits set
    assert decide("socket", 16, 3, 0) == ALLOW  # netlink, NETLINK_ROUTE: getaddrinfo
    assert decide("socket", 16, 3, 4) == EPROTONOSUPPORT  # NETLINK_SOCK_DIAG
    assert decide("socket", 16, 3, 15) == EPROTONOSUPPORT  # NETLINK_KOBJECT_UEVENT
    assert decide("socketpair", 1, 1, 0) == ALLOW
    assert decide("socketpair", 30, 1, 0) == EAFNOSUPPORT  # AF_TIPC
    # personality: only what libc and Python ask (PER_LINUX, PER_LINUX32, the query).
    for value in (0, 8, 0xFFFFFFFF):
        assert decide("personality", value) == ALLOW, value
    for value in (0x0040000, 0x0400000, 0x0100000, 0x0040008):  # no ASLR, exec, page zero
        assert decide("personality", value) == EPERM, value
    # No set-user-ID or set-group-ID bits, however the mode is set.
    assert decide("fchmod", 3, 0o4755) == EPERM
    assert decide("fchmodat", -100, 0, 0o2755) == EPERM
    assert decide("fchmodat", -100, 0, 0o755) == ALLOW
    assert decide("openat", -100, 0, 0o101, 0o4755) == EPERM  # O_CREAT|O_WRONLY
    assert decide("openat", -100, 0, 0o101, 0o644) == ALLOW
    assert decide("mknodat", -100, 0, 0o100000 | 0o6755) == EPERM
    assert decide("openat2") == ENOSYS
    if arch == "x86_64":
        assert decide("chmod", 0, 0o4711) == EPERM
        assert decide("open", 0, 0o101, 0o4755) == EPERM
        assert decide("creat", 0, 0o6755) == EPERM
        assert decide("open", 0, 0, 0) == ALLOW
    # Another architecture's calls (32-bit int 0x80 on x86-64) are killed.
    assert run_bpf(prog, nr.get("read", 0), AUDIT_ARCH_I386) == KILL


def test_x32_calls_are_killed() -> None:
    audit, _ = _ARCHES["x86_64"]
    prog = build_filter(network=False, arch="x86_64")
    assert run_bpf(prog, 0x40000000 | 101, audit) == KILL


def test_unknown_architecture_is_an_error() -> None:
    with pytest.raises(ValueError, match="no seccomp syscall table"):
        build_filter(network=False, arch="riscv64")


def test_each_descriptor_reads_the_whole_unchangeable_content() -> None:
    program = build_filter(network=False)
    first, second = filter_fd(program), filter_fd(program)
    try:
        assert os.read(first, len(program) + 1) == program
        # Its own offset: a spawn reading the first leaves the second whole.
        assert os.read(second, 10) == program[:10]
        os.lseek(second, 0, os.SEEK_SET)
        # Whoever holds a descriptor cannot change what the next spawn reads.
        for fd in (first, second):
            with pytest.raises(OSError, match="Bad file descriptor"):
                os.write(fd, b"\x06\x00\x00\x00\x00\x00\xff\x7f")
            writable = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)
            try:
                with pytest.raises(PermissionError):
                    os.write(writable, b"\x06\x00\x00\x00\x00\x00\xff\x7f")
                with pytest.raises(PermissionError):
                    os.ftruncate(writable, 0)
            finally:
                os.close(writable)
        third = filter_fd(program)
        try:
            assert os.read(third, len(program) + 1) == program
        finally:
            os.close(third)
    finally:
        os.close(first)
        os.close(second)


def steps(program: bytes, nr: int, arch: int) -> int:
    """How many instructions the filter runs for a call with all-zero arguments."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, 0, 0, 0, 0, 0, 0)
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    acc, pc, count = 0, 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc, count = pc + 1, count + 1
        if code == 0x20:
            (acc,) = struct.unpack_from("<I", data, k)
        elif code in (0x15, 0x35, 0x45):
            hit = acc == k if code == 0x15 else acc >= k if code == 0x35 else acc & k
            pc += jt if hit else jf
        else:
            return count


@pytest.mark.parametrize("arch", sorted(_ARCHES))
def test_every_call_number_is_decided_in_a_few_instructions(arch: str) -> None:
    # The kernel runs the filter for every call number when it installs it (bwrap
    # installs it twice per spawn): a list of ~60 comparisons made that ~0.2 ms a
    # load; the search over the numbers decides any call in a handful.
    audit, nr = _ARCHES[arch]
    prog = build_filter(network=False, arch=arch)
    assert max(steps(prog, n, audit) for n in range(1024)) <= 20
    # Same decisions as the rules say, for every number (not only the named ones).
    names = {name for name in (*_DENIED, *_MODE_ARG, *_ARG_CHECKED) if name in nr}
    special = {nr[name] for name in names}
    assert len(special) == len(names)  # no two rules share a number
    for n in range(1024):
        if n not in special:
            assert run_bpf(prog, n, audit, (0x10000000, 0x5412, 0o6777, 0o6777)) == ALLOW, n
