"""The reference clients in examples/rpc run end to end against a real ``corral rpc``."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import trio
from helpers.paths import REPO
from helpers.paths import RPC_EXAMPLES as EXAMPLES
from helpers.rpc_harness import RPC_ARGV, rpc_env

SCRIPT = EXAMPLES / "turns.jsonl"


def corral_command(tmp_path: Path) -> str:
    """A ``corral`` executable for ``$CORRAL`` that runs this checkout's ``corral rpc``."""
    wrapper = tmp_path / "corral"
    body = " ".join(f"'{a}'" for a in RPC_ARGV)
    wrapper.write_text(
        f'#!/bin/sh\n[ "$1" = rpc ] || exit 2\nshift\nexec {body} "$@"\n', encoding="utf-8"
    )
    wrapper.chmod(0o755)
    return str(wrapper)


CLIENTS = {
    "python": lambda: [sys.executable, str(EXAMPLES / "client.py"), "--script", str(SCRIPT)],
    "shell": lambda: ["bash", str(EXAMPLES / "client.sh"), str(SCRIPT)],
    "node": lambda: ["node", str(EXAMPLES / "client.mjs"), "--script", str(SCRIPT)],
    "go": lambda: ["go", "run", str(EXAMPLES / "client.go"), "--script", str(SCRIPT)],
}
#: What each client needs on PATH (``./dev test`` installs them).
NEEDS = {"node": "node", "go": "go"}


@pytest.mark.slow
@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("token", ["", "s3cret"])
async def test_reference_client(tmp_path: Path, client: str, token: str) -> None:
    needs = NEEDS.get(client)
    if needs is not None and shutil.which(needs) is None:
        pytest.skip(f"{needs} is not installed (./dev test installs it)")
    env = rpc_env(tmp_path / "home", CORRAL=corral_command(tmp_path))
    if client == "go":
        # Its own build cache, and never the network (no module proxy, no toolchain).
        env.update(GOCACHE=str(tmp_path / "gocache"), GOPATH=str(tmp_path / "gopath"))
        env.update(GOPROXY="off", GOTOOLCHAIN="local")
    if token:
        env["CORRAL_RPC_TOKEN"] = token
    with trio.fail_after(60):
        done = await trio.run_process(
            CLIENTS[client](),
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            cwd=str(REPO),
            check=False,
        )
    out = done.stdout.decode()
    assert done.returncode == 0, (out, done.stderr.decode())
    assert "connected: corral" in out
    assert "Let me look at the README." in out
    assert "That is the start of the README." in out
    assert "[turn_end tool_use]" in out
    assert "corral exited with 0" in out
