"""Class 7: the smaller leaks are closed.

Socket families a program does not need (``AF_VSOCK`` reaches the hypervisor,
``AF_ALG`` the kernel's crypto, ``AF_PACKET`` raw frames), ``personality`` flags
that turn off address-space randomisation, ``modify_ldt``, a private ``/tmp``
whose inodes (kernel memory) had no cap, and every host ``LC_*`` variable.
"""

from __future__ import annotations

import json
import platform
import socket
import uuid
from pathlib import Path

import pytest
import trio
from helpers.sandbox_harness import World
from helpers.supervised import CYCLE, Lab, act

_REFUSED_FAMILIES = (
    "packet", "vsock", "alg", "bluetooth", "can", "tipc", "key", "xdp", "rds", "appletalk",
)  # fmt: skip


def _host_has_ipv6() -> bool:
    try:
        socket.socket(socket.AF_INET6).close()
    except OSError:
        return False
    return True


@pytest.mark.parametrize("network", [False, True], ids=["offline", "network"])
def test_only_the_socket_families_a_program_needs(world: World, network: bool) -> None:
    verdict = world.attack("sockets.py", permissions={"network": network})
    for label in _REFUSED_FAMILIES:
        assert verdict[f"socket {label}"] == "EAFNOSUPPORT", (label, verdict)
    for label in ("netlink-sock-diag", "netlink-uevent", "netlink-audit"):
        assert verdict[f"socket {label}"] == "EPROTONOSUPPORT", (label, verdict)
    assert verdict["socketpair tipc"] == "EAFNOSUPPORT"
    # What programs do need still works.
    assert verdict["socket inet"] == "ok"
    if _host_has_ipv6():
        assert verdict["socket inet6"] == "ok"
    assert verdict["socket netlink-route"] == "ok"
    assert verdict["getaddrinfo"] == "ok"
    assert verdict["socketpair unix"] == "ok"
    assert verdict["socket unix"] == ("ok" if network else "EPERM")


def test_personality_flags_and_ldt_are_refused(world: World) -> None:
    verdict = world.attack("sockets.py")
    assert verdict["personality query"] == "ok"
    for flag in ("no-aslr", "read-implies-exec", "page-zero"):
        assert verdict[f"personality {flag}"] == "EPERM", (flag, verdict)
    assert int(verdict["personality now"], 16) == 0  # still PER_LINUX, randomised
    if platform.machine() == "x86_64":
        assert verdict["modify_ldt"] == "EPERM"


def test_private_tmp_has_an_inode_cap(world: World) -> None:
    # 2 MiB of tmpfs: 2048 inodes each. Empty files cost no space, only inodes.
    verdict = world.attack(
        "many_files.py", json.dumps(["/tmp", "/dev/shm"]), "100000",
        permissions={"limits": {"tmp_mb": 2}},
    )  # fmt: skip
    for directory in ("/tmp", "/dev/shm"):
        made = verdict[directory]
        assert made["end"] == "ENOSPC", verdict
        assert 2048 - 16 <= made["files"] <= 2048, verdict


async def test_only_standard_locale_variables_reach_the_extension(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = f"SECRET-{uuid.uuid4().hex}"
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("LANGUAGE", "en")
    monkeypatch.setenv("LC_SECRET_TOKEN", token)  # anything may hide behind the prefix
    monkeypatch.setenv("LC_IDENTIFICATION", "C")
    lab = Lab(tmp_path)
    ext = lab.extension("envy")
    with trio.fail_after(CYCLE):
        async with lab.open(ext) as client:
            shown = await act(client, "envy", "look", path="/proc/self/environ")
    environ = shown["ok"]
    seen = dict(item.split("=", 1) for item in environ.split("\0") if "=" in item)
    assert seen["LC_TIME"] == "C"
    assert seen["LANGUAGE"] == "en"
    assert seen["LC_IDENTIFICATION"] == "C"
    assert "LC_SECRET_TOKEN" not in seen
    assert token not in environ
