"""``corral rpc`` through its pipes: every command of the seed and every event sequence.

Each test starts the real process (scripted provider, no extensions, sandbox off)
and talks NDJSON to it; see :mod:`helpers.rpc_harness`.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import trio
from helpers.rpc_harness import Frame, events, open_rpc, types, write_script

TIMEOUT = 30


def of(frames: list[Frame], kind: str) -> list[Frame]:
    return [f for f in frames if f["type"] == kind]


def text(frames: list[Frame]) -> str:
    return "".join(f["delta"] for f in of(frames, "text_delta"))


async def test_ping_echoes_every_id_exactly_as_given(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "unused"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script) as rpc:
            ids = [b'"a"', b"7", b"1.50", b"-3e2", b'"\\u00e9t\\u00e9"', b"0"]
            lines = [b'{"id":%s,"type":"ping"}\n' % i for i in ids]
            await rpc.send_raw(b"".join(lines) + b'{"type":"ping"}\n')
            for ident in ids:
                frame = await rpc.read()
                assert frame["command"] == "ping"
                assert frame["success"] is True
                assert frame["data"] == {"pong": True}
                assert b'"id":' + ident + b"," in rpc.raw[-1]
            last = await rpc.read()
            assert last["id"] is None
            assert last == {
                "type": "response",
                "id": None,
                "command": "ping",
                "success": True,
                "data": {"pong": True},
            }


async def test_hello_reports_protocol_provider_and_model(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "unused"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, "--model", "m1") as rpc:
            hello = await rpc.call("hello")
            assert hello["success"] is True
            data = hello["data"]
            assert data["protocol_version"] == 1
            assert data["provider"] == "scripted"
            assert data["model"] == "m1"
            assert isinstance(data["version"], str)
            assert {"prompt", "abort", "ext_command", "ext_reload"} <= set(data["commands"])


async def test_prompt_streams_the_seed_event_sequence(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        {"text": "hello world!", "chunk": 5, "usage": {"input": 11, "output": 3, "cost_usd": 0.5}},
    )
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script) as rpc:
            await rpc.send({"id": 1, "type": "prompt", "message": "hi"})
            frames = await rpc.until_done()
            assert frames[0] == {
                "type": "response",
                "id": 1,
                "command": "prompt",
                "success": True,
                "data": {"started": True, "position": 0},
            }
            assert types(frames[1:]) == [
                "user_message",
                "turn_start",
                "assistant_start",
                "text_delta",
                "text_delta",
                "text_delta",
                "assistant_message",
                "usage",
                "turn_end",
                "done",
            ]
            user = frames[1]
            assert user["content"] == [{"type": "text", "text": "hi"}]
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", user["time"])
            assert frames[2] == {"type": "turn_start", "step": 1}
            assert text(frames) == "hello world!"
            assert of(frames, "assistant_message")[0]["content"] == [
                {"type": "text", "text": "hello world!"}
            ]
            usage = of(frames, "usage")[0]
            assert (usage["input"], usage["output"], usage["cost_usd"]) == (11, 3, 0.5)
            assert usage["cumulative"]["input"] == 11
            assert of(frames, "turn_end") == [{"type": "turn_end", "stop": "end_turn"}]
            assert frames[-1] == {"type": "done"}


async def test_prompt_with_images_reports_byte_counts(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "nice picture"})
    picture = base64.b64encode(b"\x89PNG0123456789").decode()
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script) as rpc:
            await rpc.send(
                {
                    "id": "p",
                    "type": "prompt",
                    "message": "look",
                    "images": [{"mime_type": "image/png", "data": picture}],
                }
            )
            frames = await rpc.until_done()
            expected = [
                {"type": "text", "text": "look"},
                {"type": "image", "mime_type": "image/png", "bytes": 14},
            ]
            assert of(frames, "user_message")[0]["content"] == expected
            messages = (await rpc.call("get_messages"))["data"]["messages"]
            assert messages[0]["role"] == "user"
            assert messages[0]["content"] == expected
            assert messages[1]["role"] == "assistant"
            assert picture not in "".join(r.decode() for r in rpc.raw)


async def test_builtin_tool_call_sequence(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        {
            "text": "Reading.",
            "tool_calls": [{"name": "read", "args": {"path": "notes.txt"}, "id": "c1"}],
        },
        {"text": "It says hi."},
    )
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("hi there\n", encoding="utf-8")
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script) as rpc:
            await rpc.send({"id": 1, "type": "prompt", "message": "read notes.txt"})
            frames = await rpc.until_done()
            assert events(frames) == [
                "user_message",
                "turn_start",
                "assistant_start",
                "text_delta",
                "assistant_message",
                "usage",
                "tool_call",
                "tool_result",
                "turn_end",
                "turn_start",
                "assistant_start",
                "text_delta",
                "assistant_message",
                "usage",
                "turn_end",
                "done",
            ]
            first = of(frames, "assistant_message")[0]["content"]
            assert first[1] == {
                "type": "tool_call",
                "id": "c1",
                "name": "read",
                "args": {"path": "notes.txt"},
            }
            call = of(frames, "tool_call")[0]
            assert call == {
                "type": "tool_call",
                "id": "c1",
                "name": "read",
                "args": {"path": "notes.txt"},
            }
            result = of(frames, "tool_result")[0]
            assert result["id"] == "c1"
            assert result["is_error"] is False
            assert "hi there" in result["content"][0]["text"]
            assert [t["stop"] for t in of(frames, "turn_end")] == ["tool_use", "end_turn"]
            assert [t["step"] for t in of(frames, "turn_start")] == [1, 2]
            messages = (await rpc.call("get_messages"))["data"]["messages"]
            assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
            assert messages[2]["content"][0]["type"] == "tool_result"
            assert messages[2]["content"][0]["call_id"] == "c1"


async def test_provider_error_and_step_limit_events(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        {"error": "rate limited", "status": 429},
        {"tool_calls": [{"name": "read", "args": {"path": "missing.txt"}}]},
    )
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, "--max-steps", "1") as rpc:
            await rpc.send({"id": 1, "type": "prompt", "message": "one"})
            frames = await rpc.until_done()
            end = of(frames, "turn_end")[0]
            assert end["stop"] == "error"
            assert "rate limited" in end["error"]
            # The reference's clients learn of a failed prompt through `error` only.
            assert events(frames)[-3:] == ["turn_end", "error", "done"]
            assert of(frames, "error") == [{"type": "error", "message": end["error"]}]
            await rpc.send({"id": 2, "type": "prompt", "message": "two"})
            frames = await rpc.until_done()
            assert of(frames, "tool_result")[0]["is_error"] is True
            errors = of(frames, "error")
            assert len(errors) == 1
            assert "step limit" in errors[0]["message"]
            assert events(frames)[-2:] == ["error", "done"]


async def test_compact_replaces_the_transcript(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "The answer is 42."})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script) as rpc:
            await rpc.send({"id": 1, "type": "prompt", "message": "what is the answer?"})
            await rpc.until_done()
            await rpc.send({"id": 2, "type": "compact"})
            frames = await rpc.until_done()
            assert frames[0]["command"] == "compact"
            assert frames[0]["data"]["started"] is True
            assert events(frames)[-2:] == ["compact_done", "done"]
            summary = of(frames, "compact_done")[0]["summary"]
            assert summary
            state = (await rpc.call("get_state"))["data"]
            assert state["message_count"] == 1


async def test_state_models_set_model_messages_and_clear(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "first"})
    work = str((tmp_path / "work").resolve())
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, "--model", "m1") as rpc:
            state = await rpc.call("get_state")
            assert state["success"] is True
            assert state["data"] == {
                "provider": "scripted",
                "model": "m1",
                "cwd": work,
                "message_count": 0,
                "busy": False,
                "queued": 0,
                "usage": {
                    "input": 0,
                    "output": 0,
                    "cache_read": 0,
                    "cache_write": 0,
                    "cost_usd": 0.0,
                },
            }
            models = (await rpc.call("get_models"))["data"]["models"]
            assert models == [
                {
                    "id": "m1",
                    "provider": "scripted",
                    "context_window": 0,
                    "max_output": 0,
                    "reasoning": True,  # the script decides what it thinks
                }
            ]
            ok = await rpc.call("set_model", model="m1")
            assert (ok["success"], ok["data"]) == (True, {"model": "m1"})
            bad = await rpc.call("set_model", model="gpt-nope")
            assert bad["success"] is False
            assert "gpt-nope" in bad["error"]
            await rpc.send({"id": "p", "type": "prompt", "message": "hello"})
            await rpc.until_done()
            messages = (await rpc.call("get_messages"))["data"]["messages"]
            assert [m["role"] for m in messages] == ["user", "assistant"]
            assert messages[1]["content"] == [{"type": "text", "text": "first"}]
            cleared = await rpc.call("clear")
            assert cleared == {
                "type": "response",
                "id": cleared["id"],
                "command": "clear",
                "success": True,
            }
            state = (await rpc.call("get_state"))["data"]
            assert state["message_count"] == 0
            assert state["usage"]["output"] > 0


async def test_get_tools_lists_builtins_with_schemas(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "unused"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, "--tools", "read,bash") as rpc:
            tools = (await rpc.call("get_tools"))["data"]["tools"]
            assert [t["name"] for t in tools] == ["read", "bash"]
            for tool in tools:
                assert tool["source"] == "builtin"
                assert tool["schema"]["type"] == "object"
                assert tool["description"]


async def test_abort_mid_stream_ends_with_aborted_then_done(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "never shown", "delay": 60}, {"text": "after"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script) as rpc:
            await rpc.send({"id": 1, "type": "prompt", "message": "slow"})
            await rpc.until(lambda f: f["type"] == "assistant_start")
            busy = await rpc.call("clear")
            assert busy["success"] is False
            assert "running" in busy["error"]
            await rpc.send({"id": "x", "type": "abort"})
            frames = await rpc.until_done()
            response = next(f for f in frames if f["type"] == "response")
            assert response == {
                "type": "response",
                "id": "x",
                "command": "abort",
                "success": True,
                "data": {"aborted": True},
            }
            assert events(frames) == ["turn_end", "done"]
            assert of(frames, "turn_end")[0]["stop"] == "aborted"
            idle = await rpc.call("abort")
            assert idle["data"] == {"aborted": False}
            state = (await rpc.call("get_state"))["data"]
            assert (state["busy"], state["message_count"]) == (False, 1)
            await rpc.send({"id": 2, "type": "prompt", "message": "again"})
            frames = await rpc.until_done()
            assert text(frames) == "after"


async def test_pipelined_prompts_run_first_in_first_out(tmp_path: Path) -> None:
    count = 6
    script = write_script(tmp_path, *({"text": f"answer {n}"} for n in range(count)))
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script) as rpc:
            await rpc.send(
                *({"id": n, "type": "prompt", "message": f"question {n}"} for n in range(count))
            )
            frames = await rpc.until_done(count)
            responses = of(frames, "response")
            assert [r["id"] for r in responses] == list(range(count))
            assert all(r["data"]["started"] for r in responses)
            asked = [m["content"][0]["text"] for m in of(frames, "user_message")]
            assert asked == [f"question {n}" for n in range(count)]
            shown = [m["content"][0]["text"] for m in of(frames, "assistant_message")]
            assert shown == [f"answer {n}" for n in range(count)]
            # Each job's events are contiguous: user_message ... done, then the next.
            jobs = [f["type"] for f in frames if f["type"] in ("user_message", "done")]
            assert jobs == ["user_message", "done"] * count
            for response in responses:
                first_event = frames.index(of(frames, "user_message")[response["id"]])
                assert frames.index(response) < first_event


async def test_abort_cancels_only_the_running_job(tmp_path: Path) -> None:
    script = write_script(
        tmp_path, {"text": "slow", "delay": 60}, {"text": "two"}, {"text": "three"}
    )
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script) as rpc:
            await rpc.send(
                {"id": 1, "type": "prompt", "message": "one"},
                {"id": 2, "type": "prompt", "message": "two"},
                {"id": 3, "type": "prompt", "message": "three"},
            )
            await rpc.until(lambda f: f["type"] == "assistant_start")
            state = (await rpc.call("get_state"))["data"]
            assert (state["busy"], state["queued"]) == (True, 2)
            await rpc.send({"id": "a", "type": "abort"})
            frames = await rpc.until_done(3)
            ends = [f["stop"] for f in of(frames, "turn_end")]
            assert ends == ["aborted", "end_turn", "end_turn"]
            assert [m["content"][0]["text"] for m in of(frames, "assistant_message")] == [
                "two",
                "three",
            ]


async def test_compaction_queues_between_prompts(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "first answer"}, {"text": "second answer"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script) as rpc:
            await rpc.send(
                {"id": 1, "type": "prompt", "message": "one"},
                {"id": 2, "type": "compact"},
                {"id": 3, "type": "prompt", "message": "two"},
            )
            frames = await rpc.until_done(3)
            order = [
                f["type"] for f in frames if f["type"] in ("user_message", "compact_done", "done")
            ]
            assert order == ["user_message", "done", "compact_done", "done", "user_message", "done"]
            assert (await rpc.call("get_state"))["data"]["message_count"] == 3


async def test_closing_stdin_lets_queued_work_finish_then_exits_0(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "late one", "delay": 0.3}, {"text": "late two"})
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script) as rpc:
            await rpc.send(
                {"id": 1, "type": "prompt", "message": "one"},
                {"id": 2, "type": "prompt", "message": "two"},
            )
            await rpc.until(lambda f: f["type"] == "assistant_start")
            await rpc.close_stdin()
            frames = await rpc.read_all()
            assert await rpc.wait() == 0
            assert [f["type"] for f in frames].count("done") == 2
            assert text(frames) == "late onelate two"
            assert frames[-1] == {"type": "done"}
