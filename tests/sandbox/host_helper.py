"""A stand-in for corral's supervisor: runs one sandboxed extension the way it would.

The tests start this program (as root or as an unprivileged user) with a JSON job
on the command line. Like the supervisor, it validates the permissions, builds the
allowlisted environment, asks ``select_sandbox`` for a backend, plans and spawns
the extension, and cleans up. Unlike the supervisor it carries secrets on purpose
(its own environment, an inheritable descriptor to a secret file) so the tests can
check none of them reaches the extension.

Job fields: ``mode``, ``cgroups``, ``attack`` (file in the extension dir),
``args``, ``argv``, ``interpreter`` (default ``argv[0]``), ``permissions``,
``ext_dir``, ``data_dir``, ``home``, ``corral_home``,
``secret_file``, ``stdin``, ``timeout``, ``action`` (``run`` | ``hold``),
``then`` (``hold``, once the child printed ``READY``: ``exit`` when our stdin
closes, or ``wait``),
``idle`` (``hold``: seconds to wait after ``READY`` before writing "ping"),
``spawn_from`` (``main`` | ``short-thread``: ``sandbox.spawn`` from a thread
that exits right after), ``tty`` (inherit our stdin, a terminal, without a new
session).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import msgspec

from sandbox import (
    LaunchPlan,
    LaunchRequest,
    Permissions,
    Spawned,
    check_permissions,
    host_environment,
    select_sandbox,
    spawn,
)


def _env(job: dict[str, Any], perms: Permissions) -> dict[str, str]:
    # The allowlist the supervisor uses (not a copy of it).
    env = host_environment()
    env.update(
        CORRAL_EXT_NAME="attacker",
        CORRAL_EXT_DIR=job["ext_dir"],
        CORRAL_DATA_DIR=job["data_dir"],
        CORRAL_PROTOCOL_VERSION="1",
    )
    for name in perms.env:
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _popen(plan: LaunchPlan, job: dict[str, Any]) -> subprocess.Popen[bytes] | Spawned:
    if job.get("tty"):
        # The terminal is our stdin and controlling terminal; no new session and no
        # guardian (whose children are in its own session), so only the sandbox's
        # own --new-session stands between it and the extension. Nothing prepared:
        # this is about the terminal, not the limits (nor the namespace the child
        # makes, which a root host's bwrap checks: it disables them itself here).
        argv = ["--disable-userns" if a == "--assert-userns-disabled" else a for a in plan.argv]
        return subprocess.Popen(
            argv,
            stdin=0,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=plan.env,
            cwd=plan.cwd,
            close_fds=True,
            pass_fds=plan.pass_fds,
        )
    if job.get("spawn_from", "main") == "main":
        return spawn(plan)
    box: list[Spawned] = []
    # A worker thread that is gone right after the spawn, like trio's cached
    # threads after 10 s idle.
    thread = threading.Thread(target=lambda: box.append(spawn(plan)))
    thread.start()
    thread.join()
    return box[0]


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    job = json.loads(sys.argv[1])
    # A secret descriptor the extension must not inherit.
    secret_fd = os.open(job["secret_file"], os.O_RDONLY)
    os.set_inheritable(secret_fd, True)
    checked = check_permissions(
        msgspec.convert(job.get("permissions", {}), Permissions),
        job["ext_dir"],
        home=job["home"],
        corral_home=job["corral_home"],
    )
    perms = checked.permissions
    sandbox = select_sandbox(job.get("mode", "required"), cgroups=job.get("cgroups", True))
    argv = [sys.executable, os.path.join(job["ext_dir"], job["attack"]), *job.get("args", [])]
    if job.get("argv"):
        argv = job["argv"]
    request = LaunchRequest(
        name="attacker",
        argv=argv,
        env=_env(job, perms),
        ext_dir=job["ext_dir"],
        data_dir=job["data_dir"],
        permissions=perms,
        # Like the supervisor: the interpreter is ours, unless the job runs the
        # extension's own program directly ("interpreter": "").
        interpreter=job.get("interpreter", argv[0]),
        pins=checked.pins,
        hidden=[job["corral_home"]],
    )
    plan = sandbox.plan(request)
    info = {
        "backend": plan.backend,
        "sandboxed": plan.sandboxed,
        "notes": plan.notes,
        "cgroups": [c for c in [plan.cgroup, *plan.extra_cgroups] if c],
        "bound": [p.path for p in plan.pins],
        "host_pid": os.getpid(),
    }
    proc = _popen(plan, job)
    try:
        if job.get("action", "run") == "run":
            try:
                out, err = proc.communicate(
                    job.get("stdin", "").encode(), timeout=job.get("timeout", 60)
                )
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                info["timed_out"] = True
            info.update(
                returncode=proc.returncode,
                stdout=out.decode("utf-8", "replace"),
                stderr=err.decode("utf-8", "replace"),
            )
            _emit(info)
            return
        _emit({"event": "spawned", "pid": proc.pid, **info})
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            _emit({"event": "child", "line": line})
            if not line.startswith("READY"):
                continue
            if job.get("then") == "exit":
                # When the test says so (it closes our stdin), the host goes away
                # without stopping anything.
                sys.stdin.read()
                os._exit(0)
            if "idle" in job:
                # Leave the extension alone for a while (no timer of ours is
                # running), then check it still answers.
                time.sleep(job["idle"])
                assert proc.stdin is not None
                proc.stdin.write(b"ping\n")
                proc.stdin.close()
        proc.wait()
        _emit({"event": "exited", "returncode": proc.returncode})
    finally:
        if proc.poll() is not None:
            sandbox.cleanup(plan)


if __name__ == "__main__":
    main()
