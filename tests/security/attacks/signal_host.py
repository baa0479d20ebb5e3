"""Attack: signal, trace or read the memory of the host and of other extensions.

argv[1:] are host pids (the host, another extension). For each: kill(SIGKILL),
pidfd_open, ptrace(PTRACE_ATTACH) and /proc/<pid>/mem; then the same against
pid 1 of its own namespace, and finally kill(-1, SIGKILL). Prints what worked.
"""

import ctypes
import json
import os
import signal
import sys

libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH = 16
result = {}
for pid in [int(p) for p in sys.argv[1:]] + [1]:
    try:
        os.kill(pid, signal.SIGKILL if pid != 1 else 0)
        result[f"kill {pid}"] = "sent"
    except OSError as exc:
        result[f"kill {pid}"] = f"error: {exc.strerror}"
    try:
        os.close(os.pidfd_open(pid))
        result[f"pidfd {pid}"] = "opened"
    except OSError as exc:
        result[f"pidfd {pid}"] = f"error: {exc.strerror}"
    if libc.ptrace(PTRACE_ATTACH, pid, None, None) == 0:
        result[f"ptrace {pid}"] = "attached"
    else:
        result[f"ptrace {pid}"] = f"error: {os.strerror(ctypes.get_errno())}"
    try:
        with open(f"/proc/{pid}/mem", "rb") as f:
            f.read(1)
        result[f"mem {pid}"] = "read"
    except OSError as exc:
        result[f"mem {pid}"] = f"error: {exc.strerror}"
try:
    os.kill(-1, signal.SIGKILL)
    result["kill -1"] = "sent"
except OSError as exc:
    result["kill -1"] = f"error: {exc.strerror}"
print(json.dumps(result))
