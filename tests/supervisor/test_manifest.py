"""Manifests and discovery: field-level errors, load order, duplicates, invalid ones."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers.hostile import SPECIAL, make_special, run_bounded
from helpers.paths import CHAOS
from helpers.supkit import CYCLE, Kit, capture_logs

from supervisor import ChildKind, ManifestError, Runtime, discover, load_manifest
from supervisor.lowlevel import choice_file


def _write(d: Path, content: str | dict[str, Any]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    text = content if isinstance(content, str) else json.dumps(content)
    (d / "extension.json").write_text(text)
    return d


def _ok(name: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"name": name, "exec": str(CHAOS), "language": "python", **extra}


def test_valid_manifest_loads(tmp_path: Path) -> None:
    d = _write(tmp_path / "ok", _ok(version="2.0", args=["--hang"], description="d"))
    (d / "run.sh").write_text("#!/bin/sh\n")
    spec = load_manifest(d, "project", home=str(tmp_path / "home"))
    assert spec.name == "ok"
    assert spec.source == "project"
    assert spec.dir == str(d)
    assert spec.manifest_path == str(d / "extension.json")
    assert spec.exec_path == str(CHAOS)
    assert spec.manifest.args == ["--hang"]
    assert spec.manifest.enabled is True
    assert spec.manifest.restart == "on-failure"
    assert spec.unknown_fields == []
    # A file path works as well as its directory; relative exec resolves against it.
    _write(d, {"name": "ok", "exec": "./run.sh"})
    assert load_manifest(d / "extension.json").exec_path == str(d / "run.sh")


@pytest.mark.parametrize(
    "spelling",
    ["{d}", "{d}/", "{d}//", "{d}/.", "{d}/./extension.json", "{rel}", "./{rel}/", "~/{home_rel}"],
)
def test_a_manifest_path_is_made_absolute_as_pathlib_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    # Made absolute with strings (every start reads a manifest), spelled as
    # Path(...).expanduser().absolute() spells it: the same dir and manifest path.
    d = _write(tmp_path / "user" / "exts" / "ok", {"name": "ok", "exec": "./run.sh"})
    (d / "run.sh").write_text("#!/bin/sh\n")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.chdir(tmp_path / "user")
    named = spelling.format(d=d, rel="exts/ok", home_rel="exts//ok/")
    spec = load_manifest(named)
    assert (spec.dir, spec.manifest_path) == (str(d), str(d / "extension.json"))
    assert spec.exec_path == str(d / "run.sh")


def test_a_directory_reached_through_a_link_keeps_its_spelling_and_real_identity(
    tmp_path: Path,
) -> None:
    d = _write(tmp_path / "real" / "ok", _ok())
    (tmp_path / "link").symlink_to(tmp_path / "real")
    spec = load_manifest(tmp_path / "link" / "ok")
    assert spec.dir == str(tmp_path / "link" / "ok")  # where it was named
    assert spec.pins[0].real == os.path.realpath(d)  # what is bound, and keys its state
    assert spec.identity == load_manifest(d).identity


@pytest.mark.parametrize(
    ("content", "field", "words"),
    [
        ({"exec": str(CHAOS)}, "name", "required"),
        ({"name": "x"}, "exec", "required"),
        ({"name": 5, "exec": str(CHAOS)}, "name", "str"),
        ({"name": "x", "exec": ["a"]}, "exec", "str"),
        ({"name": "x", "exec": str(CHAOS), "args": "--hang"}, "args", "array"),
        ({"name": "x", "exec": str(CHAOS), "args": ["a", 1]}, "args[1]", "str"),
        ({"name": "x", "exec": str(CHAOS), "enabled": "yes"}, "enabled", "bool"),
        ({"name": "x", "exec": str(CHAOS), "restart": "sometimes"}, "restart", "sometimes"),
        ({"name": "x", "exec": str(CHAOS), "permissions": []}, "permissions", "object"),
        ({"name": "has space", "exec": str(CHAOS)}, "name", "not a valid name"),
        ({"name": "../escape", "exec": str(CHAOS)}, "name", "not a valid name"),
        ({"name": "", "exec": str(CHAOS)}, "name", "not a valid name"),
        ({"name": "x", "exec": "  "}, "exec", "empty"),
        ({"name": "x", "exec": "./missing.py"}, "exec", "does not exist"),
        (
            {"name": "x", "exec": str(CHAOS), "permissions": {"netwrok": True}},
            "permissions",
            "netwrok",
        ),
        (
            {"name": "x", "exec": str(CHAOS), "permissions": {"env": ["NOT VALID"]}},
            "permissions.env[0]",
            "NOT VALID",
        ),
        (
            {"name": "x", "exec": str(CHAOS), "permissions": {"intercept_builtin": "bash"}},
            "permissions.intercept_builtin",
            "array",
        ),
        (
            {"name": "x", "exec": str(CHAOS), "permissions": {"intercept_builtin": ["b sh"]}},
            "permissions.intercept_builtin[0]",
            "matching",
        ),
        # Kinds: a tool host runs corral's runner (runtime) or its own exec, not both.
        ({"name": "x", "kind": "tool-host"}, "exec", "runtime"),
        ({"name": "x", "kind": "tool-host", "runtime": "python", "exec": "a"}, "exec", "not both"),
        ({"name": "x", "kind": "tool-host", "runtime": "ruby"}, "runtime", "ruby"),
        ({"name": "x", "kind": "tool-host", "runtime": "node", "config": []}, "config", "object"),
        ({"name": "x", "kind": "plugin", "exec": str(CHAOS)}, "kind", "plugin"),
        ({"name": "x", "exec": str(CHAOS), "runtime": "python"}, "runtime", "tool host"),
        ({"name": "x", "exec": str(CHAOS), "config": {"a": 1}}, "config", "tool host"),
        ("{not json", "", "not valid JSON"),
        ("", "", "not valid JSON"),
        ("[1, 2]", "", "JSON object"),
        ('"name"', "", "JSON object"),
    ],
)
def test_manifest_errors_name_file_and_field(
    tmp_path: Path, content: str | dict[str, Any], field: str, words: str
) -> None:
    d = _write(tmp_path / "bad", content)
    with pytest.raises(ManifestError) as info:
        load_manifest(d)
    err = info.value
    assert err.path == str(d / "extension.json")
    assert err.field == field
    assert words.lower() in err.message.lower()
    assert str(d / "extension.json") in str(err)
    if field:
        assert f": {field}: " in str(err)


def test_a_tool_host_manifest_loads(tmp_path: Path) -> None:
    config = {"modules": ["tools.py"], "limit": 3}
    d = _write(
        tmp_path / "th", {"name": "th", "kind": "tool-host", "runtime": "python", "config": config}
    )
    spec = load_manifest(d)
    assert spec.kind is ChildKind.TOOL_HOST
    assert spec.manifest.runtime is Runtime.PYTHON
    assert spec.manifest.config == config
    assert spec.exec_path == str(d)  # no program of its own: the runner runs in its directory
    # Its own program speaking the protocol, as an extension names its exec.
    _write(d, {"name": "th", "kind": "tool-host", "exec": str(CHAOS)})
    own = load_manifest(d)
    assert (own.kind, own.manifest.runtime, own.exec_path) == (
        ChildKind.TOOL_HOST,
        None,
        str(CHAOS),
    )
    assert load_manifest(_write(tmp_path / "e", _ok())).kind is ChildKind.EXTENSION


def test_missing_manifest_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path / "empty")
    assert info.value.path == str(tmp_path / "empty" / "extension.json")


def test_unknown_fields_are_reported_not_fatal(tmp_path: Path) -> None:
    d = _write(tmp_path / "ok", _ok(homepage="https://x", zot_min="0.1"))
    spec = load_manifest(d)
    assert spec.unknown_fields == ["homepage", "zot_min"]


async def test_unknown_fields_are_reported_when_started(kit: Kit) -> None:
    """Reported means somewhere a user can see it: the log names the field."""
    ext = kit.chaos("extra", homepage="https://example.invalid")
    with capture_logs() as logs, trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            (info,) = await client.list_extensions()
            assert info.state == "running"
    assert any("homepage" in json.dumps(e, default=str) for e in logs), logs


def test_discovery_order_and_duplicates(kit: Kit, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    local = project / ".corral" / "extensions"
    glob = kit.home / "extensions"
    cli = kit.chaos("dup", "--stderr-lines", "1")
    kit.chaos("dup", where=local)
    kit.chaos("dup", where=glob)
    kit.chaos("p-only", where=local)
    kit.chaos("shared", where=local)
    kit.chaos("shared", where=glob)
    kit.chaos("g-only", where=glob)
    found = discover([str(cli)], project_dir=str(project), home=str(kit.home))
    assert [(s.name, s.source) for s in found.specs] == [
        ("dup", "cli"),
        ("p-only", "project"),
        ("shared", "project"),
        ("g-only", "global"),
    ]
    assert [(s.name, s.source, w.source) for s, w in found.duplicates] == [
        ("dup", "project", "cli"),
        ("dup", "global", "cli"),
        ("shared", "global", "project"),
    ]
    assert found.problems == []
    # Without installed ones: only --ext paths.
    only = discover(
        [str(cli)], project_dir=str(project), home=str(kit.home), include_installed=False
    )
    assert [s.source for s in only.specs] == ["cli"]


def test_discovery_loads_a_directory_named_twice_once(kit: Kit, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    local = project / ".corral" / "extensions"
    ext = kit.chaos("one", where=local)
    (tmp_path / "link").symlink_to(ext)
    for named in (ext, ext / "extension.json", tmp_path / "link"):
        found = discover([str(named)], project_dir=str(project), home=str(kit.home))
        assert [(s.name, s.source) for s in found.specs] == [("one", "cli")]
        assert found.duplicates == []
    # Another directory of the same name is still a duplicate.
    other = kit.chaos("one", where=tmp_path / "elsewhere")
    found = discover([str(other)], project_dir=str(project), home=str(kit.home))
    assert [(s.dir, w.dir) for s, w in found.duplicates] == [(str(ext), str(other))]


def test_discovery_collects_problems_and_keeps_going(kit: Kit) -> None:
    glob = kit.home / "extensions"
    kit.chaos("good", where=glob)
    _write(glob / "broken", "{")
    _write(glob / "nameless", {"exec": str(CHAOS)})
    (glob / "not-an-extension").mkdir()  # no manifest: not a candidate at all
    found = discover([], home=str(kit.home))
    assert [s.name for s in found.specs] == ["good"]
    assert sorted((Path(p.path).parent.name, p.field) for p in found.problems) == [
        ("broken", ""),
        ("nameless", "name"),
    ]


MARKER = """\
open(os.path.join(os.environ["CORRAL_EXT_DIR"], "started"), "w").close()
emit({"type": "hello", "name": NAME, "version": "1.0.0"})
emit({"type": "ready"})
for msg in frames():
    if msg["type"] == "shutdown":
        break
