"""Finding a cgroup subtree corral may use, on fake cgroup trees of each kind."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sandbox import Limits
from sandbox._cgroup import CgroupManager, CgroupSupport, detect_cgroups


def _fake_proc(tmp_path: Path, membership: str, mounts: list[str]) -> str:
    proc = tmp_path / "proc" / "self"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text(membership)
    lines = [f"{30 + i} 20 0:{40 + i} {m}" for i, m in enumerate(mounts)]
    (proc / "mountinfo").write_text("\n".join(lines) + "\n")
    return str(tmp_path / "proc")


def _v2_dir(path: Path, *, controllers: str, enabled: str, procs: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cgroup.controllers").write_text(controllers + "\n")
    (path / "cgroup.subtree_control").write_text(enabled + "\n")
    (path / "cgroup.procs").write_text(procs + "\n")


def test_v1_hybrid(tmp_path: Path) -> None:
    fs = tmp_path / "cg"
    (fs / "memory" / "session" / "x").mkdir(parents=True)
    (fs / "pids").mkdir(parents=True)
    proc = _fake_proc(
        tmp_path,
        "9:pids:/\n4:memory:/session/x\n0::/\n",
        [
            f"/ {fs}/memory rw,relatime - cgroup cgroup rw,memory",
            f"/ {fs}/pids rw,relatime - cgroup cgroup rw,pids",
            f"/ {fs}/unified rw,relatime - cgroup2 cgroup2 rw",
        ],
    )
    _v2_dir(fs / "unified", controllers="", enabled="", procs="1")
    found = detect_cgroups(proc)
    assert found.version == 1
    assert found.memory == str(fs / "memory" / "session" / "x")
    assert found.pids == str(fs / "pids")


def test_v2_uses_the_nearest_delegated_ancestor(tmp_path: Path) -> None:
    fs = tmp_path / "cg"
    own = "/user.slice/user-1000.slice/user@1000.service/app.slice/vte-spawn-1.scope"
    _v2_dir(fs, controllers="cpu memory pids", enabled="cpu memory pids", procs="1")
    _v2_dir(fs / "user.slice", controllers="memory pids", enabled="memory", procs="")
    service = fs / own.lstrip("/").rsplit("/", 2)[0]
    _v2_dir(service, controllers="memory pids", enabled="memory pids", procs="")
    _v2_dir(service / "app.slice", controllers="memory pids", enabled="memory pids", procs="")
    _v2_dir(fs / own.lstrip("/"), controllers="memory pids", enabled="", procs="4242\n4243")
    proc = _fake_proc(tmp_path, f"0::{own}\n", [f"/ {fs} rw - cgroup2 cgroup2 rw"])
    found = detect_cgroups(proc)
    assert found.version == 2
    assert found.memory == found.pids == str(service / "app.slice")
    assert found.vacate is None


def test_v2_alone_in_own_scope_vacates(tmp_path: Path) -> None:
    fs = tmp_path / "cg"
    _v2_dir(fs, controllers="memory pids", enabled="", procs="1")
    _v2_dir(fs / "corral.scope", controllers="memory pids", enabled="", procs=str(os.getpid()))
    proc = _fake_proc(tmp_path, "0::/corral.scope\n", [f"/ {fs} rw - cgroup2 cgroup2 rw"])
    found = detect_cgroups(proc)
    assert found == CgroupSupport(
        version=2,
        memory=str(fs / "corral.scope"),
        pids=str(fs / "corral.scope"),
        vacate=str(fs / "corral.scope"),
        detail=f"v2, own scope {fs / 'corral.scope'}",
    )


def test_v2_shared_scope_is_refused_with_a_fix(tmp_path: Path) -> None:
    fs = tmp_path / "cg"
    _v2_dir(fs, controllers="memory pids", enabled="", procs="1")
    _v2_dir(fs / "session-2.scope", controllers="memory pids", enabled="", procs="10\n11")
    proc = _fake_proc(tmp_path, "0::/session-2.scope\n", [f"/ {fs} rw - cgroup2 cgroup2 rw"])
    found = detect_cgroups(proc)
    assert found.version == 0
    assert "systemd-run --user --scope -p Delegate=yes" in found.detail


def test_v2_without_controllers(tmp_path: Path) -> None:
    fs = tmp_path / "cg"
    _v2_dir(fs, controllers="", enabled="", procs=str(os.getpid()))
    proc = _fake_proc(tmp_path, "0::/\n", [f"/ {fs} rw - cgroup2 cgroup2 rw"])
    found = detect_cgroups(proc)
    assert found.version == 0
    assert "lacks the memory and pids controllers" in found.detail


def test_no_cgroups_at_all(tmp_path: Path) -> None:
    assert detect_cgroups(str(tmp_path / "missing")).version == 0


def test_create_writes_limits_v1(tmp_path: Path) -> None:
    memory, pids = tmp_path / "memory", tmp_path / "pids"
    memory.mkdir()
    pids.mkdir()
    manager = CgroupManager(CgroupSupport(version=1, memory=str(memory), pids=str(pids)))
    dirs = manager.create("my ext/../x", Limits(memory_mb=100, processes=7))
    assert [os.path.dirname(d) for d in dirs] == [str(memory), str(pids)]
    assert os.path.basename(dirs[0]).startswith(f"corral-{os.getpid()}-my_ext_.._x-")
    assert (Path(dirs[0]) / "memory.limit_in_bytes").read_text() == str(100 * 1024 * 1024)
    assert (Path(dirs[1]) / "pids.max").read_text() == "7"


def test_sweep_removes_cgroups_of_dead_hosts(tmp_path: Path) -> None:
    dead = subprocess.run(["true"], check=True)
    del dead
    finished = subprocess.Popen(["true"])
    finished.wait()
    stale = tmp_path / f"corral-{finished.pid}-ext-1"
    mine = tmp_path / f"corral-{os.getpid()}-ext-1"
    other = tmp_path / "something-else"
    for d in (stale, mine, other):
        d.mkdir()
    CgroupManager(CgroupSupport(version=2, memory=str(tmp_path), pids=str(tmp_path))).sweep()
    assert not stale.exists()
    assert mine.exists()
    assert other.exists()
