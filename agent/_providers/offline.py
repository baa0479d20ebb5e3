"""The ``offline`` provider: a deterministic stand-in for a model. No key, no network.

It reads the last message of the request and answers by fixed rules (documented
in ``docs/agent.md``), checked in this order:

1. A compaction request gets :func:`~agent._transcript.local_summary`.
2. After tool results, it summarises them, one line per call, and stops.
3. ``say "X"`` (also ``repeat``/``echo``, any quotes or a colon) answers exactly X.
4. Tool calls, each only when that tool is offered, in the order they appear:

   * ``call NAME {json}`` / ``use NAME with {json}``: exactly that call;
   * ``run `CMD``` (also ``execute``/``bash``/``shell``): ``bash {"command": CMD}``;
   * ``read PATH`` (also ``show``/``cat``/``open``; PATH has a ``.`` or ``/``): ``read``;
   * ``write `TEXT` to PATH``: ``write {"path", "content"}``;
   * ``replace `OLD` with `NEW` in PATH``: ``edit``;
   * the name of any other tool followed by ``in|for|of|about|on|at|to|with VALUE``:
     that tool with VALUE as its one required argument (a string, or a number when
     the schema says so); ``A and B`` or ``A, B`` make one call each (the loop runs
     them concurrently). A tool without required arguments is called with ``{}``,
     or with VALUE as its only property when it has exactly one.

   Several matches make several calls in one step.
5. A greeting gets a greeting; anything else gets a short plain-text answer that
   says what the offline model can do and which tools it sees.

Asked to reason (``--reasoning low|medium|high``), it first streams a short thought
saying what it is about to do (thinking, never answer text), so the thinking path
can be seen and tested without a model.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import AsyncIterator
from typing import Any

import trio

from .._exchanges import pairing_error
from .._messages import Message, ThinkingContent, ToolCallContent, ToolResultContent, text_of
from .._tools import BUILTIN_TOOLS
from .._transcript import SUMMARY_PREFIX, is_compaction, local_summary
from .base import (
    ModelInfo,
    ModelRequest,
    ProviderEvent,
    ProviderStop,
    ProviderTextDelta,
    ProviderThinkingBlock,
    ProviderThinkingDelta,
    ProviderToolCall,
    ProviderUsage,
    ToolSpec,
)

__all__ = ["OfflineProvider", "plan_reply"]

_BUILTINS = frozenset(BUILTIN_TOOLS)
_MAX_CALLS = 8
_SAY = re.compile(
    r"^\s*(?:please\s+)?(?:say|repeat|echo)\b\s*(?::\s*(.+)|([\"'“`])(.*?)[\"'”`])", re.I | re.S
)
_CALL = re.compile(
    r"\b(?:call|use)\s+(?:the\s+)?`?([A-Za-z_][\w-]*)`?(?:\s+tool)?(?:\s+with)?\s*(?=\{)", re.I
)
_RUN = re.compile(r"\b(?:run|execute|exec|bash|shell)\b[^`\n]{0,20}`([^`]+)`", re.I)
_READ = re.compile(
    r"\b(?:read|show|cat|open)\s+(?:the\s+)?(?:file\s+)?`?([\w~./-]*[./][\w~./-]*)`?", re.I
)
_WRITE = re.compile(
    r"\bwrite\s+`([^`]*)`\s+(?:to|into)\s+(?:the\s+)?(?:file\s+)?`?([\w~./-]+)`?", re.I
)
_EDIT = re.compile(
    r"\b(?:replace|change)\s+`([^`]+)`\s+(?:with|to|by)\s+`([^`]*)`\s+in\s+`?([\w~./-]+)`?",
    re.I,
)
_GREETING = re.compile(r"^\s*(?:hi|hello|hey|greet)\b|\bgreet\b", re.I)
_VALUE_END = re.compile(r"[.?!;\n`]|,?\s+(?:then|and then)\b", re.I)
_SPLIT = re.compile(r"\s*,\s*(?:and\s+)?|\s+and\s+", re.I)


def _chunks(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text)


def _first_string_params(spec: ToolSpec) -> tuple[list[str], dict[str, str]]:
    props = spec.schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = spec.schema.get("required")
    names = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
    types = {
        name: str(p.get("type", "string")) if isinstance(p, dict) else "string"
        for name, p in props.items()
    }
    return names, types


def _values_after(text: str, start: int) -> list[str]:
    rest = text[start:]
    match = re.match(r"\s+(?:in|for|of|about|on|at|to|with)\s+(.+)", rest, re.I | re.S)
    if not match:
        return []
    raw = match.group(1)
    quoted = re.match(r"[\"'“`]([^\"'”`]+)[\"'”`]", raw)
    if quoted:
        return [quoted.group(1).strip()]
    end = _VALUE_END.search(raw)
    raw = raw[: end.start()] if end else raw
    values = [v.strip().strip("\"'`") for v in _SPLIT.split(raw)]
    return [v for v in values if v][:4]


def _generic_calls(text: str, spec: ToolSpec) -> list[tuple[int, dict[str, Any]]]:
    required, types = _first_string_params(spec)
    calls: list[tuple[int, dict[str, Any]]] = []
    for match in re.finditer(rf"\b{re.escape(spec.name)}\b", text, re.I):
        values = _values_after(text, match.end())
        if not required:
            # No required argument: fill a lone optional one when a value is given.
            if len(types) == 1 and values:
                calls += [(match.start(), {next(iter(types)): v}) for v in values]
            else:
                calls.append((match.start(), {}))
            break
        if len(required) != 1:
            continue
        param = required[0]
        for value in values:
            kind = types.get(param, "string")
            if kind in ("integer", "number"):
                try:
                    number: Any = int(value) if kind == "integer" else float(value)
                except ValueError:
                    continue
                calls.append((match.start(), {param: number}))
            else:
                calls.append((match.start(), {param: value}))
        if calls:
            break
    return calls


def _explicit_calls(text: str, names: set[str]) -> list[tuple[int, str, dict[str, Any]]]:
    found: list[tuple[int, str, dict[str, Any]]] = []
    decoder = json.JSONDecoder()
    for match in _CALL.finditer(text):
        if match.group(1) not in names:
            continue
        try:
            args, _ = decoder.raw_decode(text, match.end())
        except json.JSONDecodeError:
            continue
        if isinstance(args, dict):
            found.append((match.start(), match.group(1), args))
    return found


def plan_tool_calls(text: str, tools: list[ToolSpec]) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the offline model makes for a user ``text`` (rule 4)."""
    names = {t.name for t in tools}
    found: list[tuple[int, str, dict[str, Any]]] = _explicit_calls(text, names)
    explicit = {name for _, name, _ in found}
    if "bash" in names and "bash" not in explicit:
        found += [(m.start(), "bash", {"command": m.group(1)}) for m in _RUN.finditer(text)]
    if "write" in names and "write" not in explicit:
        found += [
            (m.start(), "write", {"path": m.group(2), "content": m.group(1)})
            for m in _WRITE.finditer(text)
        ]
    if "edit" in names and "edit" not in explicit:
        for m in _EDIT.finditer(text):
            edit_args = {"path": m.group(3), "old_text": m.group(1), "new_text": m.group(2)}
            found.append((m.start(), "edit", edit_args))
    if "read" in names and "read" not in explicit:
        taken = {args.get("path") for _, name, args in found if name in ("write", "edit")}
        found += [
            (m.start(), "read", {"path": m.group(1)})
            for m in _READ.finditer(text)
            if m.group(1) not in taken
        ]
    for spec in tools:
        if spec.name in _BUILTINS or spec.name in explicit:
            continue
        found += [(pos, spec.name, args) for pos, args in _generic_calls(text, spec)]
    found.sort(key=lambda item: item[0])
    return [(name, args) for _, name, args in found[:_MAX_CALLS]]


