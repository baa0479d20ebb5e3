"""The transcript's invariant: every tool call has exactly one result, right after it.

An *exchange* is an assistant message that calls tools and the ``tool`` message
that answers it. The model APIs refuse a history that breaks the pairing (OpenAI:
``tool`` messages right after the assistant's ``tool_calls``, one per id;
Anthropic: a ``tool_result`` per ``tool_use`` id in the next user turn), and they
refuse every later request too, so one broken exchange would make a session
unanswerable for good. So:

* the loop writes an exchange as one step (:meth:`~agent._transcript.Transcript.append_exchange`),
  with an "aborted" result for each call that did not finish, whatever interrupted it;
* what comes from elsewhere (a session file written by an older corral, a crash
  between two writes, a hand-edited file, an embedder's messages) goes through
  :func:`repair_tool_calls`: an unanswered call gets an explicit error result, a
  result without its call (or a second result for one) is dropped, and each
  repair is described so the caller can log it.

:func:`tool_call_problems` is the check itself; the offline and scripted
providers refuse a request that fails it, as the real APIs do.
"""

from __future__ import annotations

import msgspec

from ._exceptions import ProviderError
from ._messages import Message, TextContent, ToolCallContent, ToolResultContent
from ._providers.base import ProviderToolCall

__all__ = [
    "ABORTED_BEFORE_RUN",
    "ABORTED_WHILE_RUNNING",
    "REPAIRED",
    "aborted_result",
    "pairing_error",
    "repair_tool_calls",
    "tool_call_problems",
    "tool_calls",
    "unique_ids",
]

#: Result text of a call whose turn was cancelled before the tool started.
ABORTED_BEFORE_RUN = "aborted before the tool ran"
#: Result text of a call whose tool was stopped by the cancellation.
ABORTED_WHILE_RUNNING = "aborted before the tool finished"
#: Result text of a call that a loaded transcript left unanswered.
REPAIRED = "aborted: no result was recorded for this call (added when the session was loaded)"


def tool_calls(message: Message) -> list[ToolCallContent]:
    """The tool calls of ``message`` (none unless it is an assistant message)."""
    if message.role != "assistant":
        return []
    return [b for b in message.content if isinstance(b, ToolCallContent)]


def unique_ids(calls: list[ProviderToolCall]) -> list[ProviderToolCall]:
    """``calls`` with an empty or repeated id replaced (``<id>_<index>``), so each
    result can name its call: a server that reuses ids cannot break the pairing."""
    seen: set[str] = set()
    out = []
    for index, call in enumerate(calls):
        ident = call.id or "call"
        while ident in seen:
            ident = f"{ident}_{index}"
        seen.add(ident)
        out.append(call if ident == call.id else msgspec.structs.replace(call, id=ident))
    return out


def aborted_result(call_id: str, why: str) -> ToolResultContent:
    """The error result that answers a call that never got one."""
    return ToolResultContent(call_id=call_id, is_error=True, content=[TextContent(text=why)])


def _results(message: Message) -> list[ToolResultContent]:
    return [b for b in message.content if isinstance(b, ToolResultContent)]


def tool_call_problems(messages: list[Message]) -> list[str]:
    """What breaks the pairing in ``messages`` (an empty list when nothing does).

    Holds when each assistant message with tool calls is followed by a ``tool``
    message holding exactly one result per call id and nothing else, and every
    ``tool`` message follows such an assistant message.
    """
    problems: list[str] = []
    owed: list[str] | None = None  # ids the message at `index` must answer
    for index, message in enumerate(messages):
        if message.role == "tool":
            if owed is None:
                problems.append(f"message {index}: tool results without a tool call before them")
            else:
                got = [r.call_id for r in _results(message)]
                missing = [i for i in owed if i not in got]
                extra = [i for i in got if i not in owed or got.count(i) > 1]
                if missing:
                    problems.append(f"message {index}: no result for {', '.join(missing)}")
                if extra:
                    listed = ", ".join(dict.fromkeys(extra))
                    problems.append(f"message {index}: results without a call: {listed}")
                if len(got) != len(message.content):
                    problems.append(f"message {index}: a tool message holds more than results")
            owed = None
            continue
        if owed:
            problems.append(f"message {index - 1}: no result for {', '.join(owed)}")
        calls = tool_calls(message)
        owed = [c.id for c in calls] or None
        if owed is not None and len(set(owed)) != len(owed):
            problems.append(f"message {index}: the same tool call id twice")
    if owed:
        problems.append(f"message {len(messages) - 1}: no result for {', '.join(owed)}")
    return problems


def pairing_error(provider: str, messages: list[Message]) -> ProviderError | None:
    """The 400 a model API answers to ``messages`` when the pairing is broken, or None."""
    problems = tool_call_problems(messages)
    if not problems:
        return None
    return ProviderError(
        provider,
        f"invalid request: {'; '.join(problems)} (every tool call needs exactly one result "
        "right after it, as the model APIs require)",
        status=400,
    )


def _answer(call_message: Message, reply: Message | None) -> tuple[Message, list[str]]:
    """The ``tool`` message answering ``call_message``: ``reply``'s results, the rest repaired."""
    ids = [c.id for c in tool_calls(call_message)]
    given: dict[str, ToolResultContent] = {}
    notes: list[str] = []
    for block in reply.content if reply is not None else []:
        if isinstance(block, ToolResultContent) and block.call_id in ids:
            if block.call_id in given:
                notes.append(f"dropped a second result for {block.call_id}")
            else:
                given[block.call_id] = block
        else:
            notes.append("dropped a block of a tool message that answers no call")
    missing = [i for i in dict.fromkeys(ids) if i not in given]
    if missing:
        notes.append(f"added an aborted result for {', '.join(missing)}")
    content = [given.get(i) or aborted_result(i, REPAIRED) for i in dict.fromkeys(ids)]
    if reply is None:
        return Message(role="tool", content=list(content), time=call_message.time), notes
    answered = Message(
        role="tool", content=list(content), time=reply.time, interventions=reply.interventions
    )
    return answered, notes


def repair_tool_calls(messages: list[Message]) -> tuple[list[Message], list[str]]:
    """``messages`` with every tool call answered exactly once, and what was changed.

    A valid transcript is returned as it is (the same list) with no notes.
    """
    if not tool_call_problems(messages):
        return messages, []
    out: list[Message] = []
    notes: list[str] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        if tool_calls(message):
            following = messages[index + 1] if index + 1 < len(messages) else None
            reply = following if following is not None and following.role == "tool" else None
            answered, changed = _answer(message, reply)
            out += [message, answered]
            notes += [f"message {index}: {note}" for note in changed]
            index += 2 if reply is not None else 1
            continue
        if message.role == "tool":
            notes.append(f"message {index}: dropped tool results without a tool call before them")
        else:
            out.append(message)
        index += 1
    return out, notes
