"""The mount points of the sandboxes' private ``/tmp`` cannot be swapped by a sandbox
that may write the temporary directory holding them (the agent's ``bash`` run in
``/tmp``): renamed away with a symlink left in their place, the next sandbox would
get a host directory of the attacker's choice as its ``/tmp``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sandbox

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend")

DRIVER = Path(__file__).with_name("protect_driver.py")

#: Each line tries one way to move the pair or plant a link in its place ($b: the
#: pair's directory, in the working directory, which is the temporary directory).
ATTACKS = (
    "cd $b && mv tmp moved && echo MOVED-TMP",
    "cd $b && rm -rf tmp && ln -s / tmp && echo LINKED-TMP",
    "mv $b $b.x && echo MOVED-BASE",
    "rm -rf $b && echo REMOVED-BASE",
    "ln -s / $b/shm/x && echo PLANTED",
)


@pytest.mark.parametrize("where", ["TMPDIR", "XDG_RUNTIME_DIR"])
def test_bash_in_the_temp_dir_cannot_swap_the_private_tmp_mount_points(
    tmp_path: Path, where: str
) -> None:
    # The pair is made in the temporary directory TMPDIR names, or else in the
    # user's runtime directory: bash run in either must not reach it.
    if sandbox.select_sandbox("auto").backend != "bwrap":
        pytest.skip("no bwrap backend here")
    temp = tmp_path / "temp"
    temp.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "XDG_RUNTIME_DIR")}
    command = "b=$(echo corral-tmpfs-*); " + "; ".join(f"({a})" for a in ATTACKS) + "; echo DONE"
    request = {
        "tool": "bash",
        "workspace": str(temp),
        "corral_home": str(tmp_path / "home"),
        "home": str(tmp_path),
        "args": {"command": command},
        "mount_points": True,
    }
    out = subprocess.run(
        [sys.executable, str(DRIVER), json.dumps(request)],
        env={**env, where: str(temp)},
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr.decode()
    answer = json.loads(out.stdout.splitlines()[-1])  # after the log lines
    assert "DONE" in answer["text"], answer
    for word in ("MOVED-TMP", "LINKED-TMP", "MOVED-BASE", "REMOVED-BASE", "PLANTED"):
        assert word not in answer["text"], answer
    assert answer["mount_points_intact"] is True
    # Nothing was moved aside, and the host removed the pair when it exited.
    assert sorted(temp.iterdir()) == []
