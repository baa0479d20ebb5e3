"""MCP servers for the tests: the fixture server (written with the SDK) as stdio or HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import mcp

from agent._tools.mcp import ServerConfig
from sandbox import Permissions

from .paths import MCP_SERVER as FIXTURE

#: Where the SDK is installed: the confined server is shown only that, read-only.
SITE = os.path.dirname(os.path.dirname(os.path.realpath(mcp.__file__)))


def stdio_config(*args: str) -> ServerConfig:
    """The fixture server over stdio, confined, seeing the script and the SDK."""
    return ServerConfig(
        command=sys.executable,
        args=[str(FIXTURE), *args],
        env={"PYTHONPATH": SITE},
        permissions=Permissions(read_only=[str(FIXTURE.parent), SITE]),
    )


def stdio_entry(*args: str) -> dict[str, object]:
    """:func:`stdio_config` as an ``mcpServers`` entry."""
    return {
        "command": sys.executable,
        "args": [str(FIXTURE), *args],
        "env": {"PYTHONPATH": SITE},
        "permissions": {"read_only": [str(FIXTURE.parent), SITE]},
    }


@contextmanager
def http_server(*args: str) -> Iterator[int]:
    """The fixture server over streamable HTTP on 127.0.0.1; yields its port."""
    proc = subprocess.Popen(
        [sys.executable, str(FIXTURE), "--http", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT "), line
        yield int(line.split()[1])
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
