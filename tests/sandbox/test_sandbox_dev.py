"""The sandbox's /dev: the one bwrap's ``--dev`` makes, read-only, whoever builds it.

corral's child builds it (a spare, before its order) where it can make a user and
mount namespace of its own; elsewhere bwrap's ``--dev`` makes it and bwrap remounts
it read-only. Both must look and behave the same from inside.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from helpers.sandbox_harness import code_request, run_planned

from sandbox import select_sandbox
from sandbox._bwrap import BwrapSandbox
from sandbox._plan import DEV

#: What an extension sees of /dev, and what it can do there.
_LOOK = """\
import errno, json, os
out = {"entries": {}, "errors": {}}
for name in sorted(os.listdir("/dev")):
    path = "/dev/" + name
    link = os.path.islink(path)
    out["entries"][name] = os.readlink(path) if link else oct(os.lstat(path).st_mode)
def attempt(key, fn):
    try:
        fn()
        out["errors"][key] = 0
    except OSError as exc:
        out["errors"][key] = errno.errorcode[exc.errno]
attempt("create", lambda: open("/dev/owned", "w"))
attempt("mkdir", lambda: os.mkdir("/dev/owned"))
attempt("chmod", lambda: os.chmod("/dev", 0o777))
attempt("null", lambda: open("/dev/null", "w").write("x"))
attempt("shm", lambda: open("/dev/shm/fine", "w").write("x"))
attempt("rmdir", lambda: os.rmdir("/dev/pts"))
out["urandom"] = len(open("/dev/urandom", "rb").read(16))
main, side = os.openpty()
os.write(main, b"hi\\n")
out["pty"] = [os.read(side, 16).decode(), os.ttyname(side).startswith("/dev/pts/")]
out["dev_readonly"] = bool(os.statvfs("/dev").f_flag & os.ST_RDONLY)
out["shm_bytes"] = os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize
print(json.dumps(out))
"""


def _backend(built_by_child: bool) -> BwrapSandbox:
    backend = select_sandbox("required", cgroups=False)
    assert isinstance(backend, BwrapSandbox)
    if built_by_child and not backend.config.private_tmpfs:
        pytest.skip("corral's child cannot make namespaces here")
    config = msgspec.structs.replace(backend.config, private_tmpfs=built_by_child)
    return BwrapSandbox(config)


def _look(backend: BwrapSandbox, tmp_path: Path) -> dict[str, object]:
    code, out, err = run_planned(backend, code_request(tmp_path, _LOOK))
    assert code == 0, err
    seen: dict[str, object] = json.loads(out)
    return seen


def test_the_dev_the_child_builds_is_bwraps_read_only(tmp_path: Path) -> None:
    built = _look(_backend(True), tmp_path)
    nodes = {"null", "zero", "full", "random", "urandom", "tty"}
    entries = built["entries"]
    assert isinstance(entries, dict)
    assert {n for n, mode in entries.items() if mode.startswith("0o20")} == nodes
    assert {n: entries[n] for n in ("fd", "stdin", "stdout", "stderr", "ptmx", "core")} == {
        "fd": "/proc/self/fd",
        "stdin": "/proc/self/fd/0",
        "stdout": "/proc/self/fd/1",
        "stderr": "/proc/self/fd/2",
        "ptmx": "pts/ptmx",
        "core": "/proc/kcore",
    }
    assert set(entries) == nodes | {"fd", "stdin", "stdout", "stderr", "ptmx", "core", "pts", "shm"}
    # Nothing can be added to it or changed in it; the nodes, /dev/shm and ptys work.
    assert built["errors"] == {
        "create": "EROFS",
        "mkdir": "EROFS",
        "chmod": "EROFS",
        "null": 0,
        "shm": 0,
        "rmdir": "EROFS",
    }
    assert built["urandom"] == 16
    assert built["pty"] == ["hi\n", True]
    assert built["dev_readonly"] is True
    assert built["shm_bytes"] == 64 << 20  # the default limits.tmp_mb, capped
    # The same as bwrap's own --dev, remounted read-only (where the child cannot), but
    # for /dev/shm's mode: bwrap's own tmpfs there is 0755 (its owner is the sandbox's
    # user), corral's capped one 1777 like /tmp.
    assert entries["shm"] == "0o41777"
    own = _look(_backend(False), tmp_path)
    assert own["entries"] == {**entries, "shm": "0o40755"}
    assert {**own, "entries": entries} == built


def test_bwrap_binds_the_dev_the_child_built_in_one_piece(tmp_path: Path) -> None:
    # bwrap's own --dev costs a bind and a read of the whole mount table per node,
    # another for the read-only remount: the child builds it, a spare before its
    # order, and bwrap binds it whole, with its device nodes.
    backend = _backend(True)
    plan = backend.plan(code_request(tmp_path, "pass"))
    backend.cleanup(plan)
    dev, tmp = (target for target, _, _ in plan.tmpfs if not target.endswith("/shm"))
    assert plan.tmpfs[0] == (dev, DEV, DEV)
    assert plan.tmpfs[1][0] == dev + "/shm"  # built into it, before bwrap binds it
    argv = plan.argv
    at = argv.index("--dev-bind")
    assert argv[at : at + 3] == ["--dev-bind", dev, "/dev"]
    assert "--dev" not in argv
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--remount-ro"] == ["/"]
    assert ["--bind", tmp, "/tmp"] == argv[argv.index(tmp) - 1 : argv.index(tmp) + 2]


def test_the_plan_and_the_guardians_child_agree_on_what_marks_a_dev() -> None:
    # The guardian's program imports nothing of the package, so it has its own copy of
    # the mark. Were they to differ, the child would mount a tmpfs of size 0: no cap.
    from sandbox._guardian_main import child

    assert child.DEV == DEV
