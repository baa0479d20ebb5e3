"""A tool host that breaks the protocol on demand (raw NDJSON, standard library only).

Its ``config`` picks the start-up: ``{"never_init": true}`` never answers ``init``;
``{"schemas": "not a list"}`` answers ``get_tool_schemas`` with a string;
``{"part_in_init": true}`` sends a ``part`` event for ``init`` before its answer;
``{"reverse_after_init": N}`` holds the answers to the N requests after ``init`` and
sends them in reverse order; ``{"exit_after": METHOD}`` exits once it answered METHOD
(the other start-up requests unanswered). Each tool
misbehaves in its own way when called (see ``TOOLS``); ``asked`` answers how often
each method was requested, so a test can see what corral stopped asking.
"""

import json
import sys
import threading
import time

OBJECT = {"type": "object", "properties": {}}
TOOLS = [
    {"name": "ok", "description": "answers", "parameters": OBJECT},
    {"name": "garbage", "description": "a line that is not JSON, then v 2", "parameters": OBJECT},
    {"name": "stranger", "description": "answers an id never sent first", "parameters": OBJECT},
    {"name": "late", "description": "answers after 1.5 s", "parameters": OBJECT},
    {"name": "huge", "description": "a 20 MiB line", "parameters": OBJECT},
    {"name": "shapeless", "description": "a value that is not {success}", "parameters": OBJECT},
    {"name": "asked", "description": "how often each method came", "parameters": OBJECT},
    {"name": "die", "description": "exits mid-call", "parameters": OBJECT},
    {
        "name": "array_schema",
        "description": "not an object schema",
        "parameters": {"type": "array"},
    },
    {"name": "no schema", "description": "no schema at all"},
    {"name": "bad name!", "description": "not an identifier", "parameters": OBJECT},
]
asked: dict[str, int] = {}
lock = threading.Lock()
config: dict = {}


def send(obj: dict) -> None:
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


held: list[dict] | None = None  # answers held back (reverse_after_init)


def answer(obj: dict) -> None:
    global held
    if held is None:
        send(obj)
        return
    held.append(obj)
    if len(held) == config["reverse_after_init"]:
        for one in reversed(held):
            send(one)
        held = None


def ok(rid: str, value: object) -> None:
    answer({"v": 1, "id": rid, "ok": True, "result": {"value": value}})


def error(rid: str, kind: str, detail: str) -> None:
    answer({"v": 1, "id": rid, "ok": False, "error": {"type": kind, "detail": detail}})


def execute(rid: str, name: str) -> None:
    if name == "ok":
        ok(rid, {"success": True, "result": "fine"})
    elif name == "garbage":
        with lock:
            sys.stdout.write("this is not json {\n")
            sys.stdout.flush()
        send({"v": 2, "id": rid, "ok": True, "result": {"value": {"success": True}}})
    elif name == "stranger":
        ok("nobody-asked", {"success": True, "result": "who?"})
        ok(rid, {"success": True, "result": "after the stranger"})
    elif name == "late":
        time.sleep(1.5)
        ok(rid, {"success": True, "result": "too late"})
    elif name == "huge":
        padding = "x" * (20 * 1024 * 1024)
        ok(rid, {"success": True, "result": padding})
    elif name == "shapeless":
        ok(rid, [1, 2, 3])
    elif name == "asked":
        ok(rid, {"success": True, "result": dict(asked)})
    elif name == "die":
        sys.exit(3)


for line in sys.stdin:
    if not line.strip():
        continue
    msg = json.loads(line)
    rid, method, params = msg["id"], msg["method"], msg.get("params", {})
    asked[method] = asked.get(method, 0) + 1
    if method == "init":
        config = params.get("config", {})
        if config.get("never_init"):
            continue
        if config.get("part_in_init"):  # a streaming part, which only calls may send
            send({"v": 1, "id": rid, "event": {"type": "part", "payload": "early"}})
        ok(rid, {"n": 0})
        if config.get("reverse_after_init"):
            held = []
    elif method == "get_tool_schemas":
        ok(rid, config.get("schemas", TOOLS))
    elif method == "execute_tool":
        threading.Thread(target=execute, args=(rid, params["tool_name"]), daemon=True).start()
    else:
        error(rid, "Error", f"no {method} here")
    if method == config.get("exit_after"):
        sys.exit(0)
