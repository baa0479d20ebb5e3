"""An agent whose extension sandboxes made their /tmp mount points, then a ``bash``
call working in the temporary directory that holds them (``argv[1]``: the command,
with ``{base}`` the pair's directory). Prints JSON: the tool's text, and whether the
pair is still the one made (``get`` makes a new one when it is not)."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import trio

import sandbox
from agent import TextContent
from agent._tools.bash import BashTool
from agent._tools.confine import Workspace
from sandbox._mountpoints import MOUNT_POINTS


async def main(command: str) -> dict[str, object]:
    made = MOUNT_POINTS.get()  # as the first sandboxed extension does
    base = os.path.dirname(made[0])
    ws = Workspace(tempfile.gettempdir(), corral_home=os.environ["CORRAL_HOME"])
    tool = BashTool(ws, sandbox=sandbox.select_sandbox("required"), default_timeout=60)

    async def progress(_: str) -> None:
        pass

    with trio.fail_after(90):
        result = await tool.run("c1", {"command": command.format(base=base)}, progress)
    text = " ".join(b.text for b in result.content if isinstance(b, TextContent))
    return {"text": text, "intact": MOUNT_POINTS.get() == made, "base": base}


if __name__ == "__main__":
    print(json.dumps(trio.run(main, sys.argv[1])))