"""


async def test_duplicates_listed_never_started(kit: Kit, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    local = project / ".corral" / "extensions"
    glob = kit.home / "extensions"
    cli = kit.inline("dup", MARKER)
    proj_dup = kit.inline("dup", MARKER, where=local)
    glob_dup = kit.inline("dup", MARKER, where=glob)
    with trio.fail_after(CYCLE):
        async with kit.open(cli, discover=True, project_dir=str(project)) as client:
            infos = await client.list_extensions()
    by_path = {i.path: i for i in infos}
    assert by_path[str(cli)].state == "running"
    assert by_path[str(cli)].source == "cli"
    for dup in (proj_dup, glob_dup):
        info = by_path[str(dup)]
        assert info.state == "duplicate"
        assert info.pid is None
        assert str(cli) in info.problem
        assert not (dup / "started").exists()
    assert (cli / "started").exists()


async def test_invalid_manifests_listed_others_run(kit: Kit) -> None:
    glob = kit.home / "extensions"
    good = kit.chaos("good", where=glob)
    kit.trust(good)
    _write(glob / "broken", {"name": "broken", "exec": "./nope.py"})
    _write(glob / "garbled", "{{{")
    with trio.fail_after(CYCLE):
        async with kit.open(discover=True) as client:
            infos = {i.name: i for i in await client.list_extensions()}
            result = await client.call_tool("chaos_echo", {"text": "still here"})
    assert result.content[0].text == "echo: still here"  # type: ignore[union-attr]
    assert infos["good"].state == "running"
    assert infos["good"].path == str(good)
    assert infos["broken"].state == "invalid"
    assert "exec" in infos["broken"].problem
    assert "nope.py" in infos["broken"].problem
    assert infos["garbled"].state == "invalid"
    assert "JSON" in infos["garbled"].problem


async def test_disabled_extension_not_started(kit: Kit) -> None:
    ext = kit.inline("off", MARKER, enabled=False)
    with trio.fail_after(CYCLE):
        async with kit.open(ext) as client:
            (info,) = await client.list_extensions()
            assert client.tools() == []
    assert info.state == "disabled"
    assert info.enabled is False
    assert info.pid is None
    assert not (ext / "started").exists()


# --- hostile files where a manifest should be ---------------------------------------

#: Discovery in a child process: on a FIFO it waited for a writer forever, on
#: /dev/zero or a sparse 2 GiB file it read until memory ran out.
_DISCOVER = """
import json, sys
from supervisor import discover
found = discover([], project_dir=sys.argv[1], home=sys.argv[2])
problems = sorted([p.extension, p.field, p.message] for p in found.problems)
print(json.dumps({"specs": [s.name for s in found.specs], "problems": problems}))
"""


def test_a_special_or_huge_manifest_is_one_problem_and_the_others_load(kit: Kit) -> None:
    project = kit.root / "proj"
    local = project / ".corral" / "extensions"
    kit.chaos("good", where=local)
    words = {}
    for kind in SPECIAL:
        (local / kind).mkdir(parents=True)
        words[kind] = make_special(kind, local / kind / "extension.json")
    proc = run_bounded(_DISCOVER, str(project), str(kit.home))
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["specs"] == ["good"]
    assert [(n, f) for n, f, _ in found["problems"]] == [(k, "") for k in sorted(SPECIAL)]
    problems = {name: message for name, _, message in found["problems"]}
    for kind, message in problems.items():
        assert message.startswith(words[kind])
    assert problems["sparse-2GiB"] == "is larger than 1 MiB (2147483648 bytes)"


async def test_the_users_choice_file_is_read_small_too(kit: Kit) -> None:
    d = kit.chaos("picky")
    spec = load_manifest(d, "global", home=str(kit.home))
    choice = choice_file(kit.home, spec.identity)
    choice.parent.mkdir(parents=True)
    choice.write_text("false\n")
    assert load_manifest(d, "global", home=str(kit.home)).manifest.enabled is False
    choice.unlink()
    os.mkfifo(choice)  # ignored, not waited on: the manifest's own value holds
    with trio.fail_after(10):
        spec = await trio.to_thread.run_sync(
            lambda: load_manifest(d, "global", home=str(kit.home)), abandon_on_cancel=True
        )
    assert spec.manifest.enabled is True
