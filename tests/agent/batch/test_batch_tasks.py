"""Task lines: checked before anything starts, each bad line named by number and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.agentkit import chaos
from helpers.batchkit import write_tasks

from agent.batch import Defaults, Task, TasksInvalid, check_tasks, load_tasks


def one_error(tmp_path: Path, line: dict[str, Any] | str) -> tuple[int, str, str]:
    text = line if isinstance(line, str) else json.dumps(line)
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "fine", "prompt": "hi"}\n' + text + "\n", encoding="utf-8")
    with pytest.raises(TasksInvalid) as caught:
        load_tasks(path)
    (error,) = caught.value.errors
    assert str(error).startswith(f"{path}:2: ")
    return error.line, error.field, error.reason


@pytest.mark.parametrize(
    ("line", "field", "says"),
    [
        ({"prompt": "hi"}, "id", "missing: every task needs an id and a prompt"),
        ({"id": 7, "prompt": "hi"}, "id", "Expected `str`"),
        ({"id": " ", "prompt": "hi"}, "id", "must not be empty"),
        ({"id": "a", "prompt": ""}, "prompt", "must not be empty"),
        ({"id": "a", "prompt": "hi", "colour": 1}, "colour", "unknown field"),
        ({"id": "a", "prompt": "hi", "timeout": 0}, "timeout", "above 0"),
        ({"id": "a", "prompt": "hi", "timeout": "soon"}, "timeout", "Expected"),
        ({"id": "a", "prompt": "hi", "sandbox": "maybe"}, "sandbox", "Invalid enum value"),
        ({"id": "a", "prompt": "hi", "max_steps": 0}, "max_steps", "at least 1"),
        ({"id": "a", "prompt": "hi", "tools": ["read", "hammer"]}, "tools", "hammer"),
        ({"id": "a", "prompt": "hi", "provider": "oracle"}, "provider", "unknown provider"),
        ({"id": "a", "prompt": "hi", "provider": "scripted"}, "script", "needs a script"),
        ({"id": "a", "prompt": "hi", "extensions": ["nowhere"]}, "extensions[0]", "extension"),
        ({"id": "a", "prompt": "hi", "extensions": [3]}, "extensions[0]", "Expected `str`"),
        ({"id": "a", "prompt": "hi", "script": "missing.jsonl"}, "script", "cannot read"),
        ({"id": "a", "prompt": "hi", "script": [{"delay": -1}]}, "script", "turn 1: delay"),
        ({"id": "a", "prompt": "hi", "script": [{"txt": "x"}]}, "script[0]", "field `txt`"),
        ({"id": "a", "prompt": "hi", "workspace": "no-such-dir"}, "workspace", "not a directory"),
        ({"id": "a", "prompt": "hi", "workspace": {"../out": "x"}}, "workspace['../out']", ""),
        ({"id": "a", "prompt": "hi", "workspace": {"/etc/x": "x"}}, "workspace['/etc/x']", ""),
        ({"id": "a", "prompt": "hi", "workspace": {"a/./b": "x"}}, "workspace['a/./b']", ""),
        (
            {"id": "a", "prompt": "hi", "workspace": {".CORRAL/extensions/x": "x"}},
            "workspace['.CORRAL/extensions/x']",
            ".corral",
        ),
        ({"id": "a", "prompt": "hi", "workspace": {"d": "x", "d/e": "y"}}, "workspace['d/e']", ""),
        ({"id": "fine", "prompt": "again"}, "id", "duplicate id 'fine' (first on line 1)"),
        ('{"id": "a", "prompt": ', "", "not a JSON object"),
        ("[1, 2]", "", "Expected `object`"),
    ],
)
def test_a_bad_line_names_its_number_and_field(
    tmp_path: Path, line: dict[str, Any] | str, field: str, says: str
) -> None:
    number, got_field, reason = one_error(tmp_path, line)
    assert (number, got_field) == (2, field)
    assert says in reason


def test_every_bad_line_is_listed_and_skip_invalid_keeps_the_good_ones(tmp_path: Path) -> None:
    path = write_tasks(
        tmp_path / "tasks.jsonl",
        [
            {"id": "a", "prompt": "hi"},
            {"id": "b"},
            {"id": "c", "prompt": "hi", "timeout": -1},
            {"id": "a", "prompt": "dup"},
            {"id": "d", "prompt": "hi"},
        ],
    )
    with pytest.raises(TasksInvalid) as caught:
        load_tasks(path)
    assert [(e.line, e.field) for e in caught.value.errors] == [
        (2, "prompt"),
        (3, "timeout"),
        (4, "id"),
    ]
    assert "3 task lines are invalid; nothing was started" in str(caught.value)
    tasks, errors = load_tasks(path, skip_invalid=True)
    assert [t.id for t in tasks] == ["a", "d"]
    assert len(errors) == 3


def test_paths_are_taken_from_the_tasks_file_and_defaults_fill_the_gaps(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ext = chaos(data / "exts")
    (data / "repo").mkdir()
    (data / "turns.jsonl").write_text('{"text": "from a file"}\n', encoding="utf-8")
    shared = chaos(tmp_path / "shared", name="shared")
    path = write_tasks(
        data / "tasks.jsonl",
        [
            {"id": "file", "prompt": "p", "extensions": ["exts/chaos"], "script": "turns.jsonl"},
            {"id": "dir", "prompt": "p", "workspace": "repo", "provider": "offline"},
            {"id": "own", "prompt": "p", "timeout": 5, "sandbox": "off", "tools": ["read"]},
        ],
    )
    defaults = Defaults(extensions=[shared], timeout=60, sandbox="required", tools=["+web"])
    by_id = {t.id: t for t in load_tasks(path, defaults=defaults)[0]}
    assert by_id["file"].extensions == [shared, ext]
    assert by_id["file"].provider == "scripted"
    assert [t.text for t in by_id["file"].script or []] == ["from a file"]  # type: ignore[union-attr]
    assert by_id["dir"].workspace == str(data / "repo")
    assert by_id["dir"].provider == "offline"
    assert (by_id["dir"].timeout, by_id["dir"].sandbox, by_id["dir"].tools) == (
        60,
        "required",
        ["+web"],
    )
    assert (by_id["own"].timeout, by_id["own"].sandbox, by_id["own"].tools) == (5, "off", ["read"])


def test_tasks_built_in_python_are_checked_the_same_way(tmp_path: Path) -> None:
    good, errors = check_tasks(
        [Task(id="x", prompt="hi"), Task(id="x", prompt="again"), Task(id="y", prompt="")],
        base=tmp_path,
        skip_invalid=True,
    )
    assert [t.id for t in good] == ["x"]
    assert [(e.line, e.field) for e in errors] == [(2, "id"), (3, "prompt")]
