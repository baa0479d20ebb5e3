"""Running a dynamic tool's program, confined and capped, as the seed caps it.

Each run gets a fresh private directory holding the program (bound read-only, the
working directory) and an empty ``scratch`` directory (read-write, ``$HOME``): the
only host paths the program sees besides the system directories, the Python
installation and corral's ``corral_tools`` (plus ``msgspec``, which it decodes
arguments with). No network (a fresh network namespace with bubblewrap), or, for
a tool granted destinations (its ``network`` capability), TCP to those only
through corral's egress proxy, served while the call runs; a minimal environment,
the limits of :data:`LIMITS`, a timeout (60 s) after which the process group is
killed, and a cap on stdout (1 MiB) past which it is killed too. The directory is
removed afterwards. The program is written from memory at every run, from the
entry that was checked, so nothing on disk can change what runs.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import typing
from collections.abc import Sequence
from pathlib import Path

import msgspec
import trio

import supervisor
from sandbox import LaunchRequest, Limits, Permissions, Sandbox
from supervisor import EgressReport, NetGuard
from supervisor.lowlevel import Egress, describe_exit, open_child

__all__ = ["LIMITS", "SDK_DIR", "DynamicRunner", "RunCaps", "RunResult"]

#: corral's SDK directory (``corral_tools``), as the supervisor hands it to extensions.
SDK_DIR = str(Path(supervisor.__file__).resolve().with_name("_sdk"))
#: ``msgspec`` (``corral_tools`` decodes the arguments with it): only its own directory
#: is bound, and its parent is on ``PYTHONPATH`` so that it alone is importable.
_MSGSPEC_DIR = os.path.dirname(os.path.realpath(msgspec.__file__))

#: Resource limits of one run (memory for the whole tree, processes, files, /tmp).
LIMITS = Limits(memory_mb=512, processes=32, open_files=128, tmp_mb=64, file_mb=64)
_STDERR_TAIL = 4096
#: After the program exits, wait this long for its output pipe to close.
_DRAIN_GRACE = 2.0


class RunCaps(msgspec.Struct, frozen=True, kw_only=True):
    """The caps of one call (the seed's)."""

    #: Seconds before the process group is killed.
    timeout: float = 60.0
    #: Bytes of stdout kept; the process is killed when it writes more.
    max_stdout: int = 1024 * 1024


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one run produced."""

    returncode: int | None
    stdout: bytes
    #: The end of stderr (a traceback), decoded.
    stderr: str
    timed_out: bool = False
    #: stdout passed the cap: the process was killed and ``stdout`` is cut.
    overflowed: bool = False
    #: Ran inside a sandbox backend.
    sandboxed: bool = True

    def status(self) -> str:
        """How it ended, for messages."""
        return describe_exit(self.returncode)


def _environment(where: str, scratch: str) -> dict[str, str]:
    """Every variable a program sees, with or without a sandbox (docs/tools.md lists
    them; a test compares): a sandbox points ``TMPDIR`` at its private ``/tmp``."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": scratch,
        "PWD": where,  # the working directory (bubblewrap's --chdir sets it too)
        "TMPDIR": scratch,
        "LANG": "C.UTF-8",
        "PYTHONPATH": f"{SDK_DIR}:{os.path.dirname(_MSGSPEC_DIR)}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }


@typing.final
class DynamicRunner:
    """Runs dynamic tool programs in the sandbox.

    Args:
        sandbox: the backend; None means the session runs without one
            (``--sandbox off``, or none available): programs then run unconfined
            (the ``none`` backend) with the same environment, limits, caps and timeout.
        python: the interpreter (corral's own by default).
        guard: the network guard of the egress proxy of tools granted destinations
            (default: public addresses only).
        report: awaited with each connection that proxy refuses (the audit log).
    """

    def __init__(
        self,
        sandbox: Sandbox | None,
        *,
        python: str = sys.executable,
        guard: NetGuard | None = None,
        report: EgressReport | None = None,
    ) -> None:
        self._sandbox = sandbox if sandbox is not None and sandbox.backend != "none" else None
        self._python = os.path.abspath(python)
        self._guard = guard or NetGuard()
        self._report = report

    def __repr__(self) -> str:
        backend = self._sandbox.backend if self._sandbox else "none"
        return f"<DynamicRunner sandbox={backend}>"

    @property
    def sandboxed(self) -> bool:
        """True when programs run inside a sandbox backend."""
        return self._sandbox is not None

    def _request(self, name: str, where: str, mode: str, network: list[str]) -> LaunchRequest:
        scratch = os.path.join(where, "scratch")
        return LaunchRequest(
            name=f"dyn-{name}",
            argv=[self._python, "-s", "-B", os.path.join(where, "tool.py"), mode],
            env=_environment(where, scratch),
            ext_dir=where,
            data_dir=scratch,
            permissions=Permissions(network=network or False, limits=LIMITS),
            runtime_paths=[SDK_DIR, _MSGSPEC_DIR],
            interpreter=self._python,
        )

    async def run(
        self,
        name: str,
        source: str,
        mode: str,
        stdin: bytes,
        caps: RunCaps,
        *,
        network: Sequence[str] = (),
    ) -> RunResult:
        """Run ``source`` with ``mode`` (``--describe`` or ``--call``), ``stdin`` as input.

        ``network``: the destinations the run may reach (the tool's checked capability).

        Raises:
            SandboxError: the sandbox cannot plan the run.
            OSError: the program could not be started.

        Cancellation: the process group is killed and reaped and the directory
        removed (shielded, bounded) before ``Cancelled`` propagates.
        """
        where = await trio.to_thread.run_sync(_prepare, source)
        try:
            return await self._run(name, where, mode, stdin, caps, list(network))
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(shutil.rmtree, where, True)

    async def _run(
        self, name: str, where: str, mode: str, stdin: bytes, caps: RunCaps, network: list[str]
    ) -> RunResult:
        out = bytearray()
        err = bytearray()
        overflowed = False
        request = self._request(name, where, mode, network)
        egress = None
        if network:
            grant = f"the network of dynamic tool {name} (new_tool's network argument)"
            egress = Egress(request.name, network, self._guard, grant=grant, report=self._report)
        async with open_child(self._sandbox, request, egress=egress) as child:
            assert child.stdin is not None
            assert child.stdout is not None
            assert child.stderr is not None
            stdout, stderr, feed = child.stdout, child.stderr, child.stdin

            async def write() -> None:
                try:
                    await feed.send_all(stdin)
                    await feed.aclose()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass  # it exited without reading: its output says why

            async def read_out(drained: trio.Event) -> None:
                nonlocal overflowed
                while chunk := await stdout.receive_some(65536):
                    out.extend(chunk)
                    if len(out) > caps.max_stdout:
                        overflowed = True
                        child.kill()
                        break
                drained.set()

            async def read_err() -> None:
                while chunk := await stderr.receive_some(65536):
                    err.extend(chunk)
                    del err[:-_STDERR_TAIL]

            with trio.move_on_after(caps.timeout) as scope:
                async with trio.open_nursery() as nursery:
                    drained = trio.Event()
                    nursery.start_soon(write)
                    nursery.start_soon(read_err)
                    nursery.start_soon(read_out, drained)
                    await child.wait()
                    # Background jobs may keep the pipe open; nothing outlives the call.
                    child.kill()
                    with trio.move_on_after(_DRAIN_GRACE):
                        await drained.wait()
                    nursery.cancel_scope.cancel()
            timed_out = scope.cancelled_caught and not overflowed
        return RunResult(
            returncode=child.returncode,
            stdout=bytes(out[: caps.max_stdout]),
            stderr=err.decode("utf-8", "replace"),
            timed_out=timed_out,
            overflowed=overflowed,
            sandboxed=self._sandbox is not None,
        )


def _prepare(source: str) -> str:
    """A private directory holding ``tool.py`` (read-only) and an empty ``scratch``."""
    where = tempfile.mkdtemp(prefix="corral-dyn-")
    try:
        program = os.path.join(where, "tool.py")
        fd = os.open(program, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(source)
        os.mkdir(os.path.join(where, "scratch"), 0o700)
    except BaseException:
        shutil.rmtree(where, ignore_errors=True)
        raise
    return where
