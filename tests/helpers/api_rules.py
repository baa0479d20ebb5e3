"""What the real model APIs refuse, so a test double can refuse it too.

:func:`openai_problem` checks a Chat Completions request body and
:func:`anthropic_problem` a Messages request body the way the services do before
they generate anything: roles, the pairing of every tool call with exactly one
result in the place each API expects it, ids, empty content. Each returns a
:class:`Problem` (what the service answers 400 with) or None. :func:`openai_error`
and :func:`anthropic_error` are the services' error documents::

    OpenAI     {"error": {"message", "type": "invalid_request_error", "param", "code"}}
    Anthropic  {"type": "error", "error": {"type": "invalid_request_error", "message"}}

With extended thinking on (Anthropic's ``thinking``), the constraints it adds are
checked too: ``budget_tokens`` of at least 1024 and below ``max_tokens``, no
``temperature`` other than 1, no ``top_k``, no forced ``tool_choice``, thinking
blocks with a signature, and a request that continues a tool-use exchange must give
that assistant message back starting with its thinking block. OpenAI-compatible
requests may carry ``reasoning_effort`` only as one of its values, and no message
may carry ``reasoning_content`` (DeepSeek refuses it).

The messages follow the services' own wording where it is known (the unanswered
tool call, the orphan ``tool`` message, alternation, unique ``tool_use`` ids);
the rest is written in the same style. A check here is stricter than a service
only where the service's behaviour is undocumented.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Problem",
    "anthropic_error",
    "anthropic_problem",
    "openai_error",
    "openai_problem",
]

_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class Problem:
    """Why a request is refused: the message, and the parameter it names (OpenAI)."""

    message: str
    param: str | None = None
    code: str | None = None


def openai_error(problem: Problem) -> dict[str, Any]:
    """OpenAI's 400 document for ``problem``."""
    return {
        "error": {
            "message": problem.message,
            "type": "invalid_request_error",
            "param": problem.param,
            "code": problem.code,
        }
    }


def anthropic_error(problem: Problem) -> dict[str, Any]:
    """Anthropic's 400 document for ``problem``."""
    return {"type": "error", "error": {"type": "invalid_request_error", "message": problem.message}}


# --- OpenAI Chat Completions ---------------------------------------------------------


def _openai_tools(tools: Any) -> Problem | None:
    if tools is None:
        return None
    if not isinstance(tools, list) or not tools:
        return Problem("[] is too short - 'tools'", "tools", "empty_array")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type") != "function":
            return Problem(f"Missing required parameter: 'tools[{i}].function'.", f"tools[{i}]")
        name = function.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            return Problem(
                f"Invalid 'tools[{i}].function.name': string does not match pattern. "
                "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
                f"tools[{i}].function.name",
                "invalid_value",
            )
    return None


def _openai_calls(i: int, message: dict[str, Any]) -> tuple[list[str], Problem | None]:
    calls = message.get("tool_calls")
    if calls is None:
        return [], None
    if not isinstance(calls, list) or not calls:
        return [], Problem(
            f"[] is too short - 'messages.{i}.tool_calls'", f"messages.[{i}].tool_calls"
        )
    ids: list[str] = []
    for j, call in enumerate(calls):
        where = f"messages.[{i}].tool_calls.[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call.get("id"), str) or not call["id"]:
            return [], Problem(f"Missing required parameter: '{where}.id'.", f"{where}.id")
        if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
            return [], Problem(
                f"Invalid type for '{where}.function.arguments': expected a string.",
                f"{where}.function.arguments",
                "invalid_type",
            )
        ids.append(call["id"])
    return ids, None


