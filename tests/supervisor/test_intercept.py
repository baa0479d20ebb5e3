"""The intercept chain and one-way lifecycle events, with real subscriber processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio
from helpers.paths import EXAMPLES
from helpers.supkit import CYCLE, Kit, capture_logs

from supervisor import EmitEvent, InterventionKind, SupervisorClient

# An interceptor configured by a JSON argument; /seen-<name> shows what it received.
HOOK = """\
cfg = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
emit({"type": "hello", "name": NAME, "version": "1.0.0"})
emit({"type": "subscribe", "events": cfg.get("events", []),
      "intercept": cfg.get("intercept", [])})
emit({"type": "register_command", "name": "seen-" + NAME})
emit({"type": "ready"})
seen = []
for msg in frames():
    kind = msg["type"]
    if kind == "event":
        seen.append(msg)
    elif kind == "event_intercept":
        seen.append(msg)
        event = msg["event"]
        reply = {"type": "event_intercept_response", "id": msg["id"]}
        if event == "tool_call":
            if cfg.get("block_tool"):
                reply.update(block=True, reason=cfg["block_tool"])
            elif cfg.get("trail"):
                args = dict(msg.get("tool_args") or {})
                args["trail"] = args.get("trail", "") + NAME + ";"
                reply["modified_args"] = args
        elif event == "turn_start":
            if msg["step"] >= cfg.get("block_step", 10**9):
                reply.update(block=True, reason=f"step {msg['step']} refused by {NAME}")
        elif event == "assistant_message":
            if cfg.get("block_text") and cfg["block_text"] in msg["text"]:
                reply.update(block=True, reason="suppressed")
            elif cfg.get("suffix"):
                reply["replace_text"] = msg["text"] + cfg["suffix"]
        emit(reply)
    elif kind == "command_invoked":
        emit({"type": "command_response", "id": msg["id"], "action": "display",
              "display": json.dumps(seen)})
    elif kind == "shutdown":
        emit({"type": "shutdown_ack"})
        break
