"""Listing and clearing dynamic tools: ``corral tools``, RPC ``get_tools`` and ``tools_clear``.

The catalog is filled the way a session fills it (sealed entries under the home's
key); the CLI must show every entry checked as a session would (an edited one is
listed as refused), remove and clear them, and record the removals in the audit
log. Over RPC, a tool the model created shows up in ``get_tools`` with source and
kind ``dynamic`` and goes away with ``tools_clear``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from click.testing import CliRunner, Result
from helpers.rpc_harness import Frame, RpcProcess, open_rpc, rpc_env, write_script

from agent._audit import ToolAuditRecord, audit_path, read_audit
from agent._cli.main import main
from agent._tools.dynamic import JsonCatalog, Sealer, check_draft
from agent._tools.dynamic.template import ToolDraft

SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}


def _store(home: Path, catalog: Path, name: str, code: str) -> None:
    draft = check_draft(ToolDraft(name=name, description=f"{name}.", parameters=SCHEMA, code=code))
    JsonCatalog(catalog).put(Sealer(home / "state").entry(draft, "2026-01-01T00:00:00+00:00"))


@pytest.fixture
def catalog(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "catalog.json"
    monkeypatch.setenv("CORRAL_DYNAMIC_CATALOG", str(path))
    _store(home, path, "shout", "return args['text'].upper()")
    _store(home, path, "whisper", "return args['text'].lower()")
    return path


async def clear(rpc: RpcProcess, ident: str, **fields: str) -> Frame:
    """``tools_clear`` (``RpcProcess.call`` takes ``kind`` as the command's type)."""
    await rpc.send({"id": ident, "type": "tools_clear", **fields})
    frames = await rpc.until(lambda f: f.get("type") == "response" and f.get("id") == ident)
    return frames[-1]


def tools(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, ["tools", *args], input=stdin)


def test_list_and_show_check_every_entry(home: Path, catalog: Path) -> None:
    listed = tools("list", "--dynamic")
    assert listed.exit_code == 0, listed.output
    assert listed.output.splitlines()[0].startswith("shout  2026-01-01T00:00:00+00:00  shout.")
    shown = tools("show", "shout", "--dynamic")
    assert "status       sealed, loads" in shown.output
    assert "    return args['text'].upper()" in shown.output

    data = json.loads(catalog.read_text())
    data["tools"][1]["code"] = "return open('/etc/passwd').read()"
    data["tools"][0]["description"] = "evil\x1b[2J"
    catalog.write_text(json.dumps(data))
    rows = [json.loads(line) for line in tools("list", "--dynamic", "--json").output.splitlines()]
    assert [(r["name"], r["source"]) for r in rows] == [
        ("shout", "dynamic"),
        ("whisper", "dynamic"),
    ]
    assert all("seal does not match" in r["refused"] for r in rows)
    shown = tools("show", "whisper", "--dynamic")
    assert "REFUSED: its seal does not match" in shown.output
    text = tools("list", "--dynamic").output
    assert "\x1b" not in text
    assert "whisper  REFUSED" in text


def test_rm_and_clear_are_recorded(home: Path, catalog: Path) -> None:
    gone = tools("rm", "shout", "nothing", "--dynamic")
    assert gone.exit_code == 1
    assert "removed shout" in gone.output
    assert "no dynamic tool named nothing" in gone.output
    declined = tools("clear", "--dynamic", stdin="n\n")
    assert declined.exit_code == 1
    assert [e.name for e in JsonCatalog(catalog).load()] == ["whisper"]
    cleared = tools("clear", "--dynamic", "--yes")
    assert cleared.exit_code == 0, cleared.output
    assert "removed 1: whisper" in cleared.output
    assert JsonCatalog(catalog).load() == []
    records = [r for r in read_audit(audit_path(home))[0] if isinstance(r, ToolAuditRecord)]
    assert [(r.action.value, r.tool) for r in records] == [
        ("remove_tool", "shout"),
        ("remove_tool", "whisper"),
    ]


def test_without_dynamic_it_lists_the_only_kind_kept(home: Path, catalog: Path) -> None:
    plain, flagged = tools("list"), tools("list", "--dynamic")
    assert plain.exit_code == 0, plain.output
    assert plain.output == flagged.output
    assert "shout  2026-01-01" in plain.output
    assert "    return args['text'].upper()" in tools("show", "shout").output
    missing = tools("show", "nope")
    assert missing.exit_code == 1
    assert "no dynamic tool named 'nope'" in missing.output


def test_an_empty_catalog_says_where_the_other_kinds_are(home: Path) -> None:
    out = tools("list")
    assert out.exit_code == 0, out.output
    assert "no dynamic tools" in out.output
    assert "corral tools mcp list" in out.output
    assert "corral ext list" in out.output


def test_show_prints_the_schema_as_json_on_real_lines(home: Path, catalog: Path) -> None:
    shown = tools("show", "shout", "--dynamic").output
    assert "\\n" not in shown
    start = shown.index("parameters   ") + len("parameters   ")
    end = shown.index("\n\ndef tool(args):")
    block = shown[start:end]
    assert len(block.splitlines()) > 3
    assert json.loads(block) == SCHEMA
    data = json.loads(catalog.read_text())
    data["tools"][0]["description"] = "two\nlines\x1b[2J"
    catalog.write_text(json.dumps(data))
    shown = tools("show", "shout").output  # refused now (edited), still shown whole
    assert "description  two\n             lines\\x1b[2J" in shown


@pytest.mark.slow
async def test_rpc_get_tools_and_tools_clear(tmp_path: Path) -> None:
    new = {
        "name": "new_tool",
        "id": "n1",
        "args": {
            "name": "shout",
            "description": "Shout.",
            "parameters": SCHEMA,
            "code": "return args['text'].upper()",
        },
    }
    script = write_script(tmp_path, {"tool_calls": [new]}, {"text": "made it"})
    env = rpc_env(tmp_path / "home", CORRAL_DYNAMIC_CATALOG=str(tmp_path / "catalog.json"))
    with trio.fail_after(60):
        async with open_rpc(tmp_path, script, "--tools", "+dynamic", env=env) as rpc:
            await rpc.send({"type": "prompt", "message": "make a tool"})
            await rpc.until_done()
            listed = (await rpc.call("get_tools"))["data"]["tools"]
            by_name = {t["name"]: t for t in listed}
            assert (by_name["shout"]["source"], by_name["shout"]["kind"]) == ("dynamic", "dynamic")
            assert (by_name["new_tool"]["source"], by_name["new_tool"]["kind"]) == (
                "builtin",
                "builtin",
            )
            assert by_name["read"]["kind"] == "builtin"
            # The harness runs --sandbox off: the model is not told otherwise.
            assert "WITHOUT a sandbox" in by_name["new_tool"]["description"]
            cleared = await clear(rpc, "c1", kind="dynamic")
            assert cleared["success"], cleared
            assert cleared["data"] == {"kind": "dynamic", "removed": ["shout"]}
            listed = (await rpc.call("get_tools"))["data"]["tools"]
            assert "shout" not in [t["name"] for t in listed]
            bad = await clear(rpc, "c2", kind="builtin")
            assert bad["success"] is False
            assert "kind must be dynamic or mcp" in bad["error"]
            worse = await clear(rpc, "c3", kind="everything")
            assert worse["success"] is False
            assert "kind" in worse["error"]
            assert (await clear(rpc, "c4", kind="mcp"))["data"]["removed"] == []
            assert (await rpc.call("ping"))["success"]
        async with open_rpc(tmp_path, script, env=env) as rpc:
            off = await clear(rpc, "c5")
            assert off["success"] is False
            assert "--tools +dynamic" in off["error"]
