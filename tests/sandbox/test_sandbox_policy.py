"""Class 6: over-broad grants are refused unless the manifest names them in ``unsafe``.

Each attacking manifest asks for something that would hand the extension the
machine or the user's credentials: writable system trees and dotfiles, credential
stores even read-only, its own directory as writable, loader and interpreter
variables. The real supervisor refuses every one (naming the field and the way to
ask anyway) and never starts it; the same request with a matching ``unsafe``
entry is accepted, and the entry is what the user gets to review.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio
from helpers.paths import REPO as ROOT
from helpers.sandbox_harness import World
from helpers.supervised import CYCLE, Lab

from sandbox import Permissions, PermissionsError, check_permissions, validate_permissions

#: (name, permissions) of manifests the supervisor must refuse; paths that exist
#: on any Linux host, so the refusal is the policy and not "does not exist".
_REFUSED: list[tuple[str, dict[str, object], str]] = [
    ("etc-rw", {"read_write": ["/etc"]}, "/etc/shadow"),
    ("boot-rw", {"read_write": ["/var/tmp/../../boot"]}, "system tree"),
    ("usr-rw", {"read_write": ["/usr/share"]}, "system tree"),
    ("var-rw", {"read_write": ["/var/log"]}, "system tree"),
    ("etc-ro", {"read_only": ["/etc"]}, "/etc/shadow"),
    ("run-ro", {"read_only": ["/run"]}, "credentials"),
    ("self-rw", {"read_write": ["."]}, "own directory"),
    ("parent-rw", {"read_write": [".."]}, "own directory"),
    ("preload", {"env": ["LD_PRELOAD"]}, "loader"),
    ("pypath", {"env": ["PYTHONPATH"]}, "loader"),
    ("nodeopts", {"env": ["NODE_OPTIONS"]}, "loader"),
]


async def test_the_supervisor_refuses_over_broad_manifests(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    exts = [lab.extension(name, **perms) for name, perms, _ in _REFUSED]
    allowed = lab.extension("allowed", read_write=["/etc"], unsafe=["/etc"])
    with trio.fail_after(CYCLE):
        async with lab.open(*exts, allowed) as client:
            infos = {i.name: i for i in await client.list_extensions()}
    for name, perms, why in _REFUSED:
        status = infos[name]
        assert status.state != "running", name
        field = next(iter(perms))
        assert f"permissions.{field}[0]" in status.problem, (name, status.problem)
        assert why in status.problem, (name, status.problem)
        assert "permissions.unsafe" in status.problem, name
        assert not lab.log(name).exists(), name  # never started
    # Named in `unsafe`, the same grant is the author's explicit, visible request.
    assert infos["allowed"].state == "running"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home" / "alice"
    for d in (".ssh", ".gnupg", ".aws", ".config/gcloud", ".config/app", ".mozilla", "work"):
        (home / d).mkdir(parents=True)
    for f in (".bashrc", ".profile", ".netrc", ".aws/credentials", ".git-credentials"):
        (home / f).write_text("x\n")
    (tmp_path / "ext").mkdir()
    return home


def _check(home: Path, **fields: object) -> Permissions:
    return validate_permissions(
        Permissions(**fields),  # type: ignore[arg-type]
        str(home.parent.parent / "ext"),
        home=str(home),
        corral_home=str(home / ".local" / "state" / "corral"),
    )


@pytest.mark.parametrize(
    ("field", "path", "why"),
    [
        ("read_write", "~/.bashrc", "dotfile"),
        ("read_write", "~/.profile", "dotfile"),
        ("read_write", "~/.config/app", "dotfile"),
        ("read_only", "~/.ssh", "credentials"),
        ("read_only", "~/.gnupg", "credentials"),
        ("read_only", "~/.aws/credentials", "credentials"),
        ("read_only", "~/.config", "contains"),
        ("read_only", "~/.config/gcloud", "credentials"),
        ("read_only", "~/.netrc", "credentials"),
        ("read_only", "~/.git-credentials", "credentials"),
        ("read_only", "~/.mozilla", "credentials"),
        ("read_write", str(ROOT), "corral's own installation"),
        ("read_write", sys.prefix, "corral's own installation"),
    ],
)
def test_risky_paths_need_unsafe(home: Path, field: str, path: str, why: str) -> None:
    with pytest.raises(PermissionsError) as info:
        _check(home, **{field: ["~/work", path]} if field == "read_only" else {field: [path]})
    assert info.value.field.startswith(f"permissions.{field}[")
    assert why in info.value.message
    assert f"list {path!r} in permissions.unsafe" in info.value.message
    perms = _check(home, **{field: [path]}, unsafe=[path])
    resolved = getattr(perms, field)[0]
    assert perms.unsafe == [resolved]


@pytest.mark.parametrize(
    "name",
    ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "DYLD_INSERT_LIBRARIES", "PYTHONPATH",
     "PYTHONSTARTUP", "PYTHONHOME", "NODE_OPTIONS", "NODE_PATH", "PERL5OPT", "PERL5LIB",
     "RUBYOPT", "RUBYLIB", "BASH_ENV", "ENV", "GCONV_PATH", "GLIBC_TUNABLES",
     "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "OPENSSL_ENGINES", "GIT_SSH_COMMAND", "LUA_INIT"],
)  # fmt: skip
def test_injection_variables_need_unsafe(home: Path, name: str) -> None:
    with pytest.raises(PermissionsError) as info:
        _check(home, env=["GITHUB_TOKEN", name])
    assert info.value.field == "permissions.env[1]"
    assert "permissions.unsafe" in info.value.message
    assert _check(home, env=[name], unsafe=[name]).unsafe == [name]


def test_harmless_requests_need_nothing(home: Path) -> None:
    perms = _check(
        home,
        read_only=["~/.config/app", "~/.bashrc"],
        read_write=["~/work"],
        env=["GITHUB_TOKEN", "NODE_ENV", "LANG"],
    )
    assert perms.unsafe == []


def test_unsafe_must_name_a_listed_entry(home: Path) -> None:
    with pytest.raises(PermissionsError) as info:
        _check(home, read_only=["~/work"], unsafe=["~/.ssh"])
    assert info.value.field == "permissions.unsafe[0]"
    assert "names nothing" in info.value.message


def test_unsafe_grants_still_never_reach_the_kernel_or_home(home: Path) -> None:
    for path, why in (("/", "whole disk"), ("/proc", "/proc"), ("~", "home directory")):
        with pytest.raises(PermissionsError, match=why):
            _check(home, read_write=[path], unsafe=[path])


def test_acknowledged_grant_works_and_is_visible(world: World) -> None:
    """With the override, the extension gets exactly what its author named."""
    secret = world.home / ".ssh" / "id_rsa"
    perms = {"read_only": [str(world.home / ".ssh")], "unsafe": [str(world.home / ".ssh")]}
    checked = check_permissions(
        Permissions(**perms),  # type: ignore[arg-type]
        str(world.ext_dir),
        home=str(world.home),
        corral_home=str(world.corral_home),
    )
    assert checked.permissions.unsafe == [str(world.home / ".ssh")]
    verdict = world.attack(
        "granted.py", json.dumps({"read": [str(secret)], "write": [str(secret)]}), permissions=perms
    )
    assert verdict["read"][str(secret)].startswith(world.token)
    assert verdict["write"][str(secret)].startswith("error")  # read-only, as declared
