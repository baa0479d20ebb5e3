"""The tool registry: built-in tools plus the tools extensions registered.

The registry is rebuilt in place whenever the supervisor's set of extension tools
changes (a reload, a restart, a quarantine) or a :class:`ToolSet` (dynamic tools,
MCP servers) changes its generation: :meth:`ToolRegistry.sync` compares snapshots
and rebuilds only on a difference, so the loop can call it before every model call
at no real cost. Name clashes are won by built-ins, then extension tools, then the
tool sets in the order given (dynamic before MCP); a stale or hostile entry never
shadows a real tool. Every clash is logged. What a tool is, and its kind, is the
contract in :mod:`agent._tools.base`, below both the tools and this registry.

Extension tools (and a tool host's, which the supervisor runs the same way) run
through :meth:`SupervisorClient.call_tool`; their failures (the extension died,
timed out, or does not exist any more) become error results, never exceptions.
Their results are checked here, where they enter the transcript: an image that is
not ``image/*``, not valid base64 or too large turns the whole result into an
error naming the extension and the tool. A tool host's streamed parts become
progress (:class:`PartRelay`), and its renderings (a provider-native result, a
display form, a call preview) are passed along.
"""

from __future__ import annotations

import collections
import typing
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import msgspec
import trio

from sandbox.log import get_logger
from supervisor import ChildKind, ImageBlock, SupervisorError, ToolInfo, ToolOutcome

from ._messages import ImageContent, NativeContent, TextContent, image_problem
from ._providers.base import ToolSpec
from ._tools.base import (
    Progress,
    Tool,
    ToolKind,
    ToolRunResult,
    ToolSet,
    error_result,
    source_of,
)

__all__ = ["ExtensionTool", "PartRelay", "ToolCaller", "ToolRegistry"]

log = get_logger(__name__)


class ToolCaller(Protocol):
    """The part of :class:`~supervisor.SupervisorClient` the registry needs."""

    def tools(self) -> list[ToolInfo]: ...

    async def call_tool(
        self,
        name: str,
        args: dict[str, Any],
        *,
        call_id: str = "",
        on_part: Callable[[dict[str, Any]], None] | None = None,
    ) -> ToolOutcome: ...

    async def preview_tool_call(self, name: str, args: dict[str, Any]) -> str | None: ...


_encoder = msgspec.json.Encoder()
#: Parts waiting for progress, at most; past that the oldest are dropped and counted.
_PART_BACKLOG = 64
#: A part's text is cut to this many characters (``part`` keeps the payload whole).
_PART_TEXT_MAX = 1000


@typing.final
class PartRelay:
    """Streamed parts (arriving in a task that may not block) relayed to :data:`Progress`.

    :meth:`put` queues a ``{"part": payload}`` chunk at once; :meth:`run` sends them
    in order until :meth:`close`, and what is left then. A host that streams faster
    than progress is read loses its oldest parts (counted in a ``[… N more parts]``
    line), never memory.
    """

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._waiting: collections.deque[Any] = collections.deque(maxlen=_PART_BACKLOG)
        self._dropped = 0
        self._wake = trio.Event()
        self._closed = False

    def __repr__(self) -> str:
        return f"<PartRelay waiting={len(self._waiting)} dropped={self._dropped}>"

    def put(self, chunk: dict[str, Any]) -> None:
        """Queue one ``{"part": payload}`` chunk (never blocks)."""
        if len(self._waiting) == self._waiting.maxlen:
            self._dropped += 1
        self._waiting.append(chunk.get("part"))
        self._wake.set()

    def close(self) -> None:
        """No more parts will come: :meth:`run` returns once it sent what is waiting."""
        self._closed = True
        self._wake.set()

    async def run(self) -> None:
        """Send parts as they come, until closed and every part is sent.

        Cancellation: stops; parts still waiting are dropped.
        """
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            await self.flush()
            if self._closed:
                return

    async def flush(self) -> None:
        """Send every waiting part.

        Cancellation: what was not sent is dropped.
        """
        while self._waiting or self._dropped:
            if self._dropped:
                dropped, self._dropped = self._dropped, 0
                await self._progress(f"[… {dropped} more parts]")
                continue
            payload = self._waiting.popleft()
            await self._progress(_part_text(payload), payload)


