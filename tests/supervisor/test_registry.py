"""The tool/command registry (pure bookkeeping), with fake owners."""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from supervisor import ChildKind
from supervisor import _frames as f
from supervisor._registry import Registry

SCHEMA = {"type": "object"}


@dataclass
class FakeOwner:
    name: str
    tools: dict[str, f.RegisterTool] = field(default_factory=dict)
    commands: dict[str, f.RegisterCommand] = field(default_factory=dict)
    listed: bool = True
    kind: ChildKind = ChildKind.EXTENSION
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        self.notes.append(text)


def owner(name: str, tools: list[str] = (), commands: list[str] = ()) -> FakeOwner:  # type: ignore[assignment]
    return FakeOwner(
        name,
        {t: f.RegisterTool(name=t, description=f"{t} by {name}", schema=SCHEMA) for t in tools},
        {c: f.RegisterCommand(name=c, description=f"/{c} by {name}") for c in commands},
    )


def make() -> Registry[FakeOwner]:
    return Registry(("read", "write", "edit", "bash"), ("help", "ext", "reload-ext"))


def test_first_loaded_wins_regardless_of_registration_order() -> None:
    reg = make()
    a, b = owner("a", ["echo", "a_only"], ["hi"]), owner("b", ["echo", "b_only"], ["hi"])
    assert reg.rebuild([a, b])  # handed over in load order: first loaded wins
    assert reg.tool_owner("echo") is a
    assert reg.command_owner("hi") is a
    assert reg.tool_owner("b_only") is b
    assert [(t.name, t.extension) for t in reg.tool_infos()] == [
        ("echo", "a"),
        ("a_only", "a"),
        ("b_only", "b"),
    ]
    assert [(c.name, c.extension, c.description) for c in reg.command_infos()] == [
        ("hi", "a", "/hi by a"),
    ]
    # The one that lost is told in its own log (ext logs), once.
    reg.rebuild([a, b])
    assert b.notes == [
        "tool 'echo' not registered: the name is taken by a",
        "command 'hi' not registered: the name is taken by a",
    ]
    assert a.notes == []


def test_builtins_win_and_every_clash_is_logged_once() -> None:
    reg = make()
    a = owner("a", ["bash", "read", "mine"], ["help", "ext", "reload-ext", "ok"])
    b = owner("b", ["mine"], ["ok"])
    with structlog.testing.capture_logs() as logs:
        reg.rebuild([a, b])
        reg.rebuild([a, b])  # the same clashes again: not logged twice
    assert reg.tool_owner("bash") is None
    assert reg.tool_owner("read") is None
    assert reg.command_owner("help") is None
    assert reg.command_owner("ext") is None
    assert reg.tool_owner("mine") is a
    assert reg.command_owner("ok") is a
    clashes = sorted(
        (e["kind"], e["name"], e["shadowed"], e["winner"])
        for e in logs
        if e["event"] == "name_clash"
    )
    assert clashes == [
        ("command", "ext", "a", "built-in"),
        ("command", "help", "a", "built-in"),
        ("command", "ok", "b", "a"),
        ("command", "reload-ext", "a", "built-in"),
        ("tool", "bash", "a", "built-in"),
        ("tool", "mine", "b", "a"),
        ("tool", "read", "a", "built-in"),
    ]


def test_unlisted_owner_hands_names_over_and_back() -> None:
    reg = make()
    a, b = owner("a", ["echo"]), owner("b", ["echo"])
    reg.rebuild([a, b])
    a.listed = False  # e.g. quarantined or stopped
    assert reg.rebuild([a, b]) is True
    assert reg.tool_owner("echo") is b
    a.listed = True
    assert reg.rebuild([a, b]) is True
    assert reg.tool_owner("echo") is a
    assert reg.rebuild([a, b]) is False  # nothing changed: no ToolsChanged


def test_rebuild_reports_description_changes() -> None:
    reg = make()
    a = owner("a", ["echo"])
    reg.rebuild([a])
    a.tools["echo"] = f.RegisterTool(name="echo", description="new", schema=SCHEMA)
    assert reg.rebuild([a]) is True
    assert reg.tool_infos()[0].description == "new"
    assert reg.rebuild([]) is True
    assert reg.tool_infos() == []
    assert reg.tool_owner("echo") is None
