"""Attacks through the real supervisor: restarts, reloads and quarantine, under bwrap.

Where ``sandbox_harness`` runs one spawn through a stand-in host, these attacks
need what only the supervisor does: validate a manifest, restart an extension
after a crash, reload. They run in the test process itself, with
``--sandbox required``: as root under ``./dev test``, and as an unprivileged user
in CI's second run. The attacking extension is ``attacks/agent.py``, driven
through its slash commands.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio

from helpers.paths import ATTACKS
from supervisor import (
    ExtensionGone,
    ExtensionInfo,
    SupervisorClient,
    SupervisorConfig,
    SupervisorEvent,
    data_dir,
    identity_of,
    log_file,
    open_supervisor,
    quarantine_file,
)

AGENT = ATTACKS / "agent.py"
#: Bound for one whole start/attack/stop cycle (far above normal runs).
CYCLE = 60.0

E = TypeVar("E")


class Lab:
    """Corral's home, extension directories, and the user's files worth stealing."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "corral"
        self.exts = root / "exts"
        self.identities: dict[str, str] = {}
        self.token = f"SECRET-{uuid.uuid4().hex}"
        #: The user's secrets: a directory that no extension is granted.
        self.vault = root / "user" / "vault"
        (self.vault / "keys").mkdir(parents=True)
        (self.vault / "keys" / "id_rsa").write_text(f"{self.token}\n")
        self.exts.mkdir()

    def dir(self, *parts: str) -> Path:
        """A directory of the user's, outside corral's home."""
        path = self.root.joinpath("user", *parts)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def extension(self, name: str, **permissions: Any) -> Path:
        """An ``agent.py`` extension called ``name`` with these permissions."""
        ext = self.exts / name
        ext.mkdir()
        shutil.copy(AGENT, ext / "agent.py")
        self.manifest(ext, name, **permissions)
        # Its state is keyed by name and directory; remembered before any swap.
        self.identities[name] = identity_of(name, str(ext))
        return ext

    def manifest(self, ext: Path, name: str, **permissions: Any) -> None:
        """(Re)write the manifest of ``ext``."""
        manifest = {"name": name, "exec": "agent.py", "language": "python"}
        (ext / "extension.json").write_text(json.dumps({**manifest, "permissions": permissions}))

    def data_dir(self, name: str) -> Path:
        return data_dir(self.home, self.identities[name])

    def log(self, name: str) -> Path:
        return log_file(self.home, self.identities[name])

    def quarantine(self, name: str) -> Path:
        return quarantine_file(self.home, self.identities[name])

    def config(self, **overrides: Any) -> SupervisorConfig:
        fields: dict[str, Any] = {
            "home": str(self.home),
            "sandbox": "required",
            # Its extension sends ``ready`` after registering: a quiet period as short
            # as 0.1 s was a loaded machine's pause between two frames taken for ready
            # (the command then unknown); it only needs to stay under the cap.
            "ready_quiet": 2.0,
            "restart_backoff": 0.05,
            "restart_backoff_max": 0.2,
            "shutdown_grace": 1.0,
            "term_grace": 0.5,
        }
        return SupervisorConfig(**{**fields, **overrides})

    def open(self, *exts: Path) -> AbstractAsyncContextManager[SupervisorClient]:
        return open_supervisor(self.config(), ext_paths=[str(e) for e in exts], discover=False)


async def act(client: SupervisorClient, ext: str, action: str, **args: Any) -> Any:
    """Run one of the agent's commands; its answer."""
    outcome = await client.invoke_command(f"{ext}-{action}", json.dumps(args))
    assert outcome.action == "display", outcome
    return json.loads(outcome.display)


async def crash(client: SupervisorClient, ext: str) -> None:
    """Make ``ext`` exit with status 3 (the supervisor will want to restart it)."""
    with pytest.raises(ExtensionGone):
        await client.invoke_command(f"{ext}-crash")


async def info(client: SupervisorClient, ext: str) -> ExtensionInfo:
    return next(i for i in await client.list_extensions() if i.name == ext)


async def wait_for(
    events: trio.MemoryReceiveChannel[SupervisorEvent],
    kind: type[E],
    pred: Callable[[E], bool] = lambda _e: True,
) -> E:
    """Receive events until one of ``kind`` matching ``pred`` arrives (bounded)."""
    with trio.fail_after(CYCLE / 2):
        async for event in events:
            if isinstance(event, kind) and pred(event):
                return event
    raise AssertionError(f"event channel closed before a {kind.__name__} arrived")
