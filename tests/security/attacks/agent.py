"""An attacking extension driven through slash commands (raw frames, stdlib only).

Commands, each prefixed with the extension's name (``<name>-look`` and so on);
arguments are JSON:

* ``look {"path"}``: list a directory or read a file's first line;
* ``swap {"path", "target"}``: move ``path`` aside and put a symlink to ``target``
  in its place (the host sees the change: it is a real directory to us);
* ``plant {"path", "target"}``: create a symlink;
* ``write {"path", "text"}``: write a file (e.g. its own manifest);
* ``crash``: exit at once with status 3, without answering.

Every answer is a ``display`` of one JSON object.
"""

import json
import os
import sys

NAME = os.environ.get("CORRAL_EXT_NAME", "agent")


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def look(path):
    if os.path.isdir(path):
        return sorted(os.listdir(path))
    with open(path) as f:
        return f.readline().strip()


def swap(path, target):
    os.rename(path, path + ".orig")
    os.symlink(target, path)
    return "swapped"


def plant(path, target):
    os.symlink(target, path)
    return "planted"


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return "written"


ACTIONS = {"look": look, "swap": swap, "plant": plant, "write": write}

emit({"type": "hello", "name": NAME})
for command in (*ACTIONS, "crash"):
    emit({"type": "register_command", "name": f"{NAME}-{command}"})
emit({"type": "ready"})
for line in sys.stdin:
    frame = json.loads(line)
    if frame.get("type") == "shutdown":
        break
    if frame.get("type") != "command_invoked":
        continue
    action = frame["name"].split("-", 1)[1]
    if action == "crash":
        os._exit(3)
    try:
        result = {"ok": ACTIONS[action](**json.loads(frame["args"] or "{}"))}
    except OSError as exc:
        result = {"error": exc.strerror}
    emit(
        {
            "type": "command_response",
            "id": frame["id"],
            "action": "display",
            "display": json.dumps(result),
        }
    )