def openai_problem(body: Any) -> Problem | None:
    """Why OpenAI's Chat Completions API would refuse ``body``, or None."""
    if not isinstance(body, dict):
        return Problem("We could not parse the JSON body of your request.")
    if not isinstance(body.get("model"), str) or not body["model"]:
        return Problem("you must provide a model parameter")
    messages = body.get("messages")
    if not isinstance(messages, list):
        return Problem("Missing required parameter: 'messages'.", "messages")
    if not messages:
        return Problem("[] is too short - 'messages'", "messages", "empty_array")
    problem = _openai_tools(body.get("tools"))
    if problem is not None:
        return problem
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in ("minimal", "low", "medium", "high"):
        return Problem(
            f"Invalid value: {effort!r}. Supported values are: 'minimal', 'low', 'medium', "
            "and 'high'.",
            "reasoning_effort",
            "invalid_value",
        )
    for i, message in enumerate(messages):
        if isinstance(message, dict) and "reasoning_content" in message:
            return Problem(
                "The reasoning_content is an intermediate result for display purposes only "
                "and will not be included in the context for inference. Please remove the "
                "reasoning_content from your message to reduce network traffic.",
                f"messages[{i}].reasoning_content",
            )
    owed: list[str] = []  # ids of the last assistant's calls still without a tool message
    answered: set[str] = set()
    open_at = -1  # index of the assistant message whose calls are being answered
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in _OPENAI_ROLES:
            return Problem(
                f"Invalid value: {role!r}. Supported values are: 'system', 'assistant', "
                "'user', 'function', 'tool', and 'developer'.",
                f"messages[{i}].role",
                "invalid_value",
            )
        assert isinstance(message, dict)
        if role != "tool" and owed:
            return Problem(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not "
                f"have response messages: {', '.join(owed)}",
                f"messages.[{i}].role",
            )
        if role == "tool":
            call_id = message.get("tool_call_id")
            if open_at < 0:
                return Problem(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    f"messages.[{i}].role",
                )
            if not isinstance(call_id, str) or call_id not in owed:
                why = "was already answered" if call_id in answered else "not found in"
                return Problem(
                    f"Invalid parameter: 'tool_call_id' of {call_id!r} {why} 'tool_calls' "
                    "of previous message.",
                    f"messages.[{i}].tool_call_id",
                )
            if not isinstance(message.get("content"), str | list):
                return Problem(
                    f"Missing required parameter: 'messages.[{i}].content'.",
                    f"messages.[{i}].content",
                    "missing_required_parameter",
                )
            owed.remove(call_id)
            answered.add(call_id)
            continue
        open_at = -1
        if role == "assistant":
            ids, problem = _openai_calls(i, message)
            if problem is not None:
                return problem
            if message.get("content") is None and not ids:
                return Problem(
                    "Invalid value for 'content': expected a string, got null.",
                    f"messages.[{i}].content",
                )
            if ids:
                owed, answered, open_at = list(ids), set(), i
        elif not isinstance(message.get("content"), str | list):
            return Problem(
                f"Missing required parameter: 'messages[{i}].content'.",
                f"messages[{i}].content",
                "missing_required_parameter",
            )
    if owed:
        return Problem(
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not "
            f"have response messages: {', '.join(owed)}",
            f"messages.[{open_at}].role",
        )
    return None


# --- Anthropic Messages ----------------------------------------------------------------


def _blocks(content: Any) -> list[dict[str, Any]] | None:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and all(isinstance(b, dict) for b in content):
        return content
    return None


def _cache_marks(body: dict[str, Any]) -> int:
    system = body.get("system")
    count = sum(1 for b in system if "cache_control" in b) if isinstance(system, list) else 0
    for message in body.get("messages") or []:
        blocks = _blocks(message.get("content")) if isinstance(message, dict) else None
        count += sum(1 for b in blocks or [] if "cache_control" in b)
    return count


def _anthropic_tools(tools: Any) -> Problem | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return Problem("tools: Input should be a valid list")
    for i, tool in enumerate(tools):
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            pattern = "^[a-zA-Z0-9_-]{1,64}$"
            return Problem(f"tools.{i}.custom.name: String should match pattern '{pattern}'")
        if not isinstance(tool.get("input_schema"), dict):
            return Problem(f"tools.{i}.custom.input_schema: Field required")
    return None