def _part_text(payload: Any) -> str:
    if isinstance(payload, str):
        text = payload
    else:
        try:
            text = _encoder.encode(payload).decode()
        except (TypeError, ValueError):
            text = repr(payload)
    return text if len(text) <= _PART_TEXT_MAX else text[: _PART_TEXT_MAX - 1] + "…"


def _convert(info: ToolInfo, outcome: ToolOutcome) -> ToolRunResult:
    content: list[TextContent | ImageContent] = []
    for number, block in enumerate(outcome.content, start=1):
        if not isinstance(block, ImageBlock):
            content.append(TextContent(text=block.text))
            continue
        image = ImageContent(mime_type=block.mime_type, data=block.data or None)
        problem = image_problem(image)
        if problem is not None:
            log.warning(
                "extension_tool_bad_block",
                extension=info.extension,
                tool=info.name,
                block=number,
                problem=problem,
            )
            return error_result(
                f"extension {info.extension}, tool {info.name}: content block {number} "
                f"is a bad image ({problem}); the result was dropped"
            )
        content.append(image)
    native = outcome.native
    return ToolRunResult(
        content=content,
        is_error=outcome.is_error,
        native=None
        if native is None
        else NativeContent(format=native.format, content=native.content),
        display=outcome.display,
    )


@typing.final
class ExtensionTool:
    """A tool an extension registered, called through the supervisor."""

    def __init__(self, info: ToolInfo, caller: ToolCaller) -> None:
        self._info = info
        self._caller = caller
        self._spec = ToolSpec(name=info.name, description=info.description, schema=info.schema)
        self._kind = ToolKind.TOOL_HOST if info.kind is ChildKind.TOOL_HOST else ToolKind.EXTENSION

    def __repr__(self) -> str:
        return f"<ExtensionTool {self._info.name!r} extension={self._info.extension!r}>"

    @property
    def spec(self) -> ToolSpec:
        """As registered by the extension."""
        return self._spec

    @property
    def kind(self) -> ToolKind:
        """``TOOL_HOST`` for a tool host's tool, else ``EXTENSION``."""
        return self._kind

    @property
    def owner(self) -> str:
        """The extension's (or tool host's) name."""
        return self._info.extension

    async def run(self, call_id: str, args: dict[str, Any], progress: Progress) -> ToolRunResult:
        """Call the tool in its extension.

        A dead, slow or vanished extension gives an error result naming it. A tool
        host's streamed parts are reported as progress, in order, before the result.

        Cancellation: the call is abandoned; a late result is dropped by the supervisor.
        """
        if self._kind is ToolKind.TOOL_HOST:
            answer = await self._streamed(call_id, args, progress)
        else:
            try:
                answer = await self._caller.call_tool(self._info.name, args, call_id=call_id)
            except SupervisorError as exc:
                answer = exc
        if isinstance(answer, SupervisorError):
            log.info("extension_tool_failed", tool=self._info.name, error=str(answer))
            return error_result(str(answer))
        return _convert(self._info, answer)

    async def _streamed(
        self, call_id: str, args: dict[str, Any], progress: Progress
    ) -> ToolOutcome | SupervisorError:
        """The call, with a task relaying its parts (only tool hosts stream)."""
        relay = PartRelay(progress)
        answer: ToolOutcome | SupervisorError
        async with trio.open_nursery() as nursery:
            nursery.start_soon(relay.run)
            try:
                answer = await self._caller.call_tool(
                    self._info.name, args, call_id=call_id, on_part=relay.put
                )
            except SupervisorError as exc:
                answer = exc
            relay.close()  # every part came before the answer: the relay sends the rest
        return answer

    async def preview(self, args: dict[str, Any]) -> str | None:
        """The tool host's one-line preview of a call with ``args`` (None: none).

        Only a tool host makes previews: an extension's tool answers None here,
        without a round trip to the supervisor.

        Cancellation: the preview is dropped.
        """
        if self._info.kind is not ChildKind.TOOL_HOST:
            return None
        return await self._caller.preview_tool_call(self._info.name, args)


