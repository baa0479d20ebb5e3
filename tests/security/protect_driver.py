"""Run one built-in tool call as corral would, from the interpreter that runs this file.

The protected-path tests start this with the Python of a virtual environment
*inside the project* (corral installed there, the normal layout), so that what
corral protects is computed from that interpreter, exactly as the real CLI would.
The request is JSON in ``argv[1]``; the answer is JSON on stdout:
``{"ok": bool, "text": str, "writable": bool, "description": str}``. With
``"mount_points": true`` the private /tmp mount points are made first, as the first
sandboxed extension does, and ``"mount_points_intact"`` says whether they are still
the ones made afterwards.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import trio

import sandbox
from agent import TextContent
from agent._tools.bash import BashTool
from agent._tools.confine import Workspace
from agent._tools.files import EditTool, ReadTool, WriteTool
from sandbox._mountpoints import MOUNT_POINTS


async def main(request: dict[str, Any]) -> dict[str, Any]:
    made = MOUNT_POINTS.get() if request.get("mount_points") else None
    more = {"protect": request["protect"]} if "protect" in request else {}
    ws = Workspace(
        str(request["workspace"]),
        corral_home=str(request["corral_home"]),
        home=str(request["home"]),
        **more,
    )
    name = request["tool"]
    if name == "bash":
        backend = sandbox.select_sandbox(str(request.get("sandbox", "required")))
        tool: Any = BashTool(ws, sandbox=backend, default_timeout=60)
    else:
        tool = {"write": WriteTool, "edit": EditTool, "read": ReadTool}[str(name)](ws)

    async def progress(_: str) -> None:
        pass

    with trio.fail_after(90):
        result = await tool.run("c1", dict(request["args"]), progress)
    text = " ".join(b.text for b in result.content if isinstance(b, TextContent))
    spec = tool.spec
    more = {} if made is None else {"mount_points_intact": MOUNT_POINTS.get() == made}
    return more | {
        "ok": not result.is_error,
        "text": text,
        "writable": getattr(ws, "writable", True),
        "description": spec.description,
    }


if __name__ == "__main__":
    print(json.dumps(trio.run(main, json.loads(sys.argv[1]))))
