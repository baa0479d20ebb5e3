"""An extension written to the reference's shapes, run with "exec": "python3"."""

import json
import os
import sys


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


send({"type": "hello", "name": "refpy", "version": "1.0.0", "capabilities": ["commands"]})
send({"type": "register_command", "name": "save", "description": "append to data_dir"})
send({"type": "ready"})
ack = {}
for line in sys.stdin:
    try:
        frame = json.loads(line)
    except ValueError:
        continue
    if frame.get("type") == "hello_ack":
        ack = frame
    elif frame.get("type") == "command_invoked":
        path = os.path.join(ack["data_dir"], "notes.txt")
        with open(path, "a") as f:
            f.write(frame["args"] + "\n")
        with open(path) as f:
            text = f.read()
        info = {"text": text, "executable": sys.executable, "ack": ack}
        send(
            {
                "type": "command_response",
                "id": frame["id"],
                "action": "display",
                "display": json.dumps(info),
            }
        )
    elif frame.get("type") == "shutdown":
        send({"type": "shutdown_ack"})
        break
