"""A squatter: an extension named like another one, after that one's state.

On start it reports which data directory it was given, what is already in it, and
what it can read of the files named in argv (another extension's data, log or
quarantine record); the report goes to ``$CORRAL_DATA_DIR/report.json`` and, as one
``squat:`` line, to stderr (its log). Then it serves until shutdown. Raw frames, the
standard library only.
"""

from __future__ import annotations

import json
import os
import sys

data = os.environ.get("CORRAL_DATA_DIR", "")
report: dict[str, object] = {
    "name": os.environ.get("CORRAL_EXT_NAME"),
    "data_dir": data,
    "listing": sorted(os.listdir(data)) if data else None,
}
read: dict[str, str] = {}
for path in sys.argv[1:]:
    try:
        with open(path, errors="replace") as fh:
            read[path] = fh.read()
    except OSError as exc:
        read[path] = f"denied: {exc.strerror}"
report["read"] = read
if data:
    with open(os.path.join(data, "report.json"), "w") as fh:
        json.dump(report, fh)
sys.stderr.write("squat: " + json.dumps(report) + "\n")
sys.stderr.flush()


def emit(frame: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(frame) + "\n")
    sys.stdout.flush()


emit({"type": "hello", "name": report["name"], "version": "1.0.0"})
emit({"type": "ready"})
for line in sys.stdin:
    if line.strip() and json.loads(line).get("type") == "shutdown":
        emit({"type": "shutdown_ack"})
        break
