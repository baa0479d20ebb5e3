"""``corral rpc`` with extensions: tool calls into them, intercepts, crashes, ext_* commands.

Real extension processes (examples/extensions and tests/agent/fixtures/probe_ext.py),
run unsandboxed for speed; the ``no_leaks`` fixture checks none outlives the test.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest
import trio
from helpers.paths import EXAMPLES, PROBE, REFSHAPES
from helpers.rpc_harness import Frame, chaos_ext, events, open_rpc, write_script
from helpers.supkit import require_bwrap

from supervisor import identity_of, quarantine_file

TIMEOUT = 40

pytestmark = pytest.mark.usefixtures("no_leaks")


def of(frames: list[Frame], kind: str) -> list[Frame]:
    return [f for f in frames if f["type"] == kind]


def echo_call(text: str, call_id: str) -> Frame:
    return {"tool_calls": [{"name": "chaos_echo", "args": {"text": text}, "id": call_id}]}


def status_is(extension: str, status: str):  # type: ignore[no-untyped-def]
    def match(frame: Frame) -> bool:
        return (
            frame["type"] == "ext_status"
            and frame["extension"] == extension
            and frame["status"] == status
        )

    return match


async def test_tool_call_into_an_extension_and_the_ext_commands(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        echo_call("hi", "c1"),
        {"text": "echoed"},
        echo_call("after reload", "c2"),
        {"text": "echoed again"},
    )
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, exts=(chaos_ext(tmp_path),)) as rpc:
            tools = (await rpc.call("get_tools"))["data"]["tools"]
            by_name = {t["name"]: t for t in tools}
            assert by_name["chaos_echo"]["source"] == "chaos"
            assert by_name["chaos_echo"]["schema"]["type"] == "object"
            assert by_name["read"]["source"] == "builtin"

            await rpc.send({"id": 1, "type": "prompt", "message": "echo hi"})
            frames = await rpc.until_done()
            assert of(frames, "tool_call")[0]["name"] == "chaos_echo"
            result = of(frames, "tool_result")[0]
            assert result == {
                "type": "tool_result",
                "id": "c1",
                "is_error": False,
                "content": [{"type": "text", "text": "echo: hi"}],
                "extension": "chaos",
            }

            listed = (await rpc.call("ext_list"))["data"]["extensions"]
            assert [e["name"] for e in listed] == ["chaos"]
            chaos = listed[0]
            assert chaos["state"] == "running"
            assert isinstance(chaos["pid"], int)
            assert chaos["tools"] == ["chaos_echo"]
            assert chaos["commands"] == ["chaos"]
            assert chaos["stats"]["calls"] >= 1

            shown = await rpc.call("ext_command", name="/chaos")
            assert shown["success"] is True
            assert shown["data"]["action"] == "display"
            assert shown["data"]["display"] == "chaos ok"
            display = [f for f in rpc.frames if f["type"] == "ext_display"]
            if not display:
                display = [(await rpc.until(lambda f: f["type"] == "ext_display"))[-1]]
            assert display[0] == {"type": "ext_display", "extension": "chaos", "text": "chaos ok"}

            missing = await rpc.call("ext_command", name="nope", args="x")
            assert missing["success"] is False
            assert "/nope" in missing["error"]

            reloaded = await rpc.call("ext_reload")
            assert reloaded["data"] == {"stopped": 1, "loaded": 1, "ready": 1, "errors": []}
            if not any(status_is("chaos", "started")(f) for f in rpc.frames):
                await rpc.until(status_is("chaos", "started"))
            assert any(status_is("chaos", "stopped")(f) for f in rpc.frames)

            await rpc.send({"id": 2, "type": "prompt", "message": "echo again"})
            frames = await rpc.until_done()
            assert of(frames, "tool_result")[0]["content"][0]["text"] == "echo: after reload"


async def test_an_intercept_block_becomes_an_error_result(tmp_path: Path) -> None:
    script = write_script(tmp_path, echo_call("hi", "c1"), {"text": "it was blocked"})
    ext = chaos_ext(tmp_path, "--intercept", "block")
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, exts=(ext,)) as rpc:
            await rpc.send({"id": 1, "type": "prompt", "message": "try"})
            frames = await rpc.until_done()
            result = of(frames, "tool_result")[0]
            assert result["is_error"] is True
            assert "blocked by extension chaos: chaos blocks" in result["content"][0]["text"]
            assert [t["stop"] for t in of(frames, "turn_end")] == ["tool_use", "end_turn"]


async def test_guard_refuses_rm_rf_and_redacts_what_the_user_sees(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        {"tool_calls": [{"name": "bash", "args": {"command": "rm -rf /"}, "id": "b1"}]},
        {"text": "the SECRET is safe"},
    )
    guard = str(EXAMPLES / "guard")
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, exts=(guard,)) as rpc:
            await rpc.send({"id": 1, "type": "prompt", "message": "clean up"})
            frames = await rpc.until_done()
            result = of(frames, "tool_result")[0]
            assert result["is_error"] is True
            assert "refused" in result["content"][0]["text"]
            shown = of(frames, "assistant_message")[-1]["content"][0]["text"]
            assert shown == "the [redacted] is safe"
            assert "SECRET" not in "".join(f.get("delta", "") for f in frames)
            messages = (await rpc.call("get_messages"))["data"]["messages"]
            assert messages[-1]["content"][0]["text"] == "the SECRET is safe"
            counters = await rpc.call("ext_command", name="guard")
            assert "blocked=1" in counters["data"]["display"]


async def test_a_rewrite_shows_in_the_tool_call_event_and_get_messages(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        {"tool_calls": [{"name": "bash", "args": {"command": "ls"}, "id": "b1"}]},
        {"text": "listed"},
    )
    guard = str(EXAMPLES / "guard")
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, exts=(guard,)) as rpc:
            await rpc.send({"id": 1, "type": "prompt", "message": "list"})
            frames = await rpc.until_done()
            (call,) = of(frames, "tool_call")
            assert call["args"] == {"command": "ls"}  # the model's, as the seed says
            assert call["ran_args"] == {"command": "echo GUARDED: ls"}
            assert call["rewritten_by"] == ["guard"]
            assert "blocked_by" not in call
            messages = (await rpc.call("get_messages"))["data"]["messages"]
            (tool,) = [m for m in messages if m["role"] == "tool"]
            assert tool["interventions"] == [
                {
                    "extension": "guard",
                    "event": "tool_call",
                    "kind": "rewrite",
                    "applied": True,
                    "tool_id": "b1",
                    "tool": "bash",
                    "args": {"command": "echo GUARDED: ls"},
                }
            ]
            assert all("interventions" not in m for m in messages if m["role"] != "tool")


@pytest.mark.slow
async def test_an_extension_crash_mid_call_fails_the_call_not_the_session(
    tmp_path: Path,
) -> None:
    script = write_script(
        tmp_path,
        echo_call("boom", "c1"),
        {"text": "it crashed"},
        echo_call("again", "c2"),
        {"text": "back"},
    )
    ext = chaos_ext(tmp_path, "--crash-after", "1")
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, exts=(ext,)) as rpc:
            await rpc.send({"id": 1, "type": "prompt", "message": "crash it"})
            frames = await rpc.until_done()
            result = of(frames, "tool_result")[0]
            assert result["is_error"] is True
            assert "chaos" in result["content"][0]["text"]
            assert of(frames, "turn_end")[-1]["stop"] == "end_turn"
            if not any(status_is("chaos", "crashed")(f) for f in rpc.frames):
                await rpc.until(status_is("chaos", "crashed"))
            crashed = next(f for f in rpc.frames if status_is("chaos", "crashed")(f))
            assert "crashing on tool call 1" in crashed["detail"]
            if not any(status_is("chaos", "restarted")(f) for f in rpc.frames):
                await rpc.until(status_is("chaos", "restarted"))
            # The restarted extension serves the next call (its counter starts again).
            await rpc.send({"id": 2, "type": "prompt", "message": "again"})
            frames = await rpc.until_done()
            assert of(frames, "tool_result")[0]["is_error"] is True  # crashes on call 1 again
            assert (await rpc.call("ping"))["success"] is True


@pytest.mark.slow
async def test_abort_during_an_extension_tool_call(tmp_path: Path) -> None:
    script = write_script(tmp_path, echo_call("slow", "c1"), {"text": "never"})
    ext = chaos_ext(tmp_path, "--tool-delay", "30")
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, exts=(ext,)) as rpc:
            await rpc.send({"id": 1, "type": "prompt", "message": "slow"})
            await rpc.until(lambda f: f["type"] == "tool_call")
            await rpc.send({"id": "a", "type": "abort"})
            frames = await rpc.until_done()
            assert [e for e in events(frames) if not e.startswith("ext_")] == [
                "tool_result",
                "turn_end",
                "done",
            ]
            # The call the client saw is answered, attributed like any extension result.
            [result] = of(frames, "tool_result")
            assert (result["id"], result["is_error"], result["extension"]) == ("c1", True, "chaos")
            assert "aborted" in result["content"][0]["text"]
            assert of(frames, "turn_end")[0]["stop"] == "aborted"
            messages = (await rpc.call("get_messages"))["data"]["messages"]
            assert messages[-1]["role"] == "tool"
            assert messages[-1]["content"][0]["is_error"] is True
            await rpc.close_stdin()
            await rpc.read_all()
            with trio.fail_after(10):
                assert await rpc.wait() == 0


async def test_notify_from_a_command_is_an_ext_notify_event(tmp_path: Path) -> None:
    where = tmp_path / "exts" / "probe"
    where.mkdir(parents=True)
    manifest = {"name": "probe", "version": "1.0.0", "exec": str(PROBE), "language": "python"}
    (where / "extension.json").write_text(json.dumps(manifest), encoding="utf-8")
    script = write_script(tmp_path, {"text": "unused"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, exts=(str(where),)) as rpc:
            answer = await rpc.call("ext_command", name="nop")
            assert answer["success"] is True
            assert answer["data"]["action"] == "noop"
            notes = [f for f in rpc.frames if f["type"] == "ext_notify"]  # before the answer
            assert notes[0] == {
                "type": "ext_notify",
                "extension": "probe",
                "level": "success",
                "message": "probe handled it",
            }
            asked = await rpc.call("ext_command", name="ask")
            assert asked["data"]["action"] == "prompt"
            assert asked["data"]["prompt"] == 'say "asked by probe"'


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not on PATH")
async def test_what_an_extension_sends_before_its_answer_comes_before_it(tmp_path: Path) -> None:
    # The reference's hello example: notify, then a display answer. Written in Node to
    # the reference's shapes, with its clock's manifest ("exec": "node").
    where = tmp_path / "exts" / "refnode"
    where.mkdir(parents=True)
    manifest = {"name": "refnode", "exec": "node", "args": ["index.js"], "language": "javascript"}
    (where / "extension.json").write_text(json.dumps(manifest), encoding="utf-8")
    shutil.copy(REFSHAPES / "refnode.js", where / "index.js")
    require_bwrap()
    argv = ("--provider", "offline", "--sandbox", "required")  # the last --sandbox wins
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, None, *argv, exts=(str(where),)) as rpc:
            listed = await rpc.call("ext_list")
            (info,) = listed["data"]["extensions"]
            assert (info["state"], info["sandboxed"]) == ("running", True), info
            for _ in range(5):
                start = len(rpc.frames)
                answer = await rpc.call("ext_command", name="where")
                assert answer["success"] is True, answer
                kinds = [f["type"] for f in rpc.frames[start:]]
                ack = json.loads(answer["data"]["display"])["ack"]
                assert ack["extension_dir"] == str(where)
                assert kinds == ["ext_notify", "ext_display", "response"], [
                    (f["type"], f.get("id"), f.get("message")) for f in rpc.frames
                ]


async def test_ext_enable_lifts_a_quarantine(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ext = chaos_ext(tmp_path)
    record = quarantine_file(home, identity_of("chaos", ext))  # keyed by identity
    record.parent.mkdir(parents=True)
    record.write_text("crashed 5 times\n")
    script = write_script(tmp_path, {"text": "unused"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, exts=(ext,)) as rpc:
            listed = (await rpc.call("ext_list"))["data"]["extensions"]
            assert listed[0]["state"] == "quarantined"
            assert "crashed 5 times" in listed[0]["problem"]
            enabled = await rpc.call("ext_enable", name="chaos")
            assert enabled["success"] is True
            assert enabled["data"]["state"] == "running"
            if not any(status_is("chaos", "started")(f) for f in rpc.frames):
                await rpc.until(status_is("chaos", "started"))
            tools = (await rpc.call("get_tools"))["data"]["tools"]
            assert "chaos_echo" in [t["name"] for t in tools]
            unknown = await rpc.call("ext_enable", name="nobody")
            assert unknown["success"] is False
            assert "nobody" in unknown["error"]


@pytest.mark.slow
async def test_sigterm_aborts_stops_extensions_and_exits_143(tmp_path: Path) -> None:
    script = write_script(tmp_path, echo_call("slow", "c1"), {"text": "never"})
    ext = chaos_ext(tmp_path, "--tool-delay", "30")
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, exts=(ext,)) as rpc:
            await rpc.send({"id": 1, "type": "prompt", "message": "slow"})
            await rpc.until(lambda f: f["type"] == "tool_call")
            queued = await rpc.call("prompt", message="queued behind it")
            assert queued["data"] == {"started": True, "position": 1}
            rpc.proc.send_signal(signal.SIGTERM)
            await rpc.read_all()
            with trio.fail_after(10):  # stopping takes the extension's grace periods
                assert await rpc.wait() == 143
            assert "corral rpc: SIGTERM: stopping" in rpc.stderr
            # The client is told how both jobs ended: the running one's call is
            # answered, each job ends aborted and says done.
            kinds = [f["type"] for f in rpc.frames]
            [result] = [f for f in rpc.frames if f["type"] == "tool_result"]
            assert result["is_error"] is True
            ends = [f.get("stop") for f in rpc.frames if f["type"] == "turn_end"]
            assert ends == ["aborted", "aborted"]
            assert kinds.count("done") == 2
            assert kinds[-1] == "done"


async def test_ext_list_agrees_with_get_tools_on_shadowed_names(tmp_path: Path) -> None:
    # "first" registers `read` (a built-in's name); "second" registers first's names
    # again and one of its own. ext_list names what each one runs as `tools` (what
    # get_tools attributes to it) and what another holds as `shadowed_tools`.
    dirs = []
    for name, extra in (("first", "read"), ("second", "only_second")):
        where = tmp_path / "exts" / name
        where.mkdir(parents=True)
        manifest = {
            "name": name,
            "version": "1.0.0",
            "exec": str(PROBE),
            "args": ["--name", name, "--tool", extra],
            "language": "python",
        }
        (where / "extension.json").write_text(json.dumps(manifest), encoding="utf-8")
        dirs.append(str(where))
    script = write_script(tmp_path, {"text": "unused"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, exts=tuple(dirs)) as rpc:
            tools = (await rpc.call("get_tools"))["data"]["tools"]
            listed = (await rpc.call("ext_list"))["data"]["extensions"]
            await rpc.close_stdin()
            await rpc.read_all()
    by_ext = {e["name"]: e for e in listed}
    assert (by_ext["first"]["tools"], by_ext["first"]["shadowed_tools"]) == (
        ["echo_args", "hostinfo"],
        ["read"],
    )
    assert (by_ext["second"]["tools"], by_ext["second"]["shadowed_tools"]) == (
        ["only_second"],
        ["echo_args", "hostinfo"],
    )
    for name, ext in by_ext.items():
        assert sorted(t["name"] for t in tools if t["source"] == name) == ext["tools"]
