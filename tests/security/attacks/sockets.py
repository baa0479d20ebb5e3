"""Attack: open sockets of every family the kernel knows, and call personality/modify_ldt.

Prints one JSON object: for each attempt, "ok" or the error name (EAFNOSUPPORT...).
"""

import ctypes
import errno
import json
import os
import platform
import socket

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
X86 = platform.machine() == "x86_64"

FAMILIES = {
    "inet": (2, socket.SOCK_STREAM, 0),
    "inet6": (10, socket.SOCK_STREAM, 0),
    "unix": (1, socket.SOCK_STREAM, 0),
    "netlink-route": (16, socket.SOCK_RAW, 0),
    "netlink-sock-diag": (16, socket.SOCK_RAW, 4),
    "netlink-uevent": (16, socket.SOCK_RAW, 15),
    "netlink-audit": (16, socket.SOCK_RAW, 9),
    "packet": (17, socket.SOCK_RAW, 0),
    "vsock": (40, socket.SOCK_STREAM, 0),
    "alg": (38, socket.SOCK_SEQPACKET, 0),
    "bluetooth": (31, socket.SOCK_RAW, 0),
    "can": (29, socket.SOCK_RAW, 1),
    "tipc": (30, socket.SOCK_RDM, 0),
    "key": (15, socket.SOCK_RAW, 2),
    "xdp": (44, socket.SOCK_RAW, 0),
    "rds": (21, socket.SOCK_SEQPACKET, 0),
    "appletalk": (5, socket.SOCK_DGRAM, 0),
}


def name(err):
    return errno.errorcode.get(err, str(err))


result = {}
for label, (family, kind, proto) in FAMILIES.items():
    # Straight to the system call: libc and Python add nothing on the way.
    fd = libc.syscall(41 if X86 else 198, family, kind, proto)
    result[f"socket {label}"] = "ok" if fd >= 0 else name(ctypes.get_errno())
    if fd >= 0:
        os.close(fd)
pair = (ctypes.c_int * 2)()
ret = libc.syscall(53 if X86 else 199, 30, socket.SOCK_RDM, 0, pair)  # AF_TIPC
result["socketpair tipc"] = "ok" if ret == 0 else name(ctypes.get_errno())
ret = libc.syscall(53 if X86 else 199, 1, socket.SOCK_STREAM, 0, pair)
result["socketpair unix"] = "ok" if ret == 0 else name(ctypes.get_errno())
try:
    socket.getaddrinfo("localhost", 80)
    result["getaddrinfo"] = "ok"
except OSError as exc:
    result["getaddrinfo"] = str(exc)
PERSONALITY = 135 if X86 else 92
current = libc.syscall(PERSONALITY, 0xFFFFFFFF)
result["personality query"] = "ok" if current >= 0 else name(ctypes.get_errno())
for label, flag in (
    ("no-aslr", 0x0040000),
    ("read-implies-exec", 0x0400000),
    ("page-zero", 0x0100000),
):
    ret = libc.syscall(PERSONALITY, current | flag)
    result[f"personality {label}"] = "ok" if ret >= 0 else name(ctypes.get_errno())
with open("/proc/self/personality") as f:
    result["personality now"] = f.read().strip()
if X86:
    buf = ctypes.create_string_buffer(16)
    ret = libc.syscall(154, 0, buf, 16)  # modify_ldt(read)
    result["modify_ldt"] = "ok" if ret >= 0 else name(ctypes.get_errno())
print(json.dumps(result))