@typing.final
class ToolRegistry:
    """Built-in tools, then extension tools in the supervisor's order, then the tool sets."""

    def __init__(
        self,
        builtins: Sequence[Tool],
        caller: ToolCaller | None = None,
        sets: Sequence[ToolSet] = (),
    ) -> None:
        self._builtins = list(builtins)
        self._caller = caller
        self._sets = list(sets)
        self._tools: dict[str, Tool] = {t.spec.name: t for t in self._builtins}
        self._ext_snapshot: list[ToolInfo] = []
        self._generations = [-1] * len(self._sets)
        self._specs = [t.spec for t in self._tools.values()]
        self.generation = 0
        self._clashes: set[tuple[str, str]] = set()

    def __repr__(self) -> str:
        return f"<ToolRegistry tools={len(self._tools)} generation={self.generation}>"

    def sync(self, ext_tools: list[ToolInfo] | None = None) -> bool:
        """Rebuild from the extension tools (``caller.tools()`` when None) and the tool sets.

        Only when something changed.

        Returns:
            True when the registry was rebuilt.
        """
        if ext_tools is None:
            ext_tools = self._caller.tools() if self._caller is not None else []
        generations = [s.generation for s in self._sets]
        if ext_tools == self._ext_snapshot and generations == self._generations:
            return False
        tools: dict[str, Tool] = {t.spec.name: t for t in self._builtins}

        def add(tool: Tool) -> None:
            name = tool.spec.name
            if name in tools:
                clash = (name, source_of(tool.kind, tool.owner))
                if clash not in self._clashes:  # once, not at every rebuild
                    self._clashes.add(clash)
                    kept = source_of(tools[name].kind, tools[name].owner)
                    log.warning("tool_name_clash", tool=name, source=clash[1], kept=kept)
                return
            tools[name] = tool

        if self._caller is not None:
            for info in ext_tools:
                add(ExtensionTool(info, self._caller))
        for tool_set in self._sets:
            for tool in tool_set.tools():
                add(tool)
        self._tools = tools
        self._specs = [t.spec for t in tools.values()]
        self._ext_snapshot = list(ext_tools)
        self._generations = generations
        self.generation += 1
        log.debug("tool_registry_rebuilt", tools=list(tools), generation=self.generation)
        return True

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, if any."""
        return self._tools.get(name)

    async def preview(self, name: str, args: dict[str, Any]) -> str | None:
        """A tool host's one-line preview of a call of ``name`` (None: render your own).

        Cancellation: the preview is dropped.
        """
        tool = self._tools.get(name)
        return await tool.preview(args) if isinstance(tool, ExtensionTool) else None

    def specs(self) -> list[ToolSpec]:
        """What the model is offered, in order (a copy)."""
        return list(self._specs)

    def sources(self) -> dict[str, str]:
        """Tool name to ``"builtin"``, extension name, ``"dynamic"`` or ``"mcp:<server>"``
        (see :func:`~agent._tools.base.source_of`)."""
        return {name: source_of(tool.kind, tool.owner) for name, tool in self._tools.items()}

    def kinds(self) -> dict[str, ToolKind]:
        """Tool name to its :class:`~agent._tools.base.ToolKind`."""
        return {name: tool.kind for name, tool in self._tools.items()}

    def names(self) -> list[str]:
        """Tool names, in order."""
        return list(self._tools)
