"""What a bwrap plan contains, and what the guardian's child does before ``exec``."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec
import psutil
import pytest
from helpers.sandbox_harness import run_planned

from sandbox import (
    LaunchPlan,
    LaunchRequest,
    Limits,
    Permissions,
    PlanError,
    Spawned,
    guardian_pids,
    select_sandbox,
    spawn,
    start_guardian,
    sweep_orphans,
)
from sandbox._bwrap import BwrapSandbox


def _request(tmp_path: Path, **fields: object) -> LaunchRequest:
    ext = tmp_path / "ext"
    ext.mkdir(exist_ok=True)
    base: dict[str, object] = {
        "name": "demo",
        "argv": [sys.executable, "-c", "pass"],
        "env": {
            "PATH": "/nonexistent/shims:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/home/alice",
            "API_TOKEN": "hunter2-secret-value",
        },
        "ext_dir": str(ext),
        "data_dir": str(tmp_path / "data"),
    }
    base.update(fields)
    base.setdefault("interpreter", base["argv"][0])  # type: ignore[index]
    return LaunchRequest(**base)  # type: ignore[arg-type]


def _etc_shows(plan: LaunchPlan, name: str) -> bool:
    """Whether the plan's /etc (a bind of corral's mirror, sandbox._etc) holds ``name``."""
    argv = plan.argv
    source = argv[argv.index("/etc") - 1]
    mirror = os.readlink(f"/proc/self/fd/{source}") if source.isdigit() else source
    return os.path.lexists(os.path.join(mirror, name)) or f"/etc/{name}" in argv


@pytest.fixture
def bwrap() -> BwrapSandbox:
    backend = select_sandbox("required")
    assert isinstance(backend, BwrapSandbox)
    return backend


def test_plan_essentials(bwrap: BwrapSandbox, tmp_path: Path) -> None:
    plan = bwrap.plan(_request(tmp_path))
    try:
        argv = plan.argv
        for flag in ("--unshare-user", "--unshare-pid", "--unshare-net", "--die-with-parent",
                     "--new-session"):  # fmt: skip
            assert flag in argv, flag
        # A root host's child allows only bwrap's namespace (checked by bwrap), else
        # bwrap disables them in a namespace of its own.
        checked = plan.tmpfs and os.geteuid() == 0
        assert ("--assert-userns-disabled" if checked else "--disable-userns") in argv
        assert argv[argv.index("--cap-drop") + 1] == "ALL"
        assert argv[argv.index("--chdir") + 1] == str(tmp_path / "ext")
        assert argv[argv.index("--") + 1 :][-3:] == [sys.executable, "-c", "pass"]
        # Secrets travel in the environment, never on the (world-readable) command line.
        assert not any("hunter2" in a for a in argv)
        assert plan.env["API_TOKEN"] == "hunter2-secret-value"
        assert plan.env["HOME"] == str(tmp_path / "data")
        assert plan.env["TMPDIR"] == "/tmp"
        assert "/nonexistent/shims" not in plan.env["PATH"]
        assert (tmp_path / "data").is_dir()  # created for the bind
        assert "/etc/shadow" not in argv
        assert "/etc/passwd" not in argv
        seccomp_fd = int(argv[argv.index("--seccomp") + 1])
        # The extension's and data directories are bound by descriptor, not by name.
        bound = {argv[i + 2]: int(argv[i + 1]) for i, a in enumerate(argv) if a.endswith("-fd")}
        assert set(bound) >= {str(tmp_path / "ext"), str(tmp_path / "data")}
        copies = [int(argv[i + 1]) for i, a in enumerate(argv) if a == "--file"]
        assert sorted(plan.pass_fds) == sorted([seccomp_fd, *bound.values(), *copies])
        # Every grant is pinned; /etc is corral's own mirror (sandbox._etc), checked apart.
        assert {p.path for p in plan.pins} >= set(bound) - {"/etc"}
        assert plan.sandboxed
        assert plan.backend == "bwrap"
    finally:
        bwrap.cleanup(plan)


_NEW_USERNS = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
X86 = os.uname().machine == "x86_64"
got = {}
# CLONE_NEWUSER, and for clone SIGCHLD as the exit signal.
for name, nr, flags in (("unshare", 272 if X86 else 97, 0x10000000),
                        ("clone", 56 if X86 else 220, 0x10000000 | 17)):
    ret = libc.syscall(nr, flags, 0, 0, 0, 0)
    if ret == 0 and name == "clone":
        os._exit(0)  # the child, in a new user namespace
    if ret > 0:
        os.waitpid(ret, 0)
    got[name] = "made" if ret >= 0 else os.strerror(ctypes.get_errno())
print(json.dumps(got))
"""


