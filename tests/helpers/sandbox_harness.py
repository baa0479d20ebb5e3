"""Shared machinery of the sandbox tests: who runs the host, and a fake host to attack.

Attacks run for real: a host process (``host_helper.py``, a stand-in for the
supervisor) plans and spawns an attacking extension under bwrap, with the same
code path corral uses. When the tests run as root, every attack runs twice: with
a root host (cgroups available, uid 0 mapped into the sandbox) and with an
unprivileged host (``nobody``: user namespaces only, no cgroups), because the
kernel enforces several limits differently for the two.

(A module of its own, not ``conftest``: test modules import from it, and the
test directories are not packages.)
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers.paths import ATTACKS, HOST_HELPER
from helpers.paths import REPO as ROOT

#: Upper bound on any one host run; generous, since a loaded CI box is slow.
RUN_TIMEOUT = 90.0

IDENTITIES = ["root", "unprivileged"] if os.geteuid() == 0 else ["user"]


@dataclasses.dataclass(frozen=True)
class Identity:
    """A user to run the host as, and a Python that user can run it with."""

    name: str
    uid: int
    gid: int
    python: str
    pythonpath: str

    @property
    def privileged(self) -> bool:
        return self.uid == 0


def _unprivileged_user() -> pwd.struct_passwd:
    for name in ("nobody", "corral-test"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            pass
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "corral-test"],
        check=True,
    )
    return pwd.getpwnam("corral-test")


def as_user(uid: int, gid: int) -> dict[str, Any]:
    if uid == os.geteuid():
        return {}
    return {"user": uid, "group": gid, "extra_groups": []}


def _find_python(name: str, uid: int, gid: int) -> Identity:
    """A Python this user can run corral with (root's pyenv is not readable by others)."""
    # corral and the packages it needs (msgspec, structlog), wherever this pytest
    # finds them; never a standard library, which must match the interpreter.
    sites = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    pythonpath = os.pathsep.join([str(ROOT), *sites])
    for python in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            probe = subprocess.run(
                [python, "-c", "import msgspec, structlog, sandbox"],
                env={"PYTHONPATH": pythonpath, "PATH": "/usr/bin:/bin"},
                cwd="/",
                capture_output=True,
                timeout=60,
                check=False,
                **as_user(uid, gid),
            )
        except OSError:
            continue
        if probe.returncode == 0:
            return Identity(name, uid, gid, python, pythonpath)
    pytest.fail(
        f"no Python interpreter that uid {uid} can run corral with: {sys.executable} is not "
        "readable by that user and no system python3 (same minor version) was found; "
        "install python3 system-wide"
    )


class Held:
    """A host started with ``action: hold``; its JSON events arrive on a queue."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.events.put(json.loads(raw))
        self.events.put({"event": "host-gone"})

    def expect(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30) -> Any:
        """The next event matching ``predicate``; fails on timeout or host exit."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, "timed out waiting for the host"
            event = self.events.get(timeout=remaining)
            if predicate(event):
                return event
            assert event["event"] != "host-gone", (
                f"host exited ({self.proc.wait()}): {self.stderr()}"
            )

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode() if self.proc.poll() is not None else ""

    def release(self) -> None:
        """Close the host's stdin (a host told to ``then: exit`` exits on that)."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def stop(self) -> None:
        """Kill the host if still running, reap it, and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self._reader.join(timeout=30)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@dataclasses.dataclass
class World:
    """A fake host: a user's home with secrets, corral's home, the attacker's dirs."""

    base: Path
    home: Path
    corral_home: Path
    ext_dir: Path
    data_dir: Path
    token: str
    who: Identity

    @property
    def secret_files(self) -> list[Path]:
        return [
            self.home / ".ssh" / "id_rsa",
            self.home / "project" / "secret.txt",
            self.home / "notes.txt",
            self.corral_home / "extensions" / "other" / "data" / "secret",
            self.corral_home / "logs" / "ext-other.log",
            self.base / "secret-fd.txt",
        ]

    def make_dir(self, *parts: str, writable: bool = False) -> Path:
        """A directory under the world, owned by the host's user if ``writable``."""
        path = self.base.joinpath(*parts)
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)
        if writable:
            os.chown(path, self.who.uid, self.who.gid)
        return path

    def host_env(self) -> dict[str, str]:
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "USER": "alice",
            "PYTHONPATH": self.who.pythonpath,
            # The host's secrets: never to be seen by an extension.
            "CORRAL_TEST_SECRET": self.token,
            "AWS_SECRET_ACCESS_KEY": self.token,
            "GITHUB_TOKEN": self.token,
        }

    def job(self, attack: str, *args: str, **fields: Any) -> dict[str, Any]:
        return {
            "mode": "required",
            "attack": attack,
            "args": list(args),
            "ext_dir": str(self.ext_dir),
            "data_dir": str(self.data_dir),
            "home": str(self.home),
            "corral_home": str(self.corral_home),
            "secret_file": str(self.base / "secret-fd.txt"),
            **fields,
        }

    def start_host(self, job: dict[str, Any], **popen: Any) -> subprocess.Popen[bytes]:
        """Start the host helper on ``job``; the caller reads and reaps it."""
        kwargs: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        kwargs.update(popen)
        return subprocess.Popen(
            [self.who.python, str(HOST_HELPER), json.dumps(job)],
            env=self.host_env(),
            # The host runs in the project tree, as corral does.
            cwd=str(ROOT),
            **kwargs,
            **as_user(self.who.uid, self.who.gid),
        )

    def hold(self, attack: str, *args: str, **fields: Any) -> Held:
        """Start a host that keeps its extension running and reports its output."""
        job = self.job(attack, *args, action="hold", **fields)
        return Held(self.start_host(job, stdin=subprocess.PIPE))

    def run(self, attack: str, *args: str, **fields: Any) -> dict[str, Any]:
        """Run one attack to completion; returns the host's report (exit, output, plan)."""
        proc = self.start_host(self.job(attack, *args, **fields))
        try:
            out, err = proc.communicate(timeout=RUN_TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, f"host failed ({proc.returncode}):\n{err.decode()}"
        report: dict[str, Any] = json.loads(out.decode().splitlines()[-1])
        assert report["sandboxed"], report["notes"]
        return report

    def attack(self, attack: str, *args: str, **fields: Any) -> Any:
        """Run an attack that prints one JSON verdict; returns the verdict."""
        report = self.run(attack, *args, **fields)
        assert report["returncode"] == 0, report["stderr"]
        return json.loads(report["stdout"].splitlines()[-1])


def code_request(tmp_path: Path, code: str, *, name: str = "demo", permissions: Any = None) -> Any:
    """A launch request running ``python -c code`` from an extension directory in
    ``tmp_path``, with no data directory (``permissions``: the defaults if None)."""
    from sandbox import LaunchRequest, Permissions

    ext = tmp_path / "ext"
    ext.mkdir(exist_ok=True)
    return LaunchRequest(
        name=name,
        argv=[sys.executable, "-c", code],
        env={"PATH": "/usr/bin:/bin"},
        ext_dir=str(ext),
        data_dir=None,
        interpreter=sys.executable,
        permissions=permissions or Permissions(),
    )


def run_planned(backend: Any, request: Any) -> tuple[int, bytes, bytes]:
    """Plan ``request`` with ``backend``, run it to completion, clean up: exit, out, err."""
    from sandbox import spawn

    plan = backend.plan(request)
    try:
        proc = spawn(plan, stdin=subprocess.DEVNULL)
        out, err = proc.communicate(timeout=60)
    finally:
        backend.cleanup(plan)
    assert proc.returncode is not None
    return proc.returncode, out, err


def make_secret(path: Path, token: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{token} {path.name}\n")
    # World-readable: only the sandbox stands between the extension and the file.
    path.chmod(0o644)


def make_world(who: Identity) -> World:
    """Build a fresh fake host; the caller removes ``world.base`` afterwards."""
    # Not under /tmp: the sandbox has a private /tmp, which would make the mount
    # points leading to the world's granted directories writable in there.
    base = Path(tempfile.mkdtemp(prefix="corral-world-", dir="/var/tmp"))
    base.chmod(0o755)
    home = base / "home" / "alice"
    corral_home = home / ".local" / "state" / "corral"
    ext_dir = corral_home / "extensions" / "attacker"
    data_dir = corral_home / "data" / "attacker"
    w = World(base, home, corral_home, ext_dir, data_dir, f"SECRET-{uuid.uuid4().hex}", who)
    for path in w.secret_files:
        make_secret(path, w.token)
    shutil.copytree(ATTACKS, ext_dir)
    data_dir.mkdir(parents=True)
    os.chown(data_dir, who.uid, who.gid)
    for directory, _, _ in os.walk(base):
        os.chmod(directory, 0o755)
    data_dir.chmod(0o700)
    return w


def find_identity(name: str) -> Identity:
    """The identity called ``name`` (one of :data:`IDENTITIES`), ready to run hosts."""
    if shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin") is None:
        pytest.fail("bubblewrap (bwrap) is not installed: apt install bubblewrap")
    if name == "unprivileged":
        user = _unprivileged_user()
        return _find_python("unprivileged", user.pw_uid, user.pw_gid)
    return _find_python(name, os.geteuid(), os.getegid())
