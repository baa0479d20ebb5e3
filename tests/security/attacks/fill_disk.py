"""Attack: fill the disk.

argv[1] is a JSON object of ``{"name": path}`` files to grow up to argv[2] MiB each,
1 MiB at a time; then it tries to grow one file in one go with ftruncate and
fallocate. Prints how many MiB each attempt got and how it ended.
"""

import contextlib
import json
import os
import sys

targets = json.loads(sys.argv[1])
cap = int(sys.argv[2])
chunk = b"\1" * (1 << 20)
result = {}
for name, path in targets.items():
    written = 0
    end = "reached cap"
    try:
        with open(path, "wb") as f:
            while written < cap:
                f.write(chunk)
                f.flush()
                written += 1
    except OSError as exc:
        end = exc.strerror
    result[name] = {"mib": written, "end": end}
    with contextlib.suppress(OSError):
        os.unlink(path)
for name, path in targets.items():
    for how in ("ftruncate", "fallocate"):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                if how == "ftruncate":
                    os.ftruncate(fd, cap << 20)
                else:
                    os.posix_fallocate(fd, 0, cap << 20)
                result[f"{name} {how}"] = "grew"
            finally:
                os.close(fd)
                os.unlink(path)
        except OSError as exc:
            result[f"{name} {how}"] = exc.strerror
print(json.dumps(result))
