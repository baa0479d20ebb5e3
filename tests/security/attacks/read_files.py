"""Attack: read files the extension was not granted.

argv[1] is a JSON object ``{"files": [...], "dirs": [...]}`` of host paths worth
stealing (the test's fake home, ~/.ssh, the project tree, corral's home...). On top
of those it tries well-known secrets of any Linux host. Prints one JSON object:
what it managed to read or list.
"""

import contextlib
import json
import os
import sys

targets = json.loads(sys.argv[1])
files = [
    *targets["files"],
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/passwd",
    "/etc/sudoers",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    "/etc/ssl/private/ssl-cert-snakeoil.key",
    "/root/.bashrc",
    "/root/.ssh/id_rsa",
    "/root/.ssh/authorized_keys",
    "/root/.bash_history",
    "/var/log/syslog",
    "/proc/kcore",
    "/sys/kernel/notes",
]
dirs = [*targets["dirs"], "/home", "/var", "/run", "/mnt", "/media", "/srv", "/opt", "/sys"]

read = {}
for path in files:
    try:
        with open(path, "rb") as f:
            read[path] = f.read(64).decode("utf-8", "replace")
    except OSError:
        pass
    # Also through a symlink planted in our own writable space.
    link = os.path.join(os.environ.get("TMPDIR", "/tmp"), "link")
    try:
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(path, link)
        with open(link, "rb") as f:
            read["symlink->" + path] = f.read(64).decode("utf-8", "replace")
    except OSError:
        pass

listed = {}
for path in dirs:
    with contextlib.suppress(OSError):
        listed[path] = sorted(os.listdir(path))

print(json.dumps({"read": read, "listed": listed, "root": sorted(os.listdir("/"))}))