@pytest.mark.parametrize("seccomp", [True, False])
def test_the_extension_cannot_make_a_user_namespace(
    bwrap: BwrapSandbox, tmp_path: Path, seccomp: bool
) -> None:
    # Two layers, each enough alone: the seccomp filter, and the user namespaces
    # allowed where bwrap makes the sandbox's (the child's limit, or --disable-userns).
    backend = BwrapSandbox(msgspec.structs.replace(bwrap.config, seccomp=seccomp))
    request = _request(tmp_path, argv=[sys.executable, "-c", _NEW_USERNS])
    code, out, err = run_planned(backend, request)
    assert code == 0, err
    got = json.loads(out)
    assert got.keys() == {"unshare", "clone"}
    assert "made" not in got.values(), got


def test_network_shares_the_host_namespace(bwrap: BwrapSandbox, tmp_path: Path) -> None:
    plan = bwrap.plan(_request(tmp_path, permissions=Permissions(network=True)))
    try:
        assert "--unshare-net" not in plan.argv
        assert _etc_shows(plan, "resolv.conf") == os.path.exists("/etc/resolv.conf")
    finally:
        bwrap.cleanup(plan)


def test_a_private_network_keeps_the_grant_inside_and_reaches_nothing_outside(
    bwrap: BwrapSandbox, tmp_path: Path
) -> None:
    # What a headless browser needs: unix sockets (network: true's seccomp filter)
    # in a network namespace of its own. A descriptor of the caller's comes along,
    # and stays the caller's.
    listener = socket.create_server(("127.0.0.1", 0))
    read_end, write_end = os.pipe()
    code = (
        "import os, socket, sys\n"
        "socket.socket(socket.AF_UNIX).close()\n"
        f"os.write({write_end}, b'passed')\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {listener.getsockname()[1]}), 2)\n"
        "except OSError:\n"
        "    print('refused')\n"
    )
    request = _request(
        tmp_path,
        argv=[sys.executable, "-c", code],
        permissions=Permissions(network=True),
        private_network=True,
        pass_fds=[write_end],
    )
    try:
        plan = bwrap.plan(request)
        assert "--unshare-net" in plan.argv
        assert _etc_shows(plan, "resolv.conf") == os.path.exists("/etc/resolv.conf")
        assert write_end in plan.pass_fds
        bwrap.cleanup(plan)
        os.fstat(write_end)  # the caller's: not closed by the cleanup
        code_, out, err = run_planned(bwrap, request)
        assert code_ == 0, err
        assert out.decode().split() == ["refused"]
        assert os.read(read_end, 16) == b"passed"
    finally:
        listener.close()
        os.close(read_end)
        os.close(write_end)


def test_none_says_it_cannot_make_a_private_network(tmp_path: Path) -> None:
    plan = select_sandbox("off").plan(_request(tmp_path, private_network=True, pass_fds=[5]))
    assert "private network not enforced: the host's whole network" in plan.notes
    assert plan.pass_fds == [5]


