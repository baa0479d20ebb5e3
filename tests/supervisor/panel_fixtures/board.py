"""A panel extension written to the reference implementation's shapes (raw frames, no
SDK), like its ``todo`` example: ``/board`` opens a panel, keys move a cursor, ``x``
toggles an item, ``q`` closes it from the extension's side (``!`` crashes it), and a
tool adds items and renders after every call, panel open or not."""

import json
import os
import sys

NAME = os.environ["CORRAL_EXT_NAME"]
PANEL = "board-main"
items = [{"text": "first", "done": False}, {"text": "second", "done": False}]
state = {"cursor": 0, "typed": "", "last": ""}


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def lines():
    out = []
    for i, item in enumerate(items):
        mark = "✓" if item["done"] else "□"
        out.append(("› " if i == state["cursor"] else "  ") + mark + " " + item["text"])
    out.append("typed: " + state["typed"])
    out.append("last: " + state["last"])
    return out


def title():
    return f"Board ({sum(i['done'] for i in items)}/{len(items)} done)"


def render():
    emit(
        {
            "type": "panel_render",
            "panel_id": PANEL,
            "title": title(),
            "lines": lines(),
            "footer": "up/down move - x toggle - q close",
        }
    )


emit(
    {
        "type": "hello",
        "name": NAME,
        "version": "0.1.0",
        "capabilities": ["commands", "tools", "events", "panels"],
    }
)
emit({"type": "register_command", "name": "board", "description": "open the board panel"})
emit(
    {
        "type": "register_tool",
        "name": "board_add",
        "description": "add an item",
        "schema": {
            "type": "object",
            "properties": {"item": {"type": "string"}},
            "required": ["item"],
        },
    }
)
emit({"type": "ready"})
render()  # no panel is open yet: the host drops it, as the reference's does

for raw in sys.stdin:
    if not raw.strip():
        continue
    frame = json.loads(raw)
    kind = frame.get("type")
    if kind == "command_invoked":
        emit(
            {
                "type": "command_response",
                "id": frame["id"],
                "action": "open_panel",
                "open_panel": {
                    "id": PANEL,
                    "title": title(),
                    "lines": lines(),
                    "footer": "up/down move - x toggle - q close",
                },
            }
        )
    elif kind == "tool_call":
        items.append({"text": frame["args"].get("item", "?"), "done": False})
        emit(
            {
                "type": "tool_result",
                "id": frame["id"],
                "content": [{"type": "text", "text": f"added; {len(items)} items"}],
            }
        )
        render()
    elif kind == "panel_key" and frame.get("panel_id") == PANEL:
        key, text = frame.get("key"), frame.get("text", "")
        state["last"] = key + (":" + text if text else "")
        if key == "up":
            state["cursor"] = max(0, state["cursor"] - 1)
        elif key == "down":
            state["cursor"] = min(len(items) - 1, state["cursor"] + 1)
        elif key == "rune" and text == "x":
            items[state["cursor"]]["done"] = not items[state["cursor"]]["done"]
        elif key == "rune" and text == "!":
            sys.exit(3)  # a crash with the panel open
        elif key == "rune" and text == "q":
            emit({"type": "panel_close", "panel_id": PANEL})
            continue
        elif key == "rune":
            state["typed"] += text
        elif key == "backspace":
            state["typed"] = state["typed"][:-1]
        render()
    elif kind == "panel_close":
        why = frame.get("reason", "")
        print(f"panel_close {frame['panel_id']}: {why}", file=sys.stderr, flush=True)
        emit({"type": "notify", "level": "info", "message": f"closed {frame['panel_id']}: {why}"})
    elif kind == "shutdown":
        emit({"type": "shutdown_ack"})
        break
