"""Attack: start processes until the machine runs out.

Forks children that sleep, until fork fails or argv[1] children exist. Prints how
many it got and why it stopped.
"""

import json
import os
import sys
import time

cap = int(sys.argv[1])
children = []
error = None
while len(children) < cap:
    try:
        pid = os.fork()
    except OSError as exc:
        error = exc.strerror
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children.append(pid)
print(json.dumps({"forked": len(children), "error": error}), flush=True)
for pid in children:
    os.kill(pid, 9)