def _summarise_results(messages: list[Message]) -> str:
    results = messages[-1]
    names: dict[str, str] = {}
    for message in reversed(messages[:-1]):
        if message.role == "assistant":
            names = {b.id: b.name for b in message.content if isinstance(b, ToolCallContent)}
            break
    lines: list[str] = []
    failed = 0
    for block in results.content:
        if not isinstance(block, ToolResultContent):
            continue
        body = " ".join(t.text for t in block.content if hasattr(t, "text")).strip()
        body = body if len(body) <= 400 else body[:399] + "…"
        name = names.get(block.call_id, "tool")
        if block.is_error:
            failed += 1
            lines.append(f"- `{name}` failed: {body or '(no details)'}")
        else:
            lines.append(f"- `{name}`: {body or '(no output)'}")
    if failed == len(lines):
        head = "The tool call failed." if failed == 1 else "The tool calls failed."
    elif failed:
        head = f"{len(lines) - failed} of {len(lines)} tool calls succeeded."
    else:
        head = "Here is what I found."
    return head + "\n" + "\n".join(lines)


def _plain_answer(text: str, tools: list[ToolSpec]) -> str:
    names = ", ".join(f"`{t.name}`" for t in tools) or "none"
    if _GREETING.search(text):
        return f"Hello! 👋 I'm corral's offline model. Tools I can call: {names}."
    quoted = " ".join(text.split())
    quoted = quoted if len(quoted) <= 80 else quoted[:79] + "…"
    return (
        f'(offline model) You said: "{quoted}". I answer by simple rules: name a tool '
        f'with its argument (e.g. "weather in Berlin"), say run `ls`, read FILE, or '
        f'say "text". Tools I can call: {names}.'
    )


