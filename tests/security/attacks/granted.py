"""Uses what it was granted: argv[1] is ``{"read": [...], "write": [...]}``.

Prints, per path, what it read (first line) or whether the write worked.
"""

import json
import sys

paths = json.loads(sys.argv[1])
result = {"read": {}, "write": {}}
for path in paths["read"]:
    try:
        with open(path) as f:
            result["read"][path] = f.readline().strip()
    except OSError as exc:
        result["read"][path] = f"error: {exc.strerror}"
for path in paths["write"]:
    try:
        with open(path, "w") as f:
            f.write("written by the extension\n")
        result["write"][path] = "ok"
    except OSError as exc:
        result["write"][path] = f"error: {exc.strerror}"
print(json.dumps(result))
