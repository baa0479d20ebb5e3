"""Attack: use more memory than allowed.

argv[1] is the way (``heap``: one process grows its heap; ``children``: four
processes each grow theirs to a quarter of the cap and hold it; ``shared``:
shared anonymous memory, which per-process limits do not count), argv[2] a safety
cap in MiB. Prints "<pid> allocated <MiB>" after each step and "<pid> reached
cap" at the cap, so the test knows how far it got even if the process is killed.
"""

import mmap
import os
import sys
import time

way, cap = sys.argv[1], int(sys.argv[2])
STEP = 8


def grow(limit, shared=False):
    held, total = [], 0
    try:
        while total < limit:
            if shared:
                block = mmap.mmap(-1, STEP << 20, flags=mmap.MAP_SHARED)
                for off in range(0, STEP << 20, 4096):
                    block[off] = 1
            else:
                block = bytearray(b"\1" * (STEP << 20))
            held.append(block)
            total += STEP
            print(f"{os.getpid()} allocated {total}", flush=True)
        print(f"{os.getpid()} reached cap", flush=True)
    except MemoryError:
        print("MemoryError", flush=True)
    except OSError as exc:
        print(f"OSError {exc}", flush=True)
    return total


if way == "children":
    pids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            grow(cap // 4)
            time.sleep(2)  # hold the memory while the others grow
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
else:
    grow(cap, shared=way == "shared")
