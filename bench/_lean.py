"""The lean extension every start-up figure uses, importing nothing of corral's.

The side-by-side bench's bare driver (``drivers/bare.py``) starts these without
corral, so this module imports neither ``supervisor`` nor ``_common``: the bare
loop's memory figure must not carry corral's modules.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

__all__ = ["LEAN", "SDK_DIR", "child_env", "lean_dirs"]

#: The stdlib-only SDK (``supervisor/_sdk``, what ``supervisor.lowlevel.SDK_DIR`` names).
SDK_DIR = str(Path(__file__).resolve().parent.parent / "supervisor" / "_sdk")

#: The lightest realistic extension: the stdlib-only SDK, one tool, a ``ready`` frame.
LEAN = """\
import os
import corral_ext

ext = corral_ext.Extension(os.environ["CORRAL_EXT_NAME"], "1.0.0")


@ext.tool("lean_" + ext.name.replace("-", "_"), "echo", {"type": "object"})
def echo(args):
    return "ok"


ext.run()
"""


def lean_dirs(root: Path, names: list[str]) -> list[str]:
    """One extension directory per name, each running the lean SDK extension."""
    paths = []
    for name in names:
        d = root / "lean" / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "lean.py").write_text(LEAN)
        manifest = {"name": name, "version": "1.0.0", "exec": "./lean.py"}
        (d / "extension.json").write_bytes(msgspec.json.encode(manifest))
        paths.append(str(d))
    return paths


def child_env() -> dict[str, str]:
    """A small environment like the one corral gives Python extensions."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return env | {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