def plan_reply(request: ModelRequest) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """The offline model's answer to ``request``: text and tool calls (name, args)."""
    if is_compaction(request):
        return local_summary(request.messages), []
    if not request.messages:
        return _plain_answer("", request.tools), []
    last = request.messages[-1]
    if last.role == "tool":
        return _summarise_results(request.messages), []
    text = text_of(last)
    if text.startswith(SUMMARY_PREFIX):
        return "I have the summary of our conversation. What next?", []
    said = _SAY.match(text)
    if said:
        return (said.group(1) if said.group(1) is not None else said.group(3)).strip(), []
    calls = plan_tool_calls(text, request.tools)
    if calls:
        listed = ", ".join(dict.fromkeys(f"`{name}`" for name, _ in calls))
        return f"Let me use {listed}.", calls
    return _plain_answer(text, request.tools), []


def thought(request: ModelRequest, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """What the offline model thinks before its answer ("" when not asked to reason)."""
    if request.reasoning in (None, "off") or is_compaction(request) or not request.messages:
        return ""
    if request.messages[-1].role == "tool":
        plan = "The tool results are in; I will sum them up, one line per call."
    elif calls:
        names = ", ".join(dict.fromkeys(name for name, _ in calls))
        plan = f"The request needs a tool; I will call {names}."
    else:
        plan = "Nothing here needs a tool; I will answer directly."
    offered = ", ".join(t.name for t in request.tools) or "none"
    return f"{plan} Tools offered: {offered}."


@typing.final
class OfflineProvider:
    """Deterministic rule-based model (see the module docstring for the rules)."""

    def __init__(self, model: str | None = None) -> None:
        self._model = model or "offline"
        self._calls = 0

    def __repr__(self) -> str:
        return f"<OfflineProvider model={self._model!r} calls={self._calls}>"

    @property
    def name(self) -> str:
        """``"offline"``."""
        return "offline"

    def models(self) -> list[ModelInfo]:
        """The offline model."""
        return [
            ModelInfo(
                id="offline",
                provider="offline",
                context_window=1_000_000,
                max_output=8192,
                reasoning=True,
            )
        ]

    def reasoning_support(self, model: str) -> bool:
        """True: it thinks out loud when asked (a short thought before its answer)."""
        return True

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Answer ``request`` by the rules, streaming the text word by word.

        Raises:
            ProviderError: as the real APIs do (status 400), the request holds a tool
                call without exactly one result after it.

        Cancellation: stops at once.
        """
        refused = pairing_error("offline", request.messages)
        if refused is not None:
            raise refused
        self._calls += 1
        text, calls = plan_reply(request)
        thinking = thought(request, calls)
        for piece in _chunks(thinking):
            yield ProviderThinkingDelta(text=piece)
            await trio.lowlevel.checkpoint()
        if thinking:
            yield ProviderThinkingBlock(block=ThinkingContent(text=thinking))
        for piece in _chunks(text):
            yield ProviderTextDelta(text=piece)
            await trio.lowlevel.checkpoint()
        for index, (name, args) in enumerate(calls):
            yield ProviderToolCall(id=f"off_{self._calls}_{index}", name=name, args=args)
        prompt_chars = sum(len(text_of(m)) for m in request.messages[-4:])
        yield ProviderUsage(input=prompt_chars // 4 + 1, output=len(text) // 4 + 1)
        yield ProviderStop(reason="tool_use" if calls else "end_turn")

    async def prepare(self) -> None:
        """Nothing to check: no key, no server.

        Cancellation: returns at once.
        """

    async def aclose(self) -> None:
        """Nothing to release.

        Cancellation: returns at once.
        """
