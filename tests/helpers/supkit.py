"""Helpers for the supervisor tests: temp extensions, short deadlines, event waits.

Every extension the tests run is a real subprocess speaking NDJSON over real pipes:
``examples/extensions/chaos/chaos.py`` with flags, an example extension, or a tiny
inline Python script written into a temp directory next to its ``extension.json``.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from collections.abc import Callable, MutableMapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import structlog
import trio

from helpers.paths import CHAOS, TOOLHOST_FIXTURES
from sandbox import select_sandbox
from supervisor import (
    ExtensionSpec,
    HostInfo,
    SupervisorClient,
    SupervisorConfig,
    SupervisorEvent,
    TrustStore,
    identity_of,
    load_manifest,
    log_file,
    open_supervisor,
)

#: Short deadlines so the suite stays quick; tests override single fields.
FAST: dict[str, Any] = {
    "sandbox": "off",
    "handshake_timeout": 2.0,
    "ready_quiet": 0.1,
    "ready_cap": 1.0,
    "tool_timeout": 3.0,
    "command_timeout": 3.0,
    "intercept_timeout": 0.5,
    "shutdown_grace": 0.5,
    "term_grace": 0.3,
    "restart_backoff": 0.05,
    "restart_backoff_max": 0.2,
    "quarantine_crashes": 3,
}

#: Bound for one whole start/serve/stop cycle of a test (far above normal runs).
CYCLE = 20.0

#: Prelude of inline extensions: raw frames, standard library only.
PRELUDE = """\
import json, os, sys
NAME = os.environ.get("CORRAL_EXT_NAME", "inline")

def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\\n")
    sys.stdout.flush()

def frames():
    for line in sys.stdin:
        line = line.strip()
        if line:
            yield json.loads(line)

"""

E = TypeVar("E")


class Kit:
    """Builds extension directories under a temp dir and opens supervisors on them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.exts = root / "exts"
        self.home.mkdir()
        self.exts.mkdir()

    def config(self, **overrides: Any) -> SupervisorConfig:
        """A config on this kit's home with the short deadlines of :data:`FAST`."""
        return SupervisorConfig(home=str(self.home), **{**FAST, **overrides})

    def write(
        self,
        name: str,
        exec_: str,
        args: list[str] | None = None,
        *,
        where: Path | None = None,
        dirname: str | None = None,
        **manifest: Any,
    ) -> Path:
        """Write ``<where>/<dirname or name>/extension.json``; returns the directory."""
        d = (where or self.exts) / (dirname or name)
        d.mkdir(parents=True, exist_ok=True)
        data = {"name": name, "version": "1.0.0", "exec": exec_, "args": args or [], **manifest}
        (d / "extension.json").write_text(json.dumps(data))
        return d

    def chaos(self, name: str, *flags: str, where: Path | None = None, **manifest: Any) -> Path:
        """An extension running chaos.py (by absolute path) with ``flags``."""
        manifest.setdefault("language", "python")
        return self.write(name, str(CHAOS), ["--name", name, *flags], where=where, **manifest)

    def inline(self, name: str, body: str, *, where: Path | None = None, **manifest: Any) -> Path:
        """An extension whose ``ext.py`` is :data:`PRELUDE` plus ``body`` (dedented)."""
        manifest.setdefault("language", "python")
        d = self.write(name, "./ext.py", where=where, **manifest)
        (d / "ext.py").write_text(PRELUDE + textwrap.dedent(body))
        return d

    def toolhost(
        self,
        name: str,
        runtime: str,
        *modules: str,
        config: dict[str, Any] | None = None,
        **manifest: Any,
    ) -> Path:
        """A tool host running corral's ``runtime`` runner on copies of fixture modules
        (from ``toolhost_fixtures/``); ``config`` joins ``modules`` in its config."""
        d = self.exts / name
        d.mkdir(parents=True, exist_ok=True)
        for module in modules:
            shutil.copy(TOOLHOST_FIXTURES / module, d / module)
        settings = {"modules": [f"./{m}" for m in modules], **(config or {})}
        data = {"name": name, "kind": "tool-host", "runtime": runtime, "config": settings}
        (d / "extension.json").write_text(json.dumps({**data, **manifest}))
        return d

    def spec(self, d: Path, source: str = "global") -> ExtensionSpec:
        """The extension in ``d`` as discovery would load it from ``source``."""
        return load_manifest(d, source, home=str(self.home))  # type: ignore[arg-type]

    def trust(self, *dirs: Path, source: str = "global") -> None:
        """Pin each extension directory as ``corral ext trust`` would."""
        store = TrustStore(self.home)
        for d in dirs:
            spec = self.spec(d, source)
            store.pin(spec, store.digest(spec))

    def open(
        self,
        *paths: Path,
        config: SupervisorConfig | None = None,
        host: HostInfo | None = None,
        discover: bool = False,
        project_dir: str | None = None,
    ) -> AbstractAsyncContextManager[SupervisorClient]:
        """``open_supervisor`` on ``paths`` (as ``--ext``), installed ones not scanned."""
        return open_supervisor(
            config or self.config(),
            ext_paths=[str(p) for p in paths],
            discover=discover,
            project_dir=project_dir,
            host=host,
        )

    def log_path(self, name: str) -> Path:
        """The stderr log of the extension ``name`` in :attr:`exts` (logs are keyed by identity)."""
        return log_file(self.home, identity_of(name, str(self.exts / name)))

    def log_text(self, name: str) -> str:
        """The extension's stderr log, or "" when it does not exist."""
        path = self.log_path(name)
        return path.read_text(errors="replace") if path.exists() else ""

    def started_pids(self, name: str) -> list[int]:
        """Pids the supervisor noted as started, from the extension log."""
        return [int(m) for m in re.findall(r"\[corral\] started pid (\d+)", self.log_text(name))]

    def spawned_pids(self, name: str) -> list[int]:
        """Grandchild pids chaos ``--spawn`` reported on its stderr."""
        return [int(m) for m in re.findall(r"chaos: spawned pid (\d+)", self.log_text(name))]


def require_bwrap() -> None:
    """Skip the test unless ``--sandbox required`` gets bubblewrap here."""

    try:
        backend = select_sandbox("required").backend
    except Exception as exc:
        pytest.skip(f"no sandbox here: {exc}")
    if backend != "bwrap":
        pytest.skip(f"the sandbox here is {backend}")


async def wait_for(
    events: trio.MemoryReceiveChannel[SupervisorEvent],
    kind: type[E],
    pred: Callable[[E], bool] = lambda _e: True,
    *,
    timeout: float = 10.0,
    seen: list[SupervisorEvent] | None = None,
) -> E:
    """Receive events until one of ``kind`` matching ``pred`` arrives (bounded)."""
    with trio.fail_after(timeout):
        async for event in events:
            if seen is not None:
                seen.append(event)
            if isinstance(event, kind) and pred(event):
                return event
    raise AssertionError(f"event channel closed before a {kind.__name__} arrived")


def capture_logs() -> AbstractContextManager[list[MutableMapping[str, Any]]]:
    """``structlog.testing.capture_logs`` that keeps context-bound keys (``extension``)."""
    return structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars])
