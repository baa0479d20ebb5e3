"""Attack: leave a set-user-ID (or set-group-ID) program on the host's disk.

When the host runs as root, files the extension creates are owned by root; a
set-user-ID copy of a program in a directory other users reach would give them
root. argv[1] is a directory the extension may write; it tries every way to set
the bits and prints the final mode of each file.
"""

import json
import os
import stat
import sys

directory = sys.argv[1]
result = {}


def attempt(name, how):
    path = os.path.join(directory, name)
    try:
        how(path)
    except OSError as exc:
        result[name] = f"error: {exc.strerror}"
        return
    result[name] = oct(stat.S_IMODE(os.stat(path).st_mode))


def chmod(path):
    open(path, "w").close()
    os.chmod(path, 0o4755)


def fchmod(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o755)
    try:
        os.fchmod(fd, 0o2755)
    finally:
        os.close(fd)


def create_with_mode(path):
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o6755))


def mknod(path):
    os.mknod(path, stat.S_IFREG | 0o4755)


for name, how in (("chmod", chmod), ("fchmod", fchmod), ("open", create_with_mode),
                  ("mknod", mknod)):  # fmt: skip
    attempt(name, how)
print(json.dumps(result))
