"""An extension that attacks its host, with default permissions, gets nowhere.

Every test runs a real attacking program (``attacks/``) through the real spawn
path under bwrap, once per host identity (root and unprivileged when the tests
run as root), and checks both that the attack failed and that the host's
secrets and files are untouched.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from pathlib import Path

from helpers.paths import REPO as ROOT
from helpers.sandbox_harness import World


def test_cannot_read_outside_grants(world: World) -> None:
    targets = {
        "files": [str(p) for p in world.secret_files] + [str(ROOT / "pyproject.toml")],
        "dirs": [
            str(world.home),
            str(world.home / ".ssh"),
            str(world.home / "project"),
            str(world.corral_home),
            str(world.corral_home / "extensions"),
            str(ROOT),
            str(world.base),
        ],
    }
    verdict = world.attack("read_files.py", json.dumps(targets))
    assert verdict["read"] == {}
    # Directories above the granted ones exist only as empty mount points: listing
    # one shows the next component towards a grant and nothing else.
    # The interpreter's prefixes are bound read-only too (the repository, and so its
    # .venv, may live anywhere: under /tmp in a fresh clone, say).
    runtime = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    skeleton: dict[str, set[str]] = {}
    for granted in (world.ext_dir, world.data_dir, *runtime):
        for parent in granted.parents:
            child = granted.relative_to(parent).parts[0]
            skeleton.setdefault(str(parent), set()).add(child)
    for path, entries in verdict["listed"].items():
        assert set(entries) <= skeleton.get(path, set()) | {".pyenv", "v"}, (path, entries)
    # The project tree is invisible, unless the interpreter's venv lives inside it:
    # then the tree shows as an empty skeleton leading to the venv (checked above).
    assert str(ROOT) not in verdict["listed"] or str(ROOT) in skeleton
    system = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "root", "sbin",
              "tmp", "usr", "var"}  # fmt: skip
    # Plus the first component of each bound path (e.g. /work for a venv under /work).
    assert set(verdict["root"]) <= system | skeleton.get("/", set())


def test_cannot_learn_host_secrets(world: World) -> None:
    dump = world.attack("steal_secrets.py")
    text = json.dumps(dump)
    assert world.token not in text
    for name in ("CORRAL_TEST_SECRET", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "PYTHONPATH"):
        assert name not in dump["environ"], name
    # Only stdio (plus the descriptor os.listdir itself used) is inherited.
    assert len(dump["fd_list"]) <= 4, dump["fd_list"]
    assert dump["fds"] == {}, dump["fds"]
    # Every process visible is the sandbox's own: its init (bwrap) and the attack.
    pids = {key.split("/")[0] for key in dump["proc"]}
    assert len(pids) <= 2, pids
    # HOME and TMPDIR point inside the sandbox, at paths that exist there.
    assert dump["environ"]["HOME"] == str(world.data_dir)
    assert dump["environ"]["TMPDIR"] == "/tmp"


def test_cannot_write_outside_grants(world: World) -> None:
    host_tmp_marker = Path("/tmp") / f"corral-escape-{world.token}"
    outside = [
        world.ext_dir / "owned.py",
        world.home / "owned.txt",
        world.home / ".ssh" / "authorized_keys",
        world.corral_home / "extensions" / "other" / "data" / "owned",
        world.base / "owned",
        ROOT / "owned.txt",
        Path("/owned"),
        Path("/usr/lib/owned"),
        Path("/etc/owned"),
        Path("/dev/owned"),
        Path("/root/owned"),
    ]
    # Opened for writing only: a root host maps uid 0 into the sandbox, and sysctl
    # permissions depend on the uid alone (core_pattern would run a program as root).
    kernel = [
        "open:/proc/sys/kernel/core_pattern",
        "open:/proc/sys/kernel/hostname",
        "open:/proc/sysrq-trigger",
        "open:/proc/sys/vm/drop_caches",
    ]
    inside = [world.data_dir / "fine.txt", Path("/tmp/fine.txt"), Path("/dev/shm/fine")]
    targets = [str(p) for p in outside + inside] + kernel + [str(host_tmp_marker)]
    verdict = world.attack("write_files.py", json.dumps(targets))

    # /tmp is private: "/tmp/corral-escape-..." lands in the sandbox's own tmpfs, and
    # so does any path under /tmp (the repository itself may live there, as a fresh
    # clone in /tmp does): for those only the host side counts.
    def private(path: Path) -> bool:
        return Path("/tmp") in path.parents

    written = {w for w in verdict["written"] if not private(Path(w))}
    assert written == {str(p) for p in inside if not private(p)}
    assert str(Path("/tmp/fine.txt")) in verdict["written"]
    assert not host_tmp_marker.exists()
    for path in outside[:6]:
        assert not path.exists() or path.read_text().startswith(world.token), path
    assert (world.data_dir / "fine.txt").read_text() == "owned by the extension\n"
    for path in world.secret_files:
        assert path.read_text().startswith(world.token), path


class _Listener:
    """TCP, unix and abstract-unix listeners that answer "hi" and count connections."""

    def __init__(self, unix_path: Path) -> None:
        self.accepted: list[str] = []
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(str(unix_path))
        unix_path.chmod(0o777)
        self.unix.listen()
        self.abstract_name = f"corral-test-{os.getpid()}-{id(self)}"
        self.abstract = socket.socket(socket.AF_UNIX)
        self.abstract.bind("\0" + self.abstract_name)
        self.abstract.listen()
        self.threads = [
            threading.Thread(target=self._serve, args=(s, n), daemon=True)
            for s, n in ((self.tcp, "tcp"), (self.unix, "unix"), (self.abstract, "abstract"))
        ]
        for t in self.threads:
            t.start()

    def _serve(self, server: socket.socket, name: str) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            self.accepted.append(name)
            with conn:
                conn.settimeout(10)
                conn.recv(64)
                conn.sendall(b"hi")

    def close(self) -> None:
        for s in (self.tcp, self.unix, self.abstract):
            s.close()


def _connect(world: World, **permissions: object) -> tuple[dict[str, str], list[str]]:
    sockets = world.make_dir("sockets")
    listener = _Listener(sockets / "service.sock")
    try:
        targets = {
            "tcp": ["127.0.0.1", listener.tcp.getsockname()[1]],
            "unix": str(sockets / "service.sock"),
            "abstract": listener.abstract_name,
        }
        # The socket's directory is granted read-only: it is visible, so only the
        # network rules stand between the extension and the service.
        perms = {"read_only": [str(sockets)], **permissions}
        verdict = world.attack("connect.py", json.dumps(targets), permissions=perms)
        return verdict, list(listener.accepted)
    finally:
        listener.close()


def test_cannot_connect_without_network(world: World) -> None:
    verdict, accepted = _connect(world)
    assert all(v.startswith("error") for v in verdict.values()), verdict
    assert accepted == []


def test_can_connect_with_network(world: World) -> None:
    verdict, accepted = _connect(world, network=True)
    assert verdict == {"tcp": "hi", "unix": "hi", "abstract": "hi"}
    assert sorted(accepted) == ["abstract", "tcp", "unix"]


def test_granted_paths_work_exactly_as_declared(world: World) -> None:
    ro = world.make_dir("shared", "docs")
    (ro / "readme.txt").write_text("read me\n")
    (ro / "readme.txt").chmod(0o644)
    rw = world.make_dir("shared", "out", writable=True)
    locked = world.make_dir("shared", "docs", "locked")  # read-only inside a read-only grant
    (locked / "keep.txt").write_text("keep\n")
    ro_file = world.base / "shared" / "config.ini"
    ro_file.write_text("[config]\n")
    ro_file.chmod(0o644)
    perms = {
        "read_only": ["../../../../../../../shared/docs", str(ro_file), str(locked)],
        "read_write": [str(rw)],
    }
    paths = {
        "read": [str(ro / "readme.txt"), str(ro_file), str(locked / "keep.txt")],
        "write": [
            str(ro / "new.txt"),
            str(ro_file),
            str(rw / "result.txt"),
            str(locked / "keep.txt"),
        ],
    }
    verdict = world.attack("granted.py", json.dumps(paths), permissions=perms)
    assert verdict["read"] == {
        str(ro / "readme.txt"): "read me",
        str(ro_file): "[config]",
        str(locked / "keep.txt"): "keep",
    }
    assert verdict["write"][str(rw / "result.txt")] == "ok"
    for path in (ro / "new.txt", ro_file, locked / "keep.txt"):
        assert verdict["write"][str(path)].startswith("error"), path
    assert (rw / "result.txt").read_text() == "written by the extension\n"
    assert not (ro / "new.txt").exists()
    assert ro_file.read_text() == "[config]\n"
    assert (locked / "keep.txt").read_text() == "keep\n"


def test_passes_only_declared_environment(world: World) -> None:
    dump = world.attack("steal_secrets.py", permissions={"env": ["GITHUB_TOKEN"]})
    assert dump["environ"]["GITHUB_TOKEN"] == world.token
    assert "AWS_SECRET_ACCESS_KEY" not in dump["environ"]
    assert "CORRAL_TEST_SECRET" not in dump["environ"]


def test_node_runtime_is_confined_too(world: World) -> None:
    node = os.path.realpath("/usr/bin/node")
    assert os.path.exists(node), "node is not installed (apt install nodejs)"
    targets = [str(world.home / ".ssh" / "id_rsa"), str(ROOT / "pyproject.toml")]
    report = world.run(
        "read_home.js", argv=[node, str(world.ext_dir / "read_home.js"), json.dumps(targets)]
    )
    assert report["returncode"] == 0, report["stderr"]
    verdict = json.loads(report["stdout"])
    assert verdict == dict.fromkeys(targets, "error: ENOENT")


def test_dangerous_kernel_interfaces_are_refused(world: World) -> None:
    verdict = world.attack("syscalls.py")
    assert all(result != 0 for result in verdict.values()), verdict


def test_unix_sockets_allowed_with_network(world: World) -> None:
    verdict = world.attack("syscalls.py", permissions={"network": True})
    assert verdict["socket(AF_UNIX)"] == 0
    assert verdict["unshare(CLONE_NEWUSER)"] != 0


def test_cannot_create_set_id_programs(world: World) -> None:
    verdict = world.attack("setuid.py", str(world.data_dir))
    for name in ("chmod", "fchmod", "open", "mknod"):
        path = world.data_dir / name
        if path.exists():
            assert path.stat().st_mode & 0o6000 == 0, (name, verdict)
    assert not any(v.startswith(("0o4", "0o6")) for v in verdict.values())
