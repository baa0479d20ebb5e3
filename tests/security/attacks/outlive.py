"""Attack: keep running after the host is gone.

Starts a daemon (double fork, new session, SIGHUP and SIGTERM ignored) and a
plain child, waits until both run, then prints READY and waits. argv[1] is a
marker the test uses to find every process of this attack.
"""

import os
import signal
import time

for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, signal.SIG_IGN)

started_r, started_w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(started_w, b"d")
        while True:
            time.sleep(3600)
    os._exit(0)
if os.fork() == 0:
    os.write(started_w, b"c")
    while True:
        time.sleep(3600)
got = b""
while len(got) < 2:
    got += os.read(started_r, 2)
print(f"READY {os.getpid()}", flush=True)
while True:
    time.sleep(3600)