def _anthropic_message(
    i: int, message: Any, last: bool, owed: list[str], seen: set[str]
) -> tuple[list[str], Problem | None]:
    """Check message ``i``; returns the tool_use ids it leaves owed."""
    role = message.get("role") if isinstance(message, dict) else None
    if role not in ("user", "assistant"):
        return [], Problem(f"messages.{i}.role: Input should be 'user' or 'assistant'")
    blocks = _blocks(message.get("content"))
    if blocks is None:
        return [], Problem(f"messages.{i}.content: Input should be a valid list")
    if not blocks and not (last and role == "assistant"):
        return [], Problem(
            f"messages.{i}: all messages must have non-empty content except for the "
            "optional final assistant message"
        )
    results: list[str] = []
    for j, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "text" and not block.get("text"):
            where = f"messages.{i}.content.{j}.text"
            return [], Problem(f"{where}: text content blocks must be non-empty")
        if kind == "tool_result":
            if role != "user":
                return [], Problem(
                    f"messages.{i}.content.{j}: `tool_result` blocks are only allowed in "
                    "user messages"
                )
            if j != len(results):
                return [], Problem(
                    f"messages.{i}.content.{j}: `tool_result` blocks must come first in the "
                    "content of a user message, before any other block"
                )
            results.append(str(block.get("tool_use_id")))
        elif kind == "tool_use":
            if role != "assistant":
                return [], Problem(
                    f"messages.{i}.content.{j}: `tool_use` blocks are only allowed in "
                    "assistant messages"
                )
            ident = block.get("id")
            if not isinstance(ident, str) or not ident:
                return [], Problem(f"messages.{i}.content.{j}.tool_use.id: Field required")
            if ident in seen:
                return [], Problem(f"messages.{i}.content.{j}: `tool_use` ids must be unique")
            seen.add(ident)
    unexpected = [r for r in results if r not in owed]
    if unexpected or len(set(results)) != len(results):
        extra = unexpected or [r for r in results if results.count(r) > 1][:1]
        return [], Problem(
            f"messages.{i}.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
            f"{', '.join(extra)}. Each `tool_result` block must have a corresponding "
            "`tool_use` block in the previous message."
        )
    missing = [o for o in owed if o not in results]
    if missing:
        return [], Problem(
            f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks "
            f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
            "corresponding `tool_result` block in the next message."
        )
    return [str(b["id"]) for b in blocks if b.get("type") == "tool_use"], None


def _anthropic_thinking(body: dict[str, Any]) -> Problem | None:
    thinking = body.get("thinking")
    messages = body["messages"]
    for i, message in enumerate(messages):
        for j, block in enumerate(_blocks(message.get("content")) or []):
            kind = block.get("type")
            if kind == "thinking" and not isinstance(block.get("signature"), str):
                return Problem(f"messages.{i}.content.{j}.thinking.signature: Field required")
            if kind == "thinking" and not block["signature"]:
                return Problem(f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")
    if thinking is None or thinking.get("type") == "disabled":
        return None
    budget = thinking.get("budget_tokens")
    if thinking.get("type") != "enabled" or not isinstance(budget, int):
        return Problem("thinking: Input tag does not match any of the expected tags")
    if budget < 1024:
        return Problem(
            "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        )
    if budget >= body["max_tokens"]:
        return Problem("`max_tokens` must be greater than `thinking.budget_tokens`.")
    if body.get("temperature", 1) != 1:
        return Problem("`temperature` may only be set to 1 when thinking is enabled.")
    if "top_k" in body:
        return Problem("`top_k` is not supported when thinking is enabled.")
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") not in (None, "auto", "none"):
        return Problem("Thinking may not be enabled when tool_choice forces tool use.")
    last = _blocks(messages[-1].get("content")) or []
    if len(messages) >= 2 and any(b.get("type") == "tool_result" for b in last):
        first = (_blocks(messages[-2].get("content")) or [{}])[0]
        if first.get("type") not in ("thinking", "redacted_thinking"):
            return Problem(
                f"messages.{len(messages) - 2}.content.0.type: Expected `thinking` or "
                f"`redacted_thinking`, but found `{first.get('type')}`. When `thinking` is "
                "enabled, a final `assistant` message must start with a thinking block "
                "(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
                "recommend you include thinking blocks from previous turns. To avoid this "
                "requirement, disable `thinking`."
            )
    return None


def anthropic_problem(body: Any) -> Problem | None:
    """Why Anthropic's Messages API would refuse ``body``, or None."""
    if not isinstance(body, dict):
        return Problem("There was an issue with the formatting of the request body.")
    for field in ("model", "max_tokens"):
        if field not in body:
            return Problem(f"{field}: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list):
        return Problem("messages: Field required")
    if not messages:
        return Problem("messages: at least one message is required")
    problem = _anthropic_tools(body.get("tools"))
    if problem is not None:
        return problem
    marks = _cache_marks(body)
    if marks > 4:
        return Problem(f"A maximum of 4 blocks with cache_control may be provided. Found {marks}.")
    owed: list[str] = []
    seen: set[str] = set()
    previous = None
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if i == 0 and role != "user":
            return Problem('messages: first message must use the "user" role')
        if role == previous:
            return Problem(
                'messages: roles must alternate between "user" and "assistant", but found '
                f'multiple "{role}" roles in a row'
            )
        owed, problem = _anthropic_message(i, message, i == len(messages) - 1, owed, seen)
        if problem is not None:
            return problem
        previous = role
    if owed:
        return Problem(
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` "
            f"blocks immediately after: {', '.join(owed)}. Each `tool_use` block must have "
            "a corresponding `tool_result` block in the next message."
        )
    return _anthropic_thinking(body)
