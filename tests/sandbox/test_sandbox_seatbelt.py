"""The macOS backend: the generated SBPL profile, checked as text (no Mac here)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sandbox import LaunchRequest, Permissions, select_sandbox
from sandbox._seatbelt import SANDBOX_EXEC, SeatbeltSandbox, seatbelt_profile


def _profile(**overrides: object) -> str:
    fields: dict[str, object] = {
        "name": "demo",
        "read_only": ["/opt/ext/demo", "/Users/alice/notes"],
        "read_write": ["/Users/alice/Library/Application Support/corral/data/demo"],
        "network": False,
    }
    fields.update(overrides)
    return seatbelt_profile(**fields)  # type: ignore[arg-type]


def _rules(profile: str) -> list[str]:
    return [line for line in profile.splitlines() if line and not line.startswith(";")]


def test_profile_denies_by_default() -> None:
    rules = _rules(_profile())
    assert rules[0] == "(version 1)"
    assert rules[1] == "(deny default)"
    # Nothing is allowed wholesale: every allow names what it allows.
    for rule in rules[2:]:
        assert rule.startswith("(allow "), rule
        assert rule not in ("(allow default)", "(allow file-read*)", "(allow file-write*)")


def test_grants_appear_with_the_right_rights() -> None:
    profile = _profile()
    read_line = next(r for r in _rules(profile) if r.startswith("(allow file-read* file-map"))
    write_line = next(r for r in _rules(profile) if r.startswith("(allow file-read* file-write*"))
    assert '(subpath "/opt/ext/demo")' in read_line
    assert '(subpath "/Users/alice/notes")' in read_line
    assert '(subpath "/Users/alice/notes")' not in write_line
    assert '(subpath "/Users/alice/Library/Application Support/corral/data/demo")' in write_line
    # The home directory itself is never readable, only its metadata (realpath).
    assert '(subpath "/Users/alice")' not in profile
    assert '(literal "/Users/alice")' in profile


def test_network_only_when_granted() -> None:
    assert "network" not in " ".join(_rules(_profile()))
    granted = _profile(network=True)
    assert "(allow network*)" in granted
    assert "com.apple.dnssd.service" in granted
    assert '(subpath "/private/etc/resolv.conf")' in granted


def test_processes_only_signal_their_own_sandbox() -> None:
    profile = _profile()
    assert "(allow signal (target same-sandbox))" in profile
    assert "(allow process-info* (target same-sandbox))" in profile


def test_paths_are_escaped() -> None:
    profile = _profile(read_only=['/tmp/we"ird\\path', "/tmp/new\nline"])
    assert '(subpath "/tmp/we\\"ird\\\\path")' in profile
    assert '(subpath "/tmp/new\\x0aline")' in profile
    assert "new\nline" not in profile


def test_plan_wraps_argv_and_uses_a_private_tmp(tmp_path: Path) -> None:
    ext = tmp_path / "ext"
    ext.mkdir()
    data = tmp_path / "data"
    backend = SeatbeltSandbox()
    request = LaunchRequest(
        name="demo",
        argv=[sys.executable, str(ext / "main.py")],
        env={"PATH": "/usr/bin:/bin", "HOME": "/Users/alice"},
        ext_dir=str(ext),
        data_dir=str(data),
        permissions=Permissions(network=False),
    )
    plan = backend.plan(request)
    try:
        assert plan.argv[:2] == [SANDBOX_EXEC, "-p"]
        assert plan.argv[3:] == request.argv
        assert plan.sandboxed
        assert plan.backend == "sandbox-exec"
        tmp = plan.run_dirs[0]
        assert os.path.isdir(tmp)
        assert plan.env["TMPDIR"] == tmp
        assert plan.env["HOME"] == str(data)
        assert f'(subpath "{os.path.realpath(tmp)}")' in plan.argv[2]
        assert f'(subpath "{os.path.realpath(ext)}")' in plan.argv[2]
        assert any("process limit" in n for n in plan.notes)
    finally:
        backend.cleanup(plan)
        backend.cleanup(plan)  # idempotent
    assert not os.path.exists(tmp)


@pytest.mark.skipif(sys.platform != "linux", reason="checks the choice made on Linux")
def test_never_chosen_on_linux() -> None:
    assert select_sandbox("auto").backend == "bwrap"
    assert select_sandbox("required").backend == "bwrap"
