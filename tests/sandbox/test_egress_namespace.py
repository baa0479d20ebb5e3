"""A child with a network list: its own network namespace, and the proxy's listener in it.

The child (the guardian's, before ``exec``) makes a user and network namespace,
brings up its loopback, listens on ``127.0.0.1:3128`` there and hands the
listening socket to the host: connections from inside reach the host directly,
while nothing else of the host's network (its loopback services, its abstract
unix sockets) is reachable. Real bwrap, real guardian; as root and, in CI's
second pass, as an unprivileged user.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from sandbox import (
    EGRESS_PORT,
    LaunchPlan,
    LaunchRequest,
    Permissions,
    PlanError,
    Sandbox,
    check_permissions,
    select_sandbox,
    spawn,
    start_guardian,
)
from sandbox._bwrap import BwrapSandbox

TIMEOUT = 60.0

#: Run inside: report the proxy variables, then try each target; print one JSON object.
PROBE = r"""
import json, os, socket, sys
out = {"env": {k: v for k, v in os.environ.items() if k.lower().endswith("_proxy")}}
out["netns"] = os.readlink("/proc/self/ns/net")
for target in sys.argv[1:]:
    kind, _, where = target.partition("=")
    try:
        if kind == "tcp":
            host, port = where.rsplit(":", 1)
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(b"ping")
            out[target] = "ok " + s.recv(16).decode()
        else:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect("\0" + where)
            out[target] = "ok"
        s.close()
    except OSError as exc:
        out[target] = type(exc).__name__
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def bwrap() -> BwrapSandbox:
    chosen = select_sandbox("auto")
    if not isinstance(chosen, BwrapSandbox):
        pytest.skip(f"no bwrap here ({chosen.backend})")
    return chosen


@pytest.fixture
def ext_dir(tmp_path: Path) -> Path:
    tmp_path.chmod(0o755)
    return tmp_path


def _request(ext_dir: Path, network: bool | list[str], *targets: str) -> LaunchRequest:
    unsafe = [e for e in network if e.startswith("127.")] if isinstance(network, list) else []
    perms = check_permissions(
        Permissions(network=network, unsafe=unsafe, data_dir=False),
        str(ext_dir),
        home="",
        corral_home="",
    ).permissions
    return LaunchRequest(
        name="netns",
        argv=[sys.executable, "-I", "-c", PROBE, *targets],
        env={"PATH": "/usr/bin:/bin"},
        ext_dir=str(ext_dir),
        data_dir=None,
        permissions=perms,
        interpreter=sys.executable,
    )


@pytest.fixture
def host_tcp() -> Iterator[socket.socket]:
    """A service on the host's loopback, which a sandboxed child must not reach."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(TIMEOUT)
    yield server
    server.close()


@pytest.fixture
def host_abstract() -> Iterator[str]:
    """An abstract unix socket of the host (as Docker, X11 or dbus may have)."""
    name = f"corral-test-{uuid.uuid4().hex}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(4)
    yield name
    server.close()


def _run(sandbox: Sandbox, request: LaunchRequest) -> tuple[dict[str, str], LaunchPlan]:
    """Run the probe; serve the proxy's listener (an echo) if the plan has one."""
    plan = sandbox.plan(request)
    try:
        child = spawn(plan, stdin=subprocess.DEVNULL)
        try:
            listener = child.take_listener()
            if listener is not None:
                with listener:
                    assert listener.getsockname() == ("127.0.0.1", EGRESS_PORT)
                    listener.settimeout(TIMEOUT)
                    if any(t.endswith(f":{EGRESS_PORT}") for t in request.argv):
                        conn, _ = listener.accept()
                        with conn:
                            conn.sendall(b"proxy:" + conn.recv(16))
            out, err = child.communicate(timeout=TIMEOUT)
        finally:
            child.close()
    finally:
        sandbox.cleanup(plan)
    assert child.returncode == 0, err.decode()
    return json.loads(out), plan


def test_a_list_gets_the_listener_and_nothing_else(
    bwrap: BwrapSandbox, ext_dir: Path, host_tcp: socket.socket, host_abstract: str
) -> None:
    port = host_tcp.getsockname()[1]
    targets = [f"tcp=127.0.0.1:{EGRESS_PORT}", f"tcp=127.0.0.1:{port}", f"unix={host_abstract}"]
    got, plan = _run(bwrap, _request(ext_dir, [f"127.0.0.1:{port}"], *targets))
    assert plan.egress == [f"127.0.0.1:{port}"]
    assert plan.egress_port == EGRESS_PORT
    # The proxy's listener, held by the host, answers from inside...
    assert got[targets[0]] == "ok proxy:ping"
    # ...but the granted destination itself is not reachable around the proxy,
    assert got[targets[1]] == "ConnectionRefusedError"
    # nor the host's abstract sockets (seccomp refuses unix sockets here, too).
    assert got[targets[2]] in ("PermissionError", "ConnectionRefusedError")
    assert got["netns"] != os.readlink("/proc/self/ns/net")
    assert got["env"]["HTTP_PROXY"] == got["env"]["https_proxy"] == "http://127.0.0.1:3128"
    assert got["env"]["ALL_PROXY"] == "socks5h://127.0.0.1:3128"


def test_the_host_abstract_socket_is_out_of_reach_without_seccomp_too(
    bwrap: BwrapSandbox, ext_dir: Path, host_abstract: str
) -> None:
    # Without the filter (which refuses unix sockets), only the namespace stands
    # between the child and the host's abstract sockets: they are per network
    # namespace, and the child's is new.
    plain = BwrapSandbox(msgspec.structs.replace(bwrap.config, seccomp=False), bwrap.cgroups)
    target = f"unix={host_abstract}"
    got, _ = _run(plain, _request(ext_dir, ["api.example.com"], target))
    assert got[target] == "ConnectionRefusedError"
    # The same probe with the host's network reaches it: the test can tell.
    shared, _ = _run(plain, _request(ext_dir, True, target))
    assert shared[target] == "ok"


def test_without_a_list_there_is_no_listener(bwrap: BwrapSandbox, ext_dir: Path) -> None:
    target = f"tcp=127.0.0.1:{EGRESS_PORT}"
    got, plan = _run(bwrap, _request(ext_dir, False, target))
    assert plan.egress == []
    assert plan.egress_port == 0
    assert got[target] == "ConnectionRefusedError"
    assert got["env"] == {}


def test_a_list_needs_namespaces_of_the_child(bwrap: BwrapSandbox, ext_dir: Path) -> None:
    plain = BwrapSandbox(msgspec.structs.replace(bwrap.config, private_tmpfs=False))
    with pytest.raises(PlanError, match="network namespace made by corral's child"):
        plain.plan(_request(ext_dir, ["api.example.com"]))


def test_the_listener_and_its_socket_are_not_left_open(bwrap: BwrapSandbox, ext_dir: Path) -> None:
    start_guardian()  # its socket lives as long as this process
    before = set(os.listdir("/proc/self/fd"))
    for _ in range(3):
        _run(bwrap, _request(ext_dir, ["api.example.com"], f"tcp=127.0.0.1:{EGRESS_PORT}"))
    assert set(os.listdir("/proc/self/fd")) <= before
