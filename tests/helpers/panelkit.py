"""Panel extensions for the panel tests: copies of ``tests/supervisor/panel_fixtures``
with their manifests, runnable by the supervisor, ``corral rpc`` and ``corral chat``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helpers.paths import PANEL_FIXTURES

#: Extension name -> (fixture file, manifest ``language``).
PANEL_EXTS: dict[str, tuple[str, str]] = {
    "board": ("board.py", "python"),
    "board-js": ("board.js", "javascript"),
    "hostile": ("hostile_panel.py", "python"),
    "sdk-board": ("sdk_board.py", "python"),
}


def panel_ext(root: Path, name: str) -> Path:
    """``root/<name>/``: the fixture of :data:`PANEL_EXTS` and its ``extension.json``."""
    source, language = PANEL_EXTS[name]
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(PANEL_FIXTURES / source, d / source)
    manifest = {"name": name, "version": "0.1.0", "exec": f"./{source}", "language": language}
    (d / "extension.json").write_text(json.dumps(manifest))
    return d
