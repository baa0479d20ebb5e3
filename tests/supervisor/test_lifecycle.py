"""The extension lifecycle: the transition table on its own, then one race for real."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import structlog
import trio
from helpers.supkit import CYCLE, Kit

from supervisor import ExtensionState, IllegalTransition
from supervisor._lifecycle import LISTED, SERVING, TRANSITIONS, Lifecycle

S = ExtensionState

#: What one run goes through, the ways the supervisor drives it.
PATHS = {
    "start, serve, stop": [S.STARTING, S.REGISTERING, S.RUNNING, S.STOPPING, S.STOPPED],
    "crash, back off, restart": [S.STARTING, S.REGISTERING, S.RUNNING, S.BACKOFF, S.STARTING],
    "stop during backoff": [S.STARTING, S.BACKOFF, S.STOPPED],
    "refused at hello, enabled again": [S.STARTING, S.FAILED, S.STOPPED, S.STARTING],
    "crashed too often, enabled": [S.STARTING, S.RUNNING, S.QUARANTINED, S.STOPPED],
    "untrusted before a respawn": [S.STARTING, S.REGISTERING, S.BACKOFF, S.UNTRUSTED],
    "exit under restart never": [S.STARTING, S.REGISTERING, S.RUNNING, S.STOPPED],
    "disabled": [S.DISABLED],
}


@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
def test_the_supervisor_paths_are_legal(path: list[ExtensionState]) -> None:
    life = Lifecycle("x")
    for state in path:
        if state is S.RUNNING and life.state is S.STARTING:
            life.move(S.REGISTERING)
        life.move(state)
        assert life.state is state
    assert repr(life) == f"<Lifecycle 'x' {path[-1].name}>"


def test_every_state_has_a_row_and_listing_states_are_unreachable() -> None:
    assert set(TRANSITIONS) == set(ExtensionState)
    targets = set(itertools.chain.from_iterable(TRANSITIONS.values()))
    assert S.INVALID not in targets
    assert S.DUPLICATE not in targets
    assert not TRANSITIONS[S.INVALID]
    assert not TRANSITIONS[S.DUPLICATE]
    assert not TRANSITIONS[S.DISABLED]
    assert SERVING < LISTED


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.STOPPING, S.RUNNING),  # a late ready frame while the ladder runs
        (S.STOPPING, S.REGISTERING),  # a late hello while the ladder runs
        (S.STOPPED, S.RUNNING),  # never ready without hello
        (S.RUNNING, S.STARTING),  # a respawn goes through BACKOFF
        (S.DISABLED, S.STARTING),  # a disabled extension never starts
        (S.QUARANTINED, S.STARTING),  # only enable (-> STOPPED) lifts it
        (S.STOPPED, S.INVALID),
    ],
)
def test_illegal_moves_raise_and_change_nothing(old: ExtensionState, new: ExtensionState) -> None:
    life = Lifecycle("guard", old)
    assert not life.can(new)
    with pytest.raises(IllegalTransition) as caught:
        life.move(new)
    assert life.state is old
    assert (caught.value.extension, caught.value.old, caught.value.new) == (
        "guard",
        old.value,
        new.value,
    )
    assert f"{old.value} -> {new.value}" in str(caught.value)


def test_state_is_a_string_on_the_wire() -> None:
    assert S.RUNNING == "running"
    assert f"{S.QUARANTINED}" == "quarantined"


LATE_HELLO = """
import pathlib, time
marker = pathlib.Path(os.environ["CORRAL_EXT_DIR"]) / "ran-once"
if not marker.exists():
    marker.write_text("x")
    emit({"type": "hello", "name": NAME})
    emit({"type": "ready"})
    time.sleep(0.2)
    sys.exit(3)
# The restart: silent until the host asks it to stop, then hello and ready anyway.
for frame in frames():
    if frame.get("type") == "shutdown":
        emit({"type": "hello", "name": NAME})
        emit({"type": "ready"})
        time.sleep(0.1)
        break
"""


async def test_a_stop_while_starting_wins_over_a_late_hello(kit: Kit) -> None:
    d = kit.inline("late", LATE_HELLO)
    cfg = kit.config(handshake_timeout=5.0, shutdown_grace=1.0, restart_backoff=0.05)
    respawned = trio.Event()

    def watch(_logger: object, _method: str, entry: dict[str, Any]) -> dict[str, Any]:
        if entry["event"] == "extension_state" and entry["new"] == "starting":
            spawns.append(entry)
            if len(spawns) == 2:
                respawned.set()
        return entry

    spawns: list[dict[str, Any]] = []
    with trio.fail_after(CYCLE), structlog.testing.capture_logs(processors=[watch]) as logs:
        async with kit.open(d, config=cfg) as client:
            await respawned.wait()
            assert (await client.list_extensions())[0].state is S.STARTING
    states = [e["new"] for e in logs if e["event"] == "extension_state"]
    last_start = len(states) - 1 - states[::-1].index("starting")
    assert states[last_start + 1 :] == ["stopping", "stopped"]
    ignored = [e["frame"] for e in logs if e["event"] == "late_frame_ignored"]
    assert ignored == ["hello", "ready"]
    assert (d / "ran-once").exists()
