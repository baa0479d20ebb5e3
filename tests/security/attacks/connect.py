"""Attack: reach the network or a local service over sockets.

argv[1] is a JSON object with a TCP ``[host, port]``, a unix socket ``path`` and an
``abstract`` unix socket name; each gets one connect attempt and a "hello" if it
connects. Prints what worked.
"""

import json
import socket
import sys

targets = json.loads(sys.argv[1])
result = {}


def attempt(name, family, address):
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(3)
            s.connect(address)
            s.sendall(b"hello\n")
            result[name] = s.recv(64).decode()
    except OSError as exc:
        result[name] = f"error: {exc}"


if "tcp" in targets:
    attempt("tcp", socket.AF_INET, tuple(targets["tcp"]))
if "unix" in targets:
    attempt("unix", socket.AF_UNIX, targets["unix"])
if "abstract" in targets:
    attempt("abstract", socket.AF_UNIX, "\0" + targets["abstract"])
print(json.dumps(result))
