"""The private /dev (with /dev/shm) and /tmp: built and mounted over one pair of host
directories per backend, each sandbox seeing only its own, a tampered pair never used."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.sandbox_harness import code_request, run_planned

from sandbox import select_sandbox, spawn
from sandbox._bwrap import BwrapSandbox


@pytest.fixture
def bwrap() -> BwrapSandbox:
    backend = select_sandbox("required")
    assert isinstance(backend, BwrapSandbox)
    if not backend.config.private_tmpfs:
        pytest.skip("the child cannot mount a capped tmpfs here")
    return backend


def _pair(targets: list[str]) -> list[str]:
    """The host's directories among a plan's tmpfs targets (``/dev/shm``'s lies in /dev's)."""
    return [t for t in targets if not any(t.startswith(o + "/") for o in targets)]


def _mount_points(bwrap: BwrapSandbox, tmp_path: Path) -> list[str]:
    plan = bwrap.plan(code_request(tmp_path, "pass"))
    bwrap.cleanup(plan)
    return _pair([target for target, _, _ in plan.tmpfs])


def _writes(mark: str, then: str = "") -> str:
    """Code writing ``mark`` to /tmp/mine and /dev/shm/mine, then running ``then``."""
    return (
        f"import os\nfor d in ('/tmp', '/dev/shm'): open(d + '/mine', 'w').write({mark!r})\n" + then
    )


def _remove(base: str) -> None:
    shutil.rmtree(base)  # the pair, and the /etc mirrors beside it


def test_every_plan_mounts_over_the_same_pair_which_stays_empty(
    bwrap: BwrapSandbox, tmp_path: Path
) -> None:
    first = _mount_points(bwrap, tmp_path)
    assert len(first) == 2
    # Two sandboxes at once, each writing its own /tmp and /dev/shm: the first
    # still sees only what it wrote once the second wrote the same names.
    show = "print(*(open(d + '/mine').read() for d in ('/tmp', '/dev/shm')))"
    waiting = bwrap.plan(code_request(tmp_path, _writes("one", "input()\n" + show)))
    try:
        proc = spawn(waiting, stdin=subprocess.PIPE)
        code, _, err = run_planned(bwrap, code_request(tmp_path, _writes("two")))
        assert code == 0, err
        out, err = proc.communicate(b"\n", timeout=30)
    finally:
        bwrap.cleanup(waiting)
    assert (proc.returncode, out) == (0, b"one one\n"), err
    assert _pair([target for target, _, _ in waiting.tmpfs]) == first
    # The host's directories stay empty, and the next plan uses them again.
    for path in first:
        assert os.listdir(path) == []
    assert _mount_points(bwrap, tmp_path) == first


def test_a_tampered_pair_is_never_used(bwrap: BwrapSandbox, tmp_path: Path) -> None:
    dev, _ = _mount_points(bwrap, tmp_path)
    base = os.path.dirname(dev)
    os.chmod(base, 0o755)  # others may enter it now
    again = _mount_points(bwrap, tmp_path)
    assert os.path.dirname(again[0]) != base
    _remove(base)
    # A mount point swapped for a symlink (to a directory the extension must not
    # get as its /tmp) is not used either.
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "private").write_text("not for the sandbox")
    os.rmdir(again[1])
    os.symlink(tmp_path / "elsewhere", again[1])
    third = _mount_points(bwrap, tmp_path)
    assert os.path.dirname(third[1]) != os.path.dirname(again[1])
    _remove(os.path.dirname(again[1]))
    code, out, err = run_planned(
        bwrap, code_request(tmp_path, "import os; print(os.listdir('/dev/shm'))")
    )
    assert (code, out) == (0, b"[]\n"), err
    # A pair removed (a /tmp cleaner) is made again.
    _remove(os.path.dirname(third[0]))
    fourth = _mount_points(bwrap, tmp_path)
    assert all(os.path.isdir(p) and not os.listdir(p) for p in fourth)


def test_the_pair_goes_with_the_host(bwrap: BwrapSandbox, tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from sandbox import LaunchRequest, select_sandbox\n"
        "backend = select_sandbox('required')\n"
        "plan = backend.plan(LaunchRequest(name='demo', argv=[sys.executable], env={},\n"
        f"    ext_dir={str(tmp_path)!r}, data_dir=None, interpreter=sys.executable))\n"
        "backend.cleanup(plan)\n"
        "print(*(target for target, _, _ in plan.tmpfs if not target.endswith('/dev/shm')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    made = done.stdout.decode().split()
    assert len(made) == 2, done
    assert not any(os.path.lexists(p) for p in [*made, os.path.dirname(made[0])])


#: A host that makes its pair (and an /etc mirror beside it), says where, and is killed
#: before it can remove it.
_KILLED_HOST = (
    "import os, signal\n"
    "from sandbox._mountpoints import MOUNT_POINTS\n"
    "base = MOUNT_POINTS.base()\n"
    "os.mkdir(os.path.join(base, 'etc-x'))\n"
    "open(os.path.join(base, 'etc-x', 'hosts'), 'w').write('127.0.0.1 x')\n"
    "print(base, flush=True)\n"
    "os.kill(os.getpid(), signal.SIGKILL)\n"
)

#: A host that makes its pair, waits for its sweep of stale pairs, and exits.
_NEXT_HOST = (
    "import threading\n"
    "from sandbox._mountpoints import MOUNT_POINTS\n"
    "print(MOUNT_POINTS.base(), flush=True)\n"
    "for t in threading.enumerate():\n"
    "    if t is not threading.main_thread():\n"
    "        t.join()\n"
)


@pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend")
def test_a_pair_left_by_a_killed_host_is_removed_by_the_next(tmp_path: Path) -> None:
    from sandbox._mountpoints import PREFIX, _whose

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    killed = subprocess.run([sys.executable, "-c", _KILLED_HOST], env=env, capture_output=True)
    assert killed.returncode == -9, killed.stderr
    stale = killed.stdout.decode().strip()
    assert os.path.isdir(os.path.join(stale, "etc-x"))
    ns, pid, started, _ = _whose().split("-")
    kept = {  # none of these may go
        "live": f"{PREFIX}{ns}-{pid}-{started}-live0000",  # this test's own process
        "other_namespace": f"{PREFIX}1-{pid}-1-otherns0",
        "unnamed": f"{PREFIX}abcd1234",  # a corral before names said whose
        "open_mode": f"{PREFIX}{ns}-1-1-openmode",  # others may enter it: not ours
        "no_proc": f"{PREFIX}{ns}-1-0-noproc00",  # named without /proc: cannot tell
    }
    for name in kept.values():
        (tmp_path / name).mkdir(mode=0o700)
    (tmp_path / kept["open_mode"]).chmod(0o755)
    reused = tmp_path / f"{PREFIX}{ns}-{pid}-{int(started) + 1}-reused00"  # pid taken since
    reused.mkdir(mode=0o700)
    # A link named like a dead host's pair, to a directory of ours: never followed.
    target = tmp_path / "precious"
    target.mkdir(mode=0o700)
    (target / "keep").write_text("mine")
    link = tmp_path / f"{PREFIX}{ns}-1-1-linkedxx"
    link.symlink_to(target)

    nxt = subprocess.run(
        [sys.executable, "-c", _NEXT_HOST], env=env, capture_output=True, check=True
    )
    made = nxt.stdout.decode().strip()
    assert not os.path.lexists(stale)
    assert not reused.exists()
    for name in kept.values():
        assert (tmp_path / name).is_dir(), name
    assert link.is_symlink()
    assert (target / "keep").read_text() == "mine"
    assert not os.path.lexists(made)  # the next host removed its own pair as it exited


_WHERE = "from sandbox._mountpoints import MOUNT_POINTS\nprint(MOUNT_POINTS.base())\n"


@pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend")
@pytest.mark.parametrize("mode", [0o700, 0o755], ids=["private", "open"])
def test_the_pair_is_made_in_the_runtime_directory_when_it_is_private(
    tmp_path: Path, mode: int
) -> None:
    # In memory where it can be (the /etc mirror beside it makes hundreds of links);
    # a runtime directory others may enter (or TMPDIR, named) is not used.
    run = tmp_path / "run"
    run.mkdir(mode=mode)
    run.chmod(mode)
    env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "XDG_RUNTIME_DIR")}
    made = subprocess.run(
        [sys.executable, "-c", _WHERE],
        env={**env, "XDG_RUNTIME_DIR": str(run)},
        capture_output=True,
        check=True,
    )
    parent = os.path.dirname(made.stdout.decode().strip())
    assert (parent == str(run)) is (mode == 0o700), parent
    if mode != 0o700:
        shm = os.lstat("/dev/shm") if os.path.isdir("/dev/shm") else None
        if shm is not None and shm.st_mode & 0o7777 == 0o1777:
            assert parent == "/dev/shm"
    named = subprocess.run(  # TMPDIR, when set, wins: the user chose where
        [sys.executable, "-c", _WHERE],
        env={**env, "XDG_RUNTIME_DIR": str(run), "TMPDIR": str(tmp_path)},
        capture_output=True,
        check=True,
    )
    assert os.path.dirname(named.stdout.decode().strip()) == str(tmp_path)
    assert list(run.iterdir()) == []  # each host removed its pair as it exited
