"""corral's agent: the loop, providers, built-in tools, sessions, RPC and the CLI.

Embed a whole session with :func:`open_runtime` (queueing, abort, events as the
RPC wire shows them), or build on :func:`open_agent` for the loop and the
supervisor behind it. ``corral rpc`` serves the same session over NDJSON.
"""

from __future__ import annotations

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
    ExtStatus,
    TextDelta,
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
    RuntimeClosed,
    ScriptError,
    SessionError,
    ToolError,
    UnknownProvider,
)
from ._host import BUILTIN_TOOLS, AgentHost, AgentOptions, open_agent
from ._loop import AgentLoop, LoopState
from ._messages import (
    ImageContent,
    InterventionRecord,
    Message,
    TextContent,
    ToolCallContent,
    ToolResultContent,
)
from ._providers.base import ModelInfo, ModelRequest, Provider, ProviderEvent, ToolSpec
from ._providers.factory import PROVIDERS, make_provider
from ._providers.offline import OfflineProvider
from ._providers.scripted import ScriptedProvider, ScriptTurn, load_script, parse_script
from ._rpc.server import serve_rpc
from ._runtime import EventStream, Job, JobState, Runtime, RuntimeState, open_runtime

__all__ = [
    "BUILTIN_TOOLS",
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
    "Runtime",
    "RuntimeClosed",
    "RuntimeState",
    "ScriptError",
    "ScriptTurn",
    "ScriptedProvider",
    "SessionError",
    "TextContent",
    "TextDelta",
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
    "load_script",
    "make_provider",
    "open_agent",
    "open_runtime",
    "parse_script",
    "serve_rpc",
]