"""


def hook(kit: Kit, name: str, grant: list[str] | None = None, **cfg: Any) -> Path:
    """A HOOK extension; ``grant`` is its ``permissions.intercept_builtin``."""
    perms = {"permissions": {"intercept_builtin": grant}} if grant is not None else {}
    return kit.inline(name, HOOK, args=[json.dumps(cfg)], **perms)


async def seen(client: SupervisorClient, name: str) -> list[dict[str, Any]]:
    out = await client.invoke_command(f"seen-{name}")
    result: list[dict[str, Any]] = json.loads(out.display)
    return result


async def test_chain_is_load_order_and_rewrites_chain(kit: Kit) -> None:
    # "first" is slower to say hello, yet it is consulted first: load order decides.
    first = kit.inline(
        "first",
        "import time; time.sleep(0.3)\n" + HOOK,
        args=[json.dumps({"intercept": ["tool_call"], "trail": True})],
        permissions={"intercept_builtin": ["bash"]},
    )
    second = hook(kit, "second", grant=["*"], intercept=["tool_call"], trail=True)
    bystander = hook(kit, "bystander")
    with trio.fail_after(CYCLE):
        async with kit.open(first, second, bystander) as client:
            out = await client.intercept_tool_call("t1", "bash", {"command": "ls"})
            got_second = await seen(client, "second")
            got_bystander = await seen(client, "bystander")
    assert out.block is False
    assert out.consulted == ["first", "second"]
    assert out.args == {"command": "ls", "trail": "first;second;"}
    # The second subscriber saw the first one's output, with the seed's fields.
    (frame,) = got_second
    assert frame["event"] == "tool_call"
    assert (frame["tool_id"], frame["tool_name"]) == ("t1", "bash")
    assert frame["tool_args"] == {"command": "ls", "trail": "first;"}
    assert got_bystander == []


async def test_first_block_wins(kit: Kit) -> None:
    allow = kit.chaos("allow", "--intercept", "allow")
    block1 = hook(kit, "block1", ["write"], intercept=["tool_call"], block_tool="refused by block1")
    block2 = hook(kit, "block2", ["write"], intercept=["tool_call"], block_tool="refused by block2")
    with trio.fail_after(CYCLE):
        async with kit.open(allow, block1, block2) as client:
            out = await client.intercept_tool_call("t1", "write", {"path": "x"})
            got_block2 = await seen(client, "block2")
    assert out.block is True
    assert out.blocked_by == "block1"
    assert out.reason == "refused by block1"
    assert out.consulted == ["allow", "block1"]
    assert got_block2 == []  # never asked


async def test_guard_and_chaos_chain(kit: Kit) -> None:
    after = hook(kit, "after", ["*"], intercept=["tool_call"], trail=True)
    with trio.fail_after(CYCLE):
        async with kit.open(EXAMPLES / "guard", after) as client:
            rewritten = await client.intercept_tool_call(
                "t1", "bash", {"command": "ls -l", "timeout": 5}
            )
            refused = await client.intercept_tool_call("t2", "bash", {"command": "rm -rf /"})
            untouched = await client.intercept_tool_call("t3", "read", {"path": "a"})
            got_after = await seen(client, "after")
    assert rewritten.block is False
    assert rewritten.args == {
        "command": "echo GUARDED: 'ls -l'",
        "timeout": 5,
        "trail": "after;",
    }
    assert got_after[0]["tool_args"] == {"command": "echo GUARDED: 'ls -l'", "timeout": 5}
    assert refused.block is True
    assert refused.blocked_by == "guard"
    assert "rm -rf" in refused.reason
    assert refused.consulted == ["guard"]
    assert untouched.args == {"path": "a", "trail": "after;"}


async def test_invalid_modified_args_are_dropped(kit: Kit) -> None:
    bad = kit.chaos("bad", "--intercept", "badargs")
    after = hook(kit, "after", ["*"], intercept=["tool_call"], trail=True)
    with capture_logs() as logs, trio.fail_after(CYCLE):
        async with kit.open(bad, after) as client:
            out = await client.intercept_tool_call("t1", "bash", {"command": "ls"})
            got_after = await seen(client, "after")
    assert out.block is False
    assert out.args == {"command": "ls", "trail": "after;"}
    assert got_after[0]["tool_args"] == {"command": "ls"}
    (dropped,) = [e for e in logs if e["event"] == "intercept_args_dropped"]
    assert dropped["extension"] == "bad"


async def test_hanging_subscriber_is_allowed_after_its_deadline(kit: Kit) -> None:
    hang = kit.chaos("hang", "--intercept", "hang")
    after = hook(kit, "after", ["*"], intercept=["tool_call"], trail=True)
    with trio.fail_after(CYCLE):
        async with kit.open(hang, after, config=kit.config(intercept_timeout=0.5)) as client:
            t0 = trio.current_time()
            out = await client.intercept_tool_call("t1", "bash", {"command": "ls"})
            took = trio.current_time() - t0
            # The extension is not punished for it: it still serves.
            echo = await client.call_tool("chaos_echo", {"text": "x"})
            info = next(i for i in await client.list_extensions() if i.name == "hang")
    assert 0.5 <= took < 0.5 + 2.0
    assert out.block is False
    assert out.consulted == ["hang", "after"]
    assert out.args == {"command": "ls", "trail": "after;"}
    assert echo.extension == "hang"
    assert info.stats.timeouts == 1


async def test_crashing_subscriber_is_allowed_immediately(kit: Kit) -> None:
    crash = kit.chaos("crash", "--intercept", "crash", restart="never")
    after = hook(kit, "after", ["*"], intercept=["tool_call"], trail=True)
    with trio.fail_after(CYCLE):
        async with kit.open(crash, after, config=kit.config(intercept_timeout=4.0)) as client:
            t0 = trio.current_time()
            out = await client.intercept_tool_call("t1", "bash", {"command": "ls"})
            took = trio.current_time() - t0
            t1 = trio.current_time()
            again = await client.intercept_tool_call("t2", "bash", {"command": "pwd"})
            took_again = trio.current_time() - t1
    assert took < 4.0 / 2
    assert out.block is False
    assert out.args == {"command": "ls", "trail": "after;"}
    # Asking a dead subscriber again never waits for its deadline either.
    assert took_again < 4.0 / 2
    assert again.args == {"command": "pwd", "trail": "after;"}


async def test_garbage_reply_is_allowed(kit: Kit) -> None:
    garbage = kit.chaos("garbage", "--intercept", "garbage")
    with trio.fail_after(CYCLE):
        async with kit.open(garbage, config=kit.config(intercept_timeout=0.5)) as client:
            out = await client.intercept_tool_call("t1", "bash", {"command": "ls"})
            info = next(i for i in await client.list_extensions() if i.name == "garbage")
    assert out.block is False
    assert out.args == {"command": "ls"}
    assert info.stats.bad_frames == 1
    assert info.state == "running"


async def test_no_subscribers_means_allow_unchanged(kit: Kit) -> None:
    plain = kit.chaos("plain")
    with trio.fail_after(CYCLE):
        async with kit.open(plain) as client:
            tool = await client.intercept_tool_call("t1", "bash", {"command": "ls"})
            turn = await client.intercept_turn_start(1)
            text = await client.intercept_assistant_message("hello")
    assert (tool.block, tool.args, tool.consulted) == (False, {"command": "ls"}, [])
    assert (turn.block, turn.consulted) == (False, [])
    assert (text.block, text.text) == (False, None)


async def test_turn_start_block(kit: Kit) -> None:
    gate = hook(kit, "gate", intercept=["turn_start"], block_step=3)
    with trio.fail_after(CYCLE):
        async with kit.open(gate) as client:
            ok = await client.intercept_turn_start(1)
            blocked = await client.intercept_turn_start(3)
            tool = await client.intercept_tool_call("t", "bash", {"command": "ls"})
            got = await seen(client, "gate")
    assert ok.block is False
    assert ok.consulted == ["gate"]
    assert blocked.block is True
    assert blocked.reason == "step 3 refused by gate"
    assert blocked.blocked_by == "gate"
    assert tool.consulted == []  # gate only intercepts turn_start
    assert [(g["event"], g["step"]) for g in got] == [("turn_start", 1), ("turn_start", 3)]


async def test_assistant_message_replace_text_chains_and_block(kit: Kit) -> None:
    first = hook(
        kit, "first", intercept=["assistant_message"], suffix=" [1]", block_text="forbidden"
    )
    with trio.fail_after(CYCLE):
        async with kit.open(EXAMPLES / "guard", first) as client:
            redacted = await client.intercept_assistant_message("key: SECRET here")
            plain = await client.intercept_assistant_message("nothing to hide")
            blocked = await client.intercept_assistant_message("forbidden words")
            got = await seen(client, "first")
    assert redacted.block is False
    assert redacted.text == "key: [redacted] here [1]"
    assert redacted.consulted == ["guard", "first"]
    assert got[0]["text"] == "key: [redacted] here"  # saw guard's rewrite
    assert plain.text == "nothing to hide [1]"
    assert blocked.block is True
    assert blocked.blocked_by == "first"
    assert blocked.reason == "suppressed"


async def test_unchanged_assistant_message_reports_no_rewrite(kit: Kit) -> None:
    with trio.fail_after(CYCLE):
        async with kit.open(EXAMPLES / "guard") as client:
            out = await client.intercept_assistant_message("nothing to hide")
    assert out.block is False
    assert out.text is None


async def test_events_reach_only_subscribers(kit: Kit) -> None:
    turns = hook(kit, "turns", events=["turn_start", "turn_end"])
    tools = hook(kit, "tools", events=["tool_call"], intercept=["tool_call"])
    deaf = hook(kit, "deaf")
    with trio.fail_after(CYCLE):
        async with kit.open(turns, tools, deaf) as client:
            await client.emit(EmitEvent(event="session_start"))
            await client.emit(EmitEvent(event="turn_start", step=1))
            await client.emit(
                EmitEvent(
                    event="tool_call", tool_id="x", tool_name="read", tool_args={"path": "foo.go"}
                )
            )
            await client.emit(EmitEvent(event="turn_end", stop="end_turn"))
            got = {name: await seen(client, name) for name in ("turns", "tools", "deaf")}
    assert got["turns"] == [
        {"type": "event", "event": "turn_start", "step": 1},
        {"type": "event", "event": "turn_end", "stop": "end_turn"},
    ]
    assert got["tools"] == [
        {
            "type": "event",
            "event": "tool_call",
            "tool_id": "x",
            "tool_name": "read",
            "tool_args": {"path": "foo.go"},
        },
    ]
    assert got["deaf"] == []


# --- the intercept_builtin permission ------------------------------------------------


async def test_builtin_block_and_rewrite_need_the_permission(kit: Kit) -> None:
    # "blocker" and "rewriter" have no permission; "writes" may only touch `write`.
    blocker = hook(kit, "blocker", intercept=["tool_call"], block_tool="no bash for you")
    rewriter = hook(kit, "rewriter", intercept=["tool_call"], trail=True)
    writes = hook(kit, "writes", ["write"], intercept=["tool_call"], trail=True)
    with capture_logs() as logs, trio.fail_after(CYCLE):
        async with kit.open(rewriter, writes, blocker) as client:
            bash = await client.intercept_tool_call("t1", "bash", {"command": "ls"})
            again = await client.intercept_tool_call("t2", "bash", {"command": "pwd"})
            write = await client.intercept_tool_call("t3", "write", {"path": "a"})
            got_writes = await seen(client, "writes")
            got_blocker = await seen(client, "blocker")
    # Nothing was refused or changed, yet everyone was asked (they may observe).
    assert (bash.block, bash.args, bash.consulted) == (
        False,
        {"command": "ls"},
        ["rewriter", "writes", "blocker"],
    )
    assert bash.rewritten_by == []
    assert [(i.extension, i.kind, i.applied) for i in bash.interventions] == [
        ("rewriter", InterventionKind.REWRITE, False),
        ("writes", InterventionKind.REWRITE, False),
        ("blocker", InterventionKind.BLOCK, False),
    ]
    assert bash.interventions[0].args == {"command": "ls", "trail": "rewriter;"}
    assert bash.interventions[2].reason == "no bash for you"
    # An ignored rewrite is not passed on: the next subscriber saw the model's args.
    assert got_writes[0]["tool_args"] == {"command": "ls"}
    assert got_blocker[0]["tool_args"] == {"command": "ls"}
    assert again.block is False
    # `write` is granted to "writes" only.
    assert write.block is False
    assert write.args == {"path": "a", "trail": "writes;"}
    assert write.rewritten_by == ["writes"]
    # Logged once per extension, with its name, however often it tries.
    ignored = [(e["extension"], e["action"]) for e in logs if e["event"] == "intercept_ignored"]
    assert sorted(ignored) == [
        ("blocker", "block"),
        ("rewriter", "rewrite"),
        ("writes", "rewrite"),
    ]


async def test_a_granted_block_still_wins_after_ignored_ones(kit: Kit) -> None:
    squatter = hook(kit, "squatter", intercept=["tool_call"], block_tool="squatted")
    guard = hook(kit, "guard2", ["bash", "edit"], intercept=["tool_call"], block_tool="real")
    with trio.fail_after(CYCLE):
        async with kit.open(squatter, guard) as client:
            out = await client.intercept_tool_call("t1", "bash", {"command": "ls"})
    assert (out.block, out.blocked_by, out.reason) == (True, "guard2", "real")
    assert [(i.extension, i.applied) for i in out.interventions] == [
        ("squatter", False),
        ("guard2", True),
    ]


async def test_extension_tools_and_other_events_need_no_permission(kit: Kit) -> None:
    plain = hook(
        kit,
        "plain",
        intercept=["tool_call", "turn_start", "assistant_message"],
        trail=True,
        block_step=2,
        suffix="!",
    )
    with trio.fail_after(CYCLE):
        async with kit.open(plain) as client:
            tool = await client.intercept_tool_call("t1", "weather", {"city": "x"}, builtin=False)
            turn = await client.intercept_turn_start(2)
            text = await client.intercept_assistant_message("hi")
    assert tool.args == {"city": "x", "trail": "plain;"}
    assert tool.rewritten_by == ["plain"]
    assert (turn.block, turn.blocked_by) == (True, "plain")
    assert [(i.kind, i.applied) for i in turn.interventions] == [(InterventionKind.BLOCK, True)]
    assert text.text == "hi!"
    assert [(i.extension, i.text) for i in text.interventions] == [("plain", "hi!")]
