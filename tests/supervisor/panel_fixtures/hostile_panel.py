"""A hostile panel extension: escapes everywhere, a huge panel, renders for panels it
never opened, and a flood of renders; ``/evil`` opens it, ``/flood N`` sends N renders
(the last says ``final``), ``/badid`` opens a panel without an id."""

import json
import os
import sys

NAME = os.environ["CORRAL_EXT_NAME"]
ESC = "\x1b"


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


emit({"type": "hello", "name": NAME, "version": "6.6.6", "capabilities": ["commands", "panels"]})
for name in ("evil", "flood", "badid"):
    emit({"type": "register_command", "name": name, "description": name})
emit({"type": "ready"})
for n in range(50):  # panels it never opened
    emit({"type": "panel_render", "panel_id": f"ghost-{n}", "lines": [ESC + "[2J"]})
    emit({"type": "panel_close", "panel_id": f"ghost-{n}"})

for raw in sys.stdin:
    if not raw.strip():
        continue
    frame = json.loads(raw)
    kind = frame.get("type")
    if kind == "command_invoked":
        name, args = frame["name"], frame.get("args", "")
        if name == "evil":
            row = ESC + "[2J" + ESC + "]52;c;cHduZWQ=" + "\x07row "
            lines = [row + str(i) for i in range(10_000)]
            lines[1] = "x" * 1_000_000
            lines[2] = "\u202eevil\u202c\r\nsecond" + "\x9b31m"
            emit(
                {
                    "type": "command_response",
                    "id": frame["id"],
                    "action": "open_panel",
                    "open_panel": {
                        "id": "evil",
                        "title": ESC + "]0;pwned\x07" + "T" * 5000,
                        "lines": lines,
                        "footer": "\x9b2J" + "f" * 5000,
                    },
                }
            )
        elif name == "flood":
            emit(
                {
                    "type": "command_response",
                    "id": frame["id"],
                    "action": "open_panel",
                    "open_panel": {"id": "flood", "title": "flood", "lines": ["0"]},
                }
            )
            count = int(args or "1000")
            for i in range(count):
                emit({"type": "panel_render", "panel_id": "ghost", "lines": ["stray"]})
                emit({"type": "panel_render", "panel_id": "flood", "lines": [str(i)]})
            emit({"type": "panel_render", "panel_id": "flood", "lines": ["final"]})
        elif name == "badid":
            emit(
                {
                    "type": "command_response",
                    "id": frame["id"],
                    "action": "open_panel",
                    "open_panel": {"id": "", "title": "no id"},
                }
            )
    elif kind == "panel_key":
        emit({"type": "notify", "level": "info", "message": "key " + frame["key"]})
    elif kind == "shutdown":
        emit({"type": "shutdown_ack"})
        break
