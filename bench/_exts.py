"""Extensions the benchmarks run, and the same extensions started without corral.

* :func:`chaos_dirs`: ``examples/extensions/chaos`` under given names (tool calls,
  intercept chains, stubborn stops);
* :func:`lean_dirs`: the lightest realistic extension (the stdlib-only SDK, one
  tool, a ``ready`` frame), for start-up and stop;
* :func:`start_stop`: enter ``open_supervisor`` until every extension is ready,
  then leave it (all stopped), timing both;
* :func:`direct_lean`: the same lean extensions started without corral, as a
  host would with ``subprocess.Popen``: the baseline of "ready" and "stop";
* :func:`first_start`: the first start in a fresh host process, with corral (its
  guardian starts too; a sandbox mode) or directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import psutil
import trio
from _common import ROOT, stopwatch
from _lean import LEAN, child_env, lean_dirs

from supervisor import SupervisorClient, SupervisorConfig, open_supervisor
from supervisor.lowlevel import SDK_DIR

__all__ = [
    "CHAOS",
    "LEAN",
    "PLAIN_BWRAP",
    "VIEW_BWRAP",
    "StartStop",
    "alive",
    "chaos_dirs",
    "child_env",
    "config",
    "direct_lean",
    "first_start",
    "lean_dirs",
    "running",
    "start_stop",
    "wrapped",
]

CHAOS = ROOT / "examples" / "extensions" / "chaos" / "chaos.py"


def chaos_dirs(root: Path, names: list[str], *flags: str) -> list[str]:
    """One extension directory per name, each running chaos.py as that name."""
    paths = []
    for name in names:
        d = root / "exts" / name
        d.mkdir(parents=True, exist_ok=True)
        manifest = {
            "name": name,
            "version": "1.0.0",
            "exec": str(CHAOS),
            "args": ["--name", name, *flags],
            "language": "python",
        }
        (d / "extension.json").write_bytes(msgspec.json.encode(manifest))
        paths.append(str(d))
    return paths


def config(root: Path, **overrides: Any) -> SupervisorConfig:
    """A supervisor without a sandbox (``--sandbox off``: corral's own costs)."""
    return SupervisorConfig(home=str(root / "home"), **{"sandbox": "off", **overrides})


async def running(client: SupervisorClient) -> list[int]:
    """Pids of the extensions in state ``running``."""
    return [i.pid for i in await client.list_extensions() if i.state == "running" and i.pid]


def alive(pids: list[int]) -> int:
    """How many of ``pids`` still run."""
    return sum(1 for pid in pids if psutil.pid_exists(pid))


class StartStop(msgspec.Struct, frozen=True, kw_only=True):
    """One open/close of a supervisor."""

    ready_s: float
    stop_s: float
    running: int
    left_alive: int


async def start_stop(paths: list[str], cfg: SupervisorConfig) -> StartStop:
    """Time entering ``open_supervisor`` (all ready) and leaving it (all stopped)."""
    with trio.fail_after(300):
        t0 = time.perf_counter()
        async with open_supervisor(cfg, ext_paths=paths, discover=False) as c:
            t1 = time.perf_counter()
            pids = await running(c)
            t2 = time.perf_counter()
        t3 = time.perf_counter()
    return StartStop(ready_s=t1 - t0, stop_s=t3 - t2, running=len(pids), left_alive=alive(pids))


#: Plain bubblewrap, as someone without corral would confine an extension: every
#: namespace, the root read-only, a fresh /dev, /proc and /tmp, dying with its parent.
PLAIN_BWRAP = [
    "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/", "/",
    "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--",
]  # fmt: skip

#: The /etc entries corral shows every extension (``docs/sandbox.md``), bound here.
_ETC_VIEW = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf",
    "hosts", "alternatives", "os-release", "locale.alias", "default/locale", "mime.types",
)  # fmt: skip


def _view_bwrap() -> list[str]:
    args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
    for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in _ETC_VIEW:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return [*args, "--"]


#: Plain bubblewrap showing what corral shows a lean extension instead of the whole
#: root, each part bound by path: ``/usr`` and its links, the same /etc entries, the
#: interpreter's prefixes, the SDK and the extension's directory, a fresh /dev,
#: /proc, /tmp and /dev/shm, the root read-only. Not what corral adds beyond it:
#: the data directory (none here), the descriptors and checks of each bind, the
#: /etc copies, the capped tmpfs, seccomp, rlimits and the plan.
VIEW_BWRAP = _view_bwrap()


def wrapped(wrap: list[str] | None, ext_dir: str) -> list[str]:
    """``wrap`` (ending in ``--``) with the extension's directory bound (read-only) over
    its fresh /tmp, where a bench's temporary directories are; so are the interpreter's
    prefixes and the SDK when they live under /tmp too (a checkout cloned there), or
    always for :data:`VIEW_BWRAP`, whose root shows nothing else (then read-only)."""
    if not wrap:
        return []
    view = wrap is VIEW_BWRAP
    binds: list[str] = []
    for path in dict.fromkeys((sys.prefix, sys.base_prefix, str(SDK_DIR), ext_dir)):
        if view or path == ext_dir or Path(path).resolve().is_relative_to("/tmp"):
            binds += ["--ro-bind", path, path]
    if view:
        binds += ["--remount-ro", "/"]
    return [*wrap[:-1], *binds, "--chdir", ext_dir, "--"]


def direct_lean(paths: list[str], wrap: list[str] | None = None) -> tuple[float, float]:
    """Without corral: seconds until the lean extensions in ``paths``, started at once
    (each in a session of its own, as corral starts them), all sent ``ready``, and
    seconds from closing their stdin until all exited. ``wrap``: a command to start
    each under (:data:`PLAIN_BWRAP`)."""
    pipe = subprocess.PIPE
    with stopwatch() as ready:
        procs = [
            subprocess.Popen(
                [*wrapped(wrap, d), sys.executable, str(Path(d) / "lean.py")],
                env=child_env() | {"PYTHONPATH": SDK_DIR, "CORRAL_EXT_NAME": Path(d).name},
                cwd=d,
                stdin=pipe,
                stdout=pipe,
                start_new_session=True,
            )
            for d in paths
        ]
        for p in procs:
            assert p.stdout is not None
            for line in p.stdout:
                if b'"ready"' in line:
                    break
            else:
                raise RuntimeError(f"{p.args} exited before it was ready")
    with stopwatch() as stop:
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
        for p in procs:
            p.wait()
    for p in procs:
        assert p.stdout is not None
        p.stdout.close()
    return ready[0], stop[0]


#: A fresh host process: its first start of the extensions, or the same started directly.
_FIRST = """\
import json, sys, logging
sys.path.insert(0, sys.argv[1])
import structlog, trio
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
from _exts import direct_lean, start_stop, config
from pathlib import Path
paths, root, how = json.loads(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
if how == "direct":
    print(json.dumps(direct_lean(paths)[0]))
else:
    run = trio.run(start_stop, paths, config(root, sandbox=how))
    assert run.running == len(paths), run
    print(json.dumps(run.ready_s))
"""


def first_start(paths: list[str], root: Path, how: str) -> float:
    """Seconds until ``paths`` are ready in a fresh host process: ``how`` is ``direct``
    (no corral) or the sandbox mode corral starts them with (``off``, ``auto``)."""
    argv = [sys.executable, "-c", _FIRST, str(Path(__file__).parent), json.dumps(paths), str(root)]
    out = subprocess.run(
        [*argv, how], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1]))
