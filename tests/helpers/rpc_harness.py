"""Drive a real ``corral rpc`` process through its pipes.

:func:`open_rpc` starts the process with the scripted provider (no installed
extensions, sandbox off, a private home); :class:`RpcProcess` writes commands and
reads the JSON lines that come back. Every frame read is kept in ``frames`` so a
failing assertion can show the whole exchange.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from helpers.paths import CHAOS, REPO

#: The ``corral rpc`` command without the console script.
RPC_ARGV = [sys.executable, "-c", "from agent._cli.rpc_cmd import rpc_cmd; rpc_cmd()"]

Frame = dict[str, Any]


class RpcProcess:
    """One running ``corral rpc`` and the frames it wrote."""

    def __init__(self, proc: trio.Process, stderr: Path) -> None:
        self.proc = proc
        self.stderr_path = stderr
        self.frames: list[Frame] = []
        #: The raw bytes of each frame in ``frames``.
        self.raw: list[bytes] = []
        self._buf = bytearray()
        self._ids = 0
        self._eof = False

    @property
    def stderr(self) -> str:
        """What the process wrote to stderr so far."""
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    async def send_raw(self, data: bytes) -> None:
        """Write ``data`` to the process's stdin as is."""
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(data)

    async def send(self, *frames: Frame) -> None:
        """Write ``frames`` as JSON lines in one write (pipelined)."""
        await self.send_raw(b"".join(json.dumps(f).encode() + b"\n" for f in frames))

    async def close_stdin(self) -> None:
        """Close the process's stdin (end of input)."""
        assert self.proc.stdin is not None
        await self.proc.stdin.aclose()

    async def read(self) -> Frame:
        """The next frame; raises EOFError at the end of stdout."""
        assert self.proc.stdout is not None
        while True:
            newline = self._buf.find(b"\n")
            if newline >= 0:
                line = bytes(self._buf[:newline])
                del self._buf[: newline + 1]
                frame: Frame = json.loads(line)
                self.frames.append(frame)
                self.raw.append(line)
                return frame
            if self._eof:
                raise EOFError(f"stdout ended; stderr:\n{self.stderr[-3000:]}")
            data = await self.proc.stdout.receive_some(1 << 16)
            if not data:
                self._eof = True
            self._buf += data

    async def read_all(self) -> list[Frame]:
        """Every frame until stdout ends."""
        out: list[Frame] = []
        while True:
            try:
                out.append(await self.read())
            except EOFError:
                return out

    async def until(self, match: Callable[[Frame], bool]) -> list[Frame]:
        """Frames up to and including the first one ``match`` accepts."""
        out: list[Frame] = []
        while True:
            frame = await self.read()
            out.append(frame)
            if match(frame):
                return out

    async def until_done(self, count: int = 1) -> list[Frame]:
        """Frames up to and including the ``count``-th ``done``."""
        seen = 0

        def is_done(frame: Frame) -> bool:
            nonlocal seen
            seen += frame.get("type") == "done"
            return seen >= count

        return await self.until(is_done)

    async def call(self, kind: str, **fields: Any) -> Frame:
        """Send one command with a fresh id and return its response (other frames kept)."""
        self._ids += 1
        ident = f"t{self._ids}"
        await self.send({"id": ident, "type": kind, **fields})
        frames = await self.until(lambda f: f.get("type") == "response" and f.get("id") == ident)
        return frames[-1]

    async def wait(self) -> int:
        """Wait for the process to exit; its status."""
        return await self.proc.wait()


def types(frames: list[Frame]) -> list[str]:
    """The ``type`` of each frame."""
    return [f["type"] for f in frames]


def events(frames: list[Frame]) -> list[str]:
    """The types of the non-response frames."""
    return [f["type"] for f in frames if f["type"] != "response"]


def rpc_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a test ``corral rpc``: private home, the repo importable."""
    tokens = ("CORRAL_RPC_TOKEN", "ZOTCORE_RPC_TOKEN")
    env = {k: v for k, v in os.environ.items() if k not in tokens}
    env["CORRAL_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(
        [p for p in [os.environ.get("PYTHONPATH", ""), str(REPO)] if p]
    )
    env.update(extra)
    return env


@asynccontextmanager
async def open_rpc(
    tmp_path: Path,
    script: str | None,
    *args: str,
    exts: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> AsyncIterator[RpcProcess]:
    """Start ``corral rpc`` with ``script`` (scripted provider) and ``args``.

    On leaving, stdin is closed and the process is waited for (killed after 20 s).
    """
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    argv = [*RPC_ARGV, "--no-extensions", "--sandbox", "off", "--cwd", str(work)]
    if script is not None:
        argv += ["--provider", "scripted", "--script", script]
    for ext in exts:
        argv += ["-e", ext]
    argv += list(args)
    stderr_path = tmp_path / f"rpc-stderr-{len(list(tmp_path.glob('rpc-stderr-*')))}.log"
    with stderr_path.open("wb") as stderr:
        proc = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env if env is not None else rpc_env(home),
            cwd=str(work),
        )
    rpc = RpcProcess(proc, stderr_path)
    try:
        yield rpc
    except BaseException:
        # Shown by pytest with the failure: the exchange so far and the server's log.
        print("frames read:", *(r.decode() for r in rpc.raw[-60:]), sep="\n  ")
        print("stderr:", rpc.stderr[-4000:], sep="\n")
        raise
    finally:
        with trio.CancelScope(shield=True):
            assert proc.stdin is not None
            await proc.stdin.aclose()
            with trio.move_on_after(20):
                await rpc.read_all()  # drained, so the process can never block on stdout
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            assert proc.stdout is not None
            await proc.stdout.aclose()


def write_script(tmp_path: Path, *turns: Frame, name: str = "script.jsonl") -> str:
    """A scripted-provider script with one model call per turn."""
    path = tmp_path / name
    path.write_text("".join(json.dumps(t) + "\n" for t in turns), encoding="utf-8")
    return str(path)


def chaos_ext(tmp_path: Path, *args: str, name: str = "chaos") -> str:
    """An extension dir running examples/extensions/chaos/chaos.py with ``args``."""
    where = tmp_path / "exts" / name
    where.mkdir(parents=True, exist_ok=True)
    extra = ["--name", name] if name != "chaos" else []
    manifest = {
        "name": name,
        "version": "1.0.0",
        "exec": str(CHAOS),
        "args": [*extra, *args],
        "language": "python",
    }
    (where / "extension.json").write_text(json.dumps(manifest), encoding="utf-8")
    return str(where)
