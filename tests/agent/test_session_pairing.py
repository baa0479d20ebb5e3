"""Sessions whose tool calls lack their results are repaired on load, never sent as they are.

Files written by a corral before issue 32 could hold an assistant message whose tool
call has no result (an abort just after the model streamed it); so can a file a
process wrote up to a crash between two records, or one edited by hand. Opening
such a session gives each unanswered call an explicit "aborted" error result, drops
results without a call, logs it, and rewrites the file; reading it without opening
repairs what is returned. A session resumed that way is accepted by a model API as
strict as the real ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
import trio
from helpers.agentkit import options
from helpers.http_fakes import OPENAI_FULL, Reply, open_fake_server
from structlog.testing import capture_logs

from agent import TurnEnd, open_runtime
from agent._exchanges import REPAIRED, pairing_error, repair_tool_calls, tool_call_problems
from agent._messages import Message, TextContent, ToolCallContent, ToolResultContent, now_iso
from agent._sessions import SessionHeader, SessionStore
from agent._transcript import Transcript

pytestmark = pytest.mark.usefixtures("no_leaks")


def msg(role: str, text: str) -> Message:
    return Message(role=role, content=[TextContent(text=text)], time=now_iso())  # type: ignore[arg-type]


def call(*ids: str) -> Message:
    blocks = [ToolCallContent(id=i, name="read", args={"path": "a"}) for i in ids]
    return Message(role="assistant", content=[TextContent(text="look"), *blocks], time=now_iso())


def answer(*ids: str) -> Message:
    blocks = [ToolResultContent(call_id=i, is_error=False, content=[]) for i in ids]
    return Message(role="tool", content=list(blocks), time=now_iso())


def write_old_file(home: Path, name: str, messages: list[Message]) -> Path:
    """A session file as an older corral wrote it: one record per message."""
    path = home / "sessions" / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"type": "session", "version": 1, "name": name, "provider": "scripted"}
    lines = [json.dumps(header)] + [
        json.dumps({"type": "message", "message": json.loads(_encode(m))}) for m in messages
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _encode(message: Message) -> str:
    return msgspec.json.encode(message).decode()


BROKEN = [msg("user", "go"), call("c1"), msg("user", "next"), msg("assistant", "hello")]


def test_an_unanswered_call_is_answered_on_open_logged_and_the_file_rewritten(
    tmp_path: Path,
) -> None:
    path = write_old_file(tmp_path, "old", BROKEN)
    assert pairing_error("openai", BROKEN) is not None  # what a provider would refuse
    store = SessionStore.for_name(tmp_path, "old", SessionHeader(name="old"))
    with capture_logs() as logs:
        messages = store.open()
    store.close()
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    [result] = messages[2].content
    assert isinstance(result, ToolResultContent)
    assert (result.call_id, result.is_error) == ("c1", True)
    assert result.content == [TextContent(text=REPAIRED)]
    assert tool_call_problems(messages) == []
    [warning] = [e for e in logs if e["event"] == "session_tool_calls_repaired"]
    assert warning["log_level"] == "warning"
    assert "added an aborted result for c1" in warning["repairs"][0]
    assert store.repaired is not None
    assert "tool call pairing" in store.repaired
    # The file itself was repaired: the next open has nothing to do.
    assert len(path.read_text().splitlines()) == 6
    again = SessionStore.for_name(tmp_path, "old", SessionHeader(name="old"))
    with capture_logs() as logs:
        assert again.open() == messages
    again.close()
    assert again.repaired is None
    assert not [e for e in logs if e["event"] == "session_tool_calls_repaired"]


def test_load_repairs_what_it_returns_but_not_the_file(tmp_path: Path) -> None:
    path = write_old_file(tmp_path, "old", BROKEN)
    before = path.read_bytes()
    loaded = SessionStore.for_name(tmp_path, "old", SessionHeader(name="old")).load()
    assert tool_call_problems(loaded) == []
    assert path.read_bytes() == before


def test_a_crash_between_the_call_and_its_results_is_repaired(tmp_path: Path) -> None:
    # The process died after writing the assistant message (the last record).
    write_old_file(tmp_path, "crash", [msg("user", "go"), call("c1", "c2")])
    store = SessionStore.for_name(tmp_path, "crash", SessionHeader(name="crash"))
    messages = store.open()
    store.close()
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert [b.call_id for b in messages[2].content] == ["c1", "c2"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("broken", "roles", "note"),
    [
        ([msg("user", "a"), answer("zz"), msg("user", "b")], ["user", "user"], "without a tool"),
        (
            [msg("user", "a"), call("c1"), answer("c1", "c1", "zz")],
            ["user", "assistant", "tool"],
            "second result for c1",
        ),
        (
            [msg("user", "a"), call("c1", "c2"), answer("c2")],
            ["user", "assistant", "tool"],
            "aborted result for c1",
        ),
        (
            [msg("user", "a"), call("c1"), answer("c1"), answer("c1")],
            ["user", "assistant", "tool"],
            "without a tool call",
        ),
    ],
)
def test_repair_cases(broken: list[Message], roles: list[str], note: str) -> None:
    fixed, notes = repair_tool_calls(broken)
    assert [m.role for m in fixed] == roles
    assert tool_call_problems(fixed) == []
    assert any(note in n for n in notes), notes
    assert repair_tool_calls(fixed) == (fixed, [])  # idempotent


def test_a_valid_transcript_is_left_as_it_is() -> None:
    valid = [msg("user", "a"), call("c1", "c2"), answer("c2", "c1"), msg("assistant", "ok")]
    assert repair_tool_calls(valid)[0] is valid
    assert Transcript(valid).messages() == valid


@pytest.mark.usefixtures("clean_http_env")
async def test_a_resumed_old_session_is_accepted_by_the_strict_api(home: Path, work: Path) -> None:
    write_old_file(home, "old", BROKEN)
    with trio.fail_after(30):
        async with open_fake_server() as server:
            server.queue(Reply(chunks=[OPENAI_FULL]))
            base = f"{server.url}/v1"
            opts = options(home, work, provider="openai", model="m", base_url=base, session="old")
            async with open_runtime(opts) as rt:
                events = await rt.prompt("again").collect()
            assert server.refused == []
    assert [e.stop for e in events if isinstance(e, TurnEnd)] == ["end_turn"]


def test_an_exchange_torn_by_a_power_loss_is_repaired_whole(tmp_path: Path) -> None:
    """The exchange is one write; a power loss can still tear it: the torn tail is
    moved aside as always, and the call left without its results is answered."""
    store = SessionStore.for_name(tmp_path, "torn", SessionHeader(name="torn"))
    store.append(msg("user", "go"))
    store.append_many([call("c1"), answer("c1")])
    store.close()
    data = store.path.read_bytes()
    store.path.write_bytes(data[: len(data) - 20])  # the tool line lost its end
    again = SessionStore.for_name(tmp_path, "torn", SessionHeader(name="torn"))
    messages = again.open()
    again.close()
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert messages[2].content[0].content == [TextContent(text=REPAIRED)]  # type: ignore[union-attr]
    assert again.repaired is not None
    assert "torn last record" in again.repaired
    assert "tool call pairing" in again.repaired
    assert again.torn_path.exists()