def test_cleanup_is_idempotent(bwrap: BwrapSandbox, tmp_path: Path) -> None:
    plan = bwrap.plan(_request(tmp_path))
    assert plan.pass_fds
    bwrap.cleanup(plan)
    for fd in plan.pass_fds:
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(fd)
    assert all(not os.path.exists(d) for d in plan.run_dirs)
    reused = os.open("/dev/null", os.O_RDONLY)
    try:
        bwrap.cleanup(plan)  # must not close whatever now has the same number
        os.fstat(reused)
    finally:
        os.close(reused)
    for cgroup in [plan.cgroup, *plan.extra_cgroups]:
        assert cgroup is None or not os.path.exists(cgroup)


def test_shims_are_refused(bwrap: BwrapSandbox, tmp_path: Path) -> None:
    shim = tmp_path / ".pyenv" / "shims" / "python3"
    shim.parent.mkdir(parents=True)
    shim.write_text('#!/usr/bin/env bash\nexec pyenv exec python3 "$@"\n')
    with pytest.raises(PlanError, match="shim"):
        bwrap.plan(_request(tmp_path, argv=[str(shim), "x.py"], interpreter=str(shim)))


def _none_plan(tmp_path: Path, limits: Limits) -> LaunchPlan:
    backend = select_sandbox("off")
    return backend.plan(_request(tmp_path, permissions=Permissions(limits=limits)))


def test_the_child_applies_limits(tmp_path: Path) -> None:
    plan = _none_plan(tmp_path, Limits(open_files=77, file_mb=3, memory_mb=300))
    code = (
        "import json, resource as r; print(json.dumps([r.getrlimit(r.RLIMIT_NOFILE), "
        "r.getrlimit(r.RLIMIT_FSIZE), r.getrlimit(r.RLIMIT_DATA), r.getrlimit(r.RLIMIT_CORE)]))"
    )
    plan = LaunchPlan(**{**{f: getattr(plan, f) for f in plan.__struct_fields__},
                         "argv": [sys.executable, "-c", code]})  # fmt: skip
    proc = spawn(plan, stdin=subprocess.DEVNULL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out) == [[77, 77], [3 << 20, 3 << 20], [300 << 20, 300 << 20], [0, 0]]
    assert resource.getrlimit(resource.RLIMIT_NOFILE) != (77, 77)  # not the host's


def _new_spares(before: set[int]) -> set[int]:
    """The guardian's spares not in ``before``, once it parked one (it does when idle),
    bounded. Earlier tests may have left spares parked in cgroups: those are not new."""
    deadline = time.monotonic() + 10
    while not (spares := guardian_pids() - {start_guardian()} - before):
        assert time.monotonic() < deadline, "no spare parked"
        time.sleep(0.01)
    return spares


def test_a_prepared_spawn_leaves_a_spare_for_the_next(tmp_path: Path) -> None:
    # Once idle after a prepared spawn into no cgroup, the guardian parks a spare,
    # and the next such spawn is handed to it (no fork between its order and its
    # exec). A spare dies with the guardian: an unprepared spawn never takes one.
    plan = _none_plan(tmp_path, Limits())
    before = guardian_pids()
    first = spawn(plan, stdin=subprocess.DEVNULL)
    first.communicate(timeout=60)
    spares = _new_spares(before)
    for _, fd in sweep_orphans():  # what a stop does: a spare is not an orphan
        os.close(fd)
    assert all(psutil.pid_exists(pid) for pid in spares)
    plain = spawn(plan, stdin=subprocess.DEVNULL, prepare=False)
    plain.communicate(timeout=60)
    assert plain.pid not in spares
    code = (
        "import os, resource as r; print(r.getrlimit(r.RLIMIT_CORE), sorted(os.listdir('/dev/fd')))"
    )
    # The oldest spare is taken first: an earlier burst's pool may still be parked.
    parked = guardian_pids() - {start_guardian()}
    second = spawn(msgspec.structs.replace(plan, argv=[sys.executable, "-c", code]))
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert second.pid in parked
    # Prepared like any child: its limits, and nothing of the guardian's open.
    assert out.decode().strip() == "(0, 0) ['0', '1', '2', '3']"
    assert second.pid not in guardian_pids()  # it is the child now, not a spare


