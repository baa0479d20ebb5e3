"""corral's agent: the loop, providers, built-in tools, sessions, RPC and the CLI.

Embed a whole session with :func:`open_runtime` (queueing, abort, events as the
RPC wire shows them), or build on :func:`open_agent` for the loop and the
supervisor behind it. ``corral rpc`` serves the same session over NDJSON.
:mod:`agent.batch` runs many sessions at once (``corral batch``).

The names are imported on first use (PEP 562), so that ``import agent`` (and every
``corral`` command, which imports ``agent._cli``) costs only what it uses.
"""

from __future__ import annotations

import typing

from ._lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:
    from . import batch
    from ._events import (
        AgentEvent,
        AssistantMessage,
        AssistantStart,
        CompactDone,
        Done,
        Emit,
        ErrorEvent,
        ExtDisplay,
        ExtNotify,
        ExtPanelClose,
        ExtPanelOpen,
        ExtPanelRender,
        ExtStatus,
        Retry,
        TextDelta,
        ThinkingDelta,
        ToolCallEvent,
        ToolProgress,
        ToolResultEvent,
        TurnEnd,
        TurnStart,
        Usage,
        UsageTotals,
        UserMessage,
    )
    from ._exceptions import (
        AgentBusy,
        AgentError,
        ProviderError,
        ReasoningRefused,
        RuntimeClosed,
        ScriptError,
        SessionError,
        ToolError,
        UnknownProvider,
    )
    from ._host import AgentHost, open_agent
    from ._jobs import EventStream, Job, JobState
    from ._loop import AgentLoop, LoopState
    from ._messages import (
        ImageContent,
        InterventionRecord,
        Message,
        TextContent,
        ThinkingContent,
        ToolCallContent,
        ToolResultContent,
    )
    from ._options import AgentOptions
    from ._providers.base import (
        ModelInfo,
        ModelRequest,
        Provider,
        ProviderEvent,
        ProviderSettings,
        ToolSpec,
    )
    from ._providers.factory import PROVIDERS, make_provider
    from ._providers.offline import OfflineProvider
    from ._providers.scripted import ScriptedProvider, ScriptTurn, load_script, parse_script
    from ._rpc.server import serve_rpc
    from ._runtime import Runtime, RuntimeState, open_runtime
    from ._tools.selection import BUILTIN_TOOLS, OPTIONAL_TOOLS
    from ._tools.web import WebConfig

__all__ = [
    "BUILTIN_TOOLS",
    "OPTIONAL_TOOLS",
    "PROVIDERS",
    "AgentBusy",
    "AgentError",
    "AgentEvent",
    "AgentHost",
    "AgentLoop",
    "AgentOptions",
    "AssistantMessage",
    "AssistantStart",
    "CompactDone",
    "Done",
    "Emit",
    "ErrorEvent",
    "EventStream",
    "ExtDisplay",
    "ExtNotify",
    "ExtPanelClose",
    "ExtPanelOpen",
    "ExtPanelRender",
    "ExtStatus",
    "ImageContent",
    "InterventionRecord",
    "Job",
    "JobState",
    "LoopState",
    "Message",
    "ModelInfo",
    "ModelRequest",
    "OfflineProvider",
    "Provider",
    "ProviderError",
    "ProviderEvent",
    "ProviderSettings",
    "ReasoningRefused",
    "Retry",
    "Runtime",
    "RuntimeClosed",
    "RuntimeState",
    "ScriptError",
    "ScriptTurn",
    "ScriptedProvider",
    "SessionError",
    "TextContent",
    "TextDelta",
    "ThinkingContent",
    "ThinkingDelta",
    "ToolCallContent",
    "ToolCallEvent",
    "ToolError",
    "ToolProgress",
    "ToolResultContent",
    "ToolResultEvent",
    "ToolSpec",
    "TurnEnd",
    "TurnStart",
    "UnknownProvider",
    "Usage",
    "UsageTotals",
    "UserMessage",
    "WebConfig",
    "batch",
    "load_script",
    "make_provider",
    "open_agent",
    "open_runtime",
    "parse_script",
    "serve_rpc",
]

#: Where each public name lives.
_WHERE: dict[str, str] = {
    "WebConfig": "._tools.web",
    "Retry": "._events",
    "ProviderSettings": "._providers.base",
    "InterventionRecord": "._messages",
    "OPTIONAL_TOOLS": "._tools.selection",
    "AgentBusy": "._exceptions",
    "AgentError": "._exceptions",
    "AgentEvent": "._events",
    "AgentHost": "._host",
    "AgentLoop": "._loop",
    "AgentOptions": "._options",
    "AssistantMessage": "._events",
    "AssistantStart": "._events",
    "BUILTIN_TOOLS": "._tools.selection",
    "CompactDone": "._events",
    "Done": "._events",
    "Emit": "._events",
    "ErrorEvent": "._events",
    "EventStream": "._jobs",
    "ExtDisplay": "._events",
    "ExtNotify": "._events",
    "ExtPanelClose": "._events",
    "ExtPanelOpen": "._events",
    "ExtPanelRender": "._events",
    "ExtStatus": "._events",
    "ImageContent": "._messages",
    "Job": "._jobs",
    "JobState": "._jobs",
    "LoopState": "._loop",
    "Message": "._messages",
    "ModelInfo": "._providers.base",
    "ModelRequest": "._providers.base",
    "OfflineProvider": "._providers.offline",
    "PROVIDERS": "._providers.factory",
    "Provider": "._providers.base",
    "ProviderError": "._exceptions",
    "ProviderEvent": "._providers.base",
    "Runtime": "._runtime",
    "RuntimeClosed": "._exceptions",
    "RuntimeState": "._runtime",
    "ScriptError": "._exceptions",
    "ScriptTurn": "._providers.scripted",
    "ScriptedProvider": "._providers.scripted",
    "SessionError": "._exceptions",
    "TextContent": "._messages",
    "TextDelta": "._events",
    "ThinkingDelta": "._events",
    "ThinkingContent": "._messages",
    "ReasoningRefused": "._exceptions",
    "ToolCallContent": "._messages",
    "ToolCallEvent": "._events",
    "ToolError": "._exceptions",
    "ToolProgress": "._events",
    "ToolResultContent": "._messages",
    "ToolResultEvent": "._events",
    "ToolSpec": "._providers.base",
    "TurnEnd": "._events",
    "TurnStart": "._events",
    "UnknownProvider": "._exceptions",
    "Usage": "._events",
    "UsageTotals": "._events",
    "UserMessage": "._events",
    "load_script": "._providers.scripted",
    "make_provider": "._providers.factory",
    "open_agent": "._host",
    "open_runtime": "._runtime",
    "parse_script": "._providers.scripted",
    "serve_rpc": "._rpc.server",
    "batch": ".batch",
}


__getattr__, __dir__ = _lazy_exports(__name__, _WHERE, globals(), __all__)
