"""Session files: save, resume, torn and corrupt lines, atomic rewrite; summaries."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
import trio

from agent import (
    InterventionRecord,
    Message,
    SessionError,
    TextContent,
    ToolCallContent,
    ToolResultContent,
)
from agent._messages import now_iso
from agent._sessions import SessionHeader, SessionStore
from agent._transcript import (
    COMPACT_INSTRUCTION,
    SUMMARY_PREFIX,
    Transcript,
    local_summary,
    message_size,
    summary_message,
)
from supervisor import InterventionKind


def msg(role: str, text: str) -> Message:
    return Message(role=role, content=[TextContent(text=text)], time=now_iso())  # type: ignore[arg-type]


def store(home: Path, name: str = "work") -> SessionStore:
    return SessionStore.for_name(home, name, SessionHeader(name=name, provider="offline"))


async def test_append_and_load_round_trip(tmp_path: Path) -> None:
    s = store(tmp_path)
    t = Transcript(store=s)
    call = Message(
        role="assistant",
        content=[TextContent(text="look"), ToolCallContent(id="c", name="read", args={"p": 1})],
        time=now_iso(),
    )
    result = Message(
        role="tool",
        content=[ToolResultContent(call_id="c", is_error=False, content=[TextContent(text="x")])],
        time=now_iso(),
    )
    await t.append(msg("user", "hi"))
    with pytest.raises(ValueError, match="append_exchange"):
        await t.append(call)  # a call enters only with its results
    with pytest.raises(ValueError, match="append_exchange"):
        await t.append(result)
    with pytest.raises(ValueError, match="no result for c"):
        await t.append_exchange(call, msg("tool", "not a result"))
    await t.append_exchange(call, result)
    assert s.path == tmp_path / "sessions" / "work.jsonl"
    lines = s.path.read_text().splitlines()
    assert json.loads(lines[0])["type"] == "session"
    assert len(lines) == 4
    assert store(tmp_path).load() == t.messages()
    assert t.size == sum(message_size(m) for m in t.messages())


async def test_interventions_are_appended_and_folded_on_load_and_rewrite(
    tmp_path: Path,
) -> None:
    s = store(tmp_path)
    t = Transcript(store=s)
    record = InterventionRecord(
        extension="gate",
        event="turn_start",
        kind=InterventionKind.BLOCK,
        applied=True,
        reason="closed",
        step=1,
    )
    with pytest.raises(ValueError, match="no message"):
        await t.annotate([record])
    await t.append(msg("user", "hi"))
    size = t.size
    await t.annotate([record])
    assert t.messages()[0].interventions == [record]
    assert t.size > size
    last = json.loads(s.path.read_text().splitlines()[-1])
    assert last == {"type": "interventions", "records": [msgspec.to_builtins(record)]}
    assert s.load() == t.messages()
    await t.replace(t.messages())  # a rewrite folds the records into their message
    lines = [json.loads(x) for x in s.path.read_text().splitlines()]
    assert [x["type"] for x in lines] == ["session", "message"]
    assert lines[1]["message"]["interventions"][0]["extension"] == "gate"
    assert s.load() == t.messages()
    header = s.path.read_text().splitlines()[0]
    s.path.write_text(f"{header}\n{json.dumps(last)}\n")
    with pytest.raises(SessionError, match="interventions before any message"):
        s.load()


def test_missing_session_is_empty(tmp_path: Path) -> None:
    assert store(tmp_path).load() == []


async def test_torn_last_line_is_dropped(tmp_path: Path) -> None:
    s = store(tmp_path)
    await Transcript(store=s).append(msg("user", "kept"))
    with s.path.open("ab") as fh:
        fh.write(b'{"type":"message","message":{"role":"us')
    assert [m.content for m in s.load()] == [[TextContent(text="kept")]]


async def test_corrupt_line_names_file_and_line(tmp_path: Path) -> None:
    s = store(tmp_path)
    t = Transcript(store=s)
    await t.append(msg("user", "one"))
    await t.append(msg("user", "two"))
    lines = s.path.read_text().splitlines()
    lines[1] = "not json"
    s.path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SessionError, match=r"work\.jsonl:2: not a session record"):
        s.load()


@pytest.mark.parametrize("name", ["", "../escape", ".hidden", "a/b", "x" * 200, "-dash"])
def test_bad_session_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(SessionError, match="invalid session name"):
        store(tmp_path, name)


async def test_replace_and_clear_rewrite_atomically(tmp_path: Path) -> None:
    s = store(tmp_path)
    t = Transcript(store=s)
    for i in range(5):
        await t.append(msg("user", f"m{i}"))
    await t.replace([summary_message("short")])
    assert len(s.path.read_text().splitlines()) == 2
    # No temporary file is left beside it (the state-file helper's ``.work.jsonl.<pid>``).
    assert sorted(p.name for p in s.path.parent.iterdir()) == ["work.jsonl", "work.jsonl.lock"]
    assert text_of_first(store(tmp_path).load()).startswith(SUMMARY_PREFIX)
    t.clear()
    assert store(tmp_path).load() == []
    assert len(t) == 0
    assert t.size == 0


async def test_a_rewrite_refuses_a_session_file_that_is_a_link(tmp_path: Path) -> None:
    # The rename would put the new content in place of the link and leave the file
    # it points at stale: refused, with both as they were.
    elsewhere = tmp_path / "elsewhere.jsonl"
    first = store(tmp_path)
    first.open()
    await Transcript(store=first).append(msg("user", "one"))
    first.close()
    first.path.rename(elsewhere)
    first.path.symlink_to(elsewhere)
    s = store(tmp_path)
    s.open()
    before = elsewhere.read_bytes()
    try:
        with pytest.raises(SessionError, match="cannot write session: is a symbolic link"):
            s.rewrite([msg("user", "two")])
    finally:
        s.close()
    assert first.path.is_symlink()
    assert elsewhere.read_bytes() == before


def text_of_first(messages: list[Message]) -> str:
    block = messages[0].content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_unwritable_session_raises_session_error(tmp_path: Path) -> None:
    (tmp_path / "sessions").write_text("a file where the directory should be")
    t = Transcript(store=store(tmp_path))
    with pytest.raises(SessionError, match="cannot open session"):
        await t.append(msg("user", "x"))


def test_local_summary_is_bounded_and_deterministic() -> None:
    messages = [msg("user", f"request number {i} " + "word " * 50) for i in range(100)]
    messages.append(
        Message(
            role="assistant",
            content=[ToolCallContent(id="a", name="bash", args={})],
            time=now_iso(),
        )
    )
    messages.append(
        Message(
            role="tool",
            content=[ToolResultContent(call_id="a", is_error=True, content=[])],
            time=now_iso(),
        )
    )
    messages.append(msg("assistant", "all done"))
    messages.append(msg("user", COMPACT_INSTRUCTION))
    one = local_summary(messages, limit=1000)
    assert one == local_summary(messages, limit=1000)
    assert len(one) <= 1000
    assert "bash×1; 1 failed" in one
    assert "Last answer: all done" in one
    assert "and 92 earlier" in one
    assert COMPACT_INSTRUCTION not in one


def test_local_summary_keeps_an_earlier_summary() -> None:
    first = local_summary([msg("user", "build the parser")])
    second = local_summary([summary_message(first), msg("user", "now the lexer")])
    assert "Earlier:" in second
    assert "build the parser" in second
    assert "now the lexer" in second


async def test_transcript_append_survives_cancellation_of_caller(tmp_path: Path) -> None:
    s = store(tmp_path)
    t = Transcript(store=s)
    with trio.CancelScope() as scope:
        scope.cancel()
        await t.append(msg("user", "written anyway"))
    assert len(store(tmp_path).load()) == 1
