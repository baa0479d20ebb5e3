"""A tool host written from the seed alone (raw NDJSON, standard library only).

It knows nothing of corral's ``stateless``: every tool answers the state it was
sent, updated, so the client must order the calls that carry it. Each call runs on
its own thread, as a host serving calls concurrently would.

Tools: ``incr`` adds 1 to ``state.n`` after a short pause; ``hang`` never answers;
``die`` exits the host; ``peek`` answers ``n``; ``show`` answers ``"shown"``.
``format_tool_result`` counts the results it formatted in ``state.formatted`` (a
hook that changes the state), and renders ``show``'s as the JSON of what it got.
"""

import json
import os
import sys
import threading
import time

OBJECT = {"type": "object", "properties": {}}
TOOLS = [
    {"name": n, "description": n, "parameters": OBJECT}
    for n in ("incr", "hang", "die", "peek", "show")
]
lock = threading.Lock()


def send(obj: dict) -> None:
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def ok(rid: object, value: object, state: object = None) -> None:
    result = {"value": value} if state is None else {"value": value, "state": state}
    send({"v": 1, "id": rid, "ok": True, "result": result})


def execute(rid: object, params: dict) -> None:
    state = params.get("state") or {}
    name = params.get("tool_name")
    if name == "incr":
        time.sleep(0.05)
        state["n"] = state.get("n", 0) + 1
        ok(rid, {"success": True, "result": f"n={state['n']}"}, state)
    elif name == "peek":
        ok(
            rid,
            {"success": True, "result": f"n={state.get('n', 0)} f={state.get('formatted', 0)}"},
            state,
        )
    elif name == "show":
        ok(rid, {"success": True, "result": "shown"}, state)
    elif name == "die":
        os._exit(3)
    # hang: never answers


def main() -> None:
    for line in sys.stdin:
        req = json.loads(line)
        rid, method, params = req["id"], req["method"], req.get("params") or {}
        if method == "init":
            ok(rid, {"n": 0}, {"n": 0})
        elif method == "get_tool_schemas":
            ok(rid, TOOLS, params.get("state"))
        elif method == "execute_tool":
            threading.Thread(target=execute, args=(rid, params), daemon=True).start()
        elif method == "format_tool_result" and params["result"].get("result") == "shown":
            ok(rid, json.dumps(params["result"], sort_keys=True))
        elif method == "format_tool_result":
            state = params.get("state") or {}
            state["formatted"] = state.get("formatted", 0) + 1
            ok(rid, None, state)
        else:
            error = {"type": "UnknownMethod", "detail": method, "stack": ""}
            send({"v": 1, "id": rid, "ok": False, "error": error})


main()
