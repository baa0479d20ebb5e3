"""``select_sandbox`` and ``check_sandbox``: what each mode does when a backend works or not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import sandbox
from sandbox import (
    LaunchRequest,
    SandboxUnavailable,
    _select,
    check_sandbox,
    format_report,
    select_sandbox,
)
from sandbox import _probe as probe_module


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the cached probe and backends for this test only."""
    monkeypatch.setattr(_select, "_probe", None)
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
