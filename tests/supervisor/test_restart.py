"""The restart policy as pure logic (no processes: ``decide`` is a pure function)."""

from __future__ import annotations

import pytest

from supervisor import SupervisorConfig
from supervisor._restart import Decision, Verdict, decide, describe_exit, exit_signal

CFG = SupervisorConfig(
    home="/nonexistent",
    restart_backoff=1.0,
    restart_backoff_max=4.0,
    quarantine_crashes=3,
    quarantine_window=60.0,
)


def run(crashes: tuple[float, ...] = (), now: float = 100.0, **kw: object) -> Decision:
    args: dict[str, object] = {
        "name": "x",
        "policy": "on-failure",
        "returncode": 3,
        "refused": None,
        "early_exit": None,
        "crashes": crashes,
        "now": now,
        "config": CFG,
        "jitter": 1.0,
    }
    args.update(kw)
    return decide(**args)  # type: ignore[arg-type]


def test_one_text_for_how_a_child_ended() -> None:
    assert describe_exit(3) == "exit status 3"
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(-9, guardian_lost=True) == (
        "killed by SIGKILL: corral's guardian process died"
    )
    assert describe_exit(-40) == "killed by signal 40"  # no name: not an error
    assert describe_exit(None) == "still running"
    assert (exit_signal(-15), exit_signal(0), exit_signal(None)) == ("SIGTERM", None, None)


def test_refusal_is_final_and_not_a_crash() -> None:
    d = run((5.0,), refused="hello names 'y'")
    assert d.verdict is Verdict.FAILED
    assert d.reason == "hello names 'y'"
    assert d.recent == (5.0,)


@pytest.mark.parametrize(
    ("policy", "code", "verdict"),
    [
        ("on-failure", 0, Verdict.STOPPED),
        ("on-failure", 3, Verdict.RESTART),
        ("on-failure", -9, Verdict.RESTART),
        ("always", 0, Verdict.RESTART),
        ("never", 3, Verdict.STOPPED),
    ],
)
def test_policies(policy: str, code: int, verdict: Verdict) -> None:
    assert run(policy=policy, returncode=code).verdict is verdict


def test_backoff_doubles_up_to_the_ceiling_times_the_jitter() -> None:
    cfg = SupervisorConfig(
        home="/n", restart_backoff=1.0, restart_backoff_max=4.0, quarantine_crashes=10
    )
    crashes: tuple[float, ...] = ()
    delays = []
    for i in range(5):
        d = run(crashes, now=100.0 + i, policy="always", config=cfg, jitter=1.1)
        crashes = d.recent
        delays.append(d.delay)
    assert delays == pytest.approx([1.1, 2.2, 4.4, 4.4, 4.4])
    assert crashes == (100.0, 101.0, 102.0, 103.0, 104.0)


def test_quarantine_after_n_crashes_in_the_window_only() -> None:
    before = (0.0, 10.0)  # the first is outside a 60 s window
    d = run(before, now=65.0)
    assert d.verdict is Verdict.RESTART
    assert d.recent == (10.0, 65.0)
    d = run(d.recent, now=66.0)
    assert d.verdict is Verdict.QUARANTINE
    assert "crashed 3 times in 60 s" in d.reason
    assert "corral ext enable x" in d.reason
    assert before == (0.0, 10.0)  # pure: what it was given is unchanged


def test_exit_before_hello_is_a_crash_that_says_so() -> None:
    d = run(early_exit="sending hello", returncode=7)
    assert d.verdict is Verdict.RESTART
    assert d.reason == "exited before sending hello (exit status 7)"