def test_spawn_works_from_any_thread(tmp_path: Path) -> None:
    # The guardian forks every child from its one thread: a host thread that exits
    # right after spawning takes nothing with it (PR_SET_PDEATHSIG is per thread).
    plan = _none_plan(tmp_path, Limits())
    code = "import os, time; time.sleep(0.5); print(os.getppid(), sorted(os.listdir('/dev/fd')))"
    plan = msgspec.structs.replace(plan, argv=[sys.executable, "-c", code])
    box: list[Spawned] = []
    thread = threading.Thread(target=lambda: box.append(spawn(plan, stdin=subprocess.DEVNULL)))
    thread.start()
    thread.join()
    out, err = box[0].communicate(timeout=60)
    assert box[0].returncode == 0, err
    parent, fds = out.decode().split(" ", 1)
    assert int(parent) == start_guardian()  # not ours: nothing here waits for it
    # Its standard streams and the listing's own descriptor, nothing else.
    assert fds.strip() == "['0', '1', '2', '3']"


def test_runtime_paths_and_no_data_dir(bwrap: BwrapSandbox, tmp_path: Path) -> None:
    sdk = tmp_path / "sdk"
    sdk.mkdir()
    (sdk / "corral_sdk_probe.py").write_text("GREETING = 'from the sdk'\n")
    request = _request(
        tmp_path,
        argv=[
            sys.executable,
            "-c",
            "import corral_sdk_probe, os; print(corral_sdk_probe.GREETING, os.environ['HOME'])",
        ],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(sdk)},
        data_dir=None,
        runtime_paths=[str(sdk)],
    )
    plan = bwrap.plan(request)
    try:
        proc = spawn(plan, stdin=subprocess.DEVNULL)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out.decode().strip() == "from the sdk /tmp"
    finally:
        bwrap.cleanup(plan)


def test_unvalidated_grants_are_resolved(bwrap: BwrapSandbox, tmp_path: Path) -> None:
    """A caller that does not validate (the bash tool) may name a path through a symlink."""
    real = tmp_path / "real" / "ws"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    ws = str(tmp_path / "link" / "ws")
    request = _request(
        tmp_path,
        argv=["/bin/sh", "-c", "touch made && pwd"],
        interpreter="",
        ext_dir=ws,
        data_dir=None,
        permissions=Permissions(read_write=[ws], data_dir=False),
    )
    returncode, out, err = run_planned(bwrap, request)
    assert returncode == 0, err
    assert out.decode().strip() == ws
    assert (real / "made").exists()


def test_a_spawn_into_cgroups_takes_the_spare(bwrap: BwrapSandbox, tmp_path: Path) -> None:
    # Joining a cgroup costs a kernel grace period: a spare child of the guardian
    # joins the next cgroups ahead of time, and the spawn into them is handed to it.
    manager = bwrap.cgroups
    if manager is None:
        pytest.skip("this user may not create cgroups here")
    manager.park_spare()
    spares = guardian_pids() - {start_guardian()}
    assert spares
    for _, fd in sweep_orphans():  # what a stop does: a spare is not an orphan
        os.close(fd)
    assert all(psutil.pid_exists(pid) for pid in spares)
    plan = bwrap.plan(_request(tmp_path))
    try:
        child = spawn(plan, stdin=subprocess.DEVNULL)
        _out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        assert child.pid in spares
        assert plan.cgroup is not None
        # It ran there and is gone. bwrap's process inside the PID namespace may still
        # be listed for a moment while the kernel finishes its exit (no memory left,
        # no command line): wait for that, bounded.
        procs = os.path.join(plan.cgroup, "cgroup.procs")
        deadline = time.monotonic() + 5
        while _read(procs) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _read(procs) == []
    finally:
        bwrap.cleanup(plan)


def _read(procs: str) -> list[str]:
    with open(procs) as f:
        return f.read().split()
