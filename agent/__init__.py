"""corral's agent: the loop, providers, built-in tools, sessions, RPC and the CLI.

Embed a whole session with :func:`open_runtime` (queueing, abort, events as the
RPC wire shows them), or build on :func:`open_agent` for the loop and the
supervisor behind it. ``corral rpc`` serves the same session over NDJSON.
"""

from __future__ import annotations

from ._engine import AgentOptions, Emit, Engine
from ._events import (
    AgentEvent,
    AssistantMessage,
    AssistantStart,
    CompactDone,
    Done,
    ErrorEvent,
    ExtDisplay,
    ExtNotify,
    ExtStatus,
    Retry,
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
from ._exceptions import AgentError, ProviderError, ScriptError, SessionError, ToolError
from ._host import BUILTIN_TOOLS, OPTIONAL_TOOLS, AgentHost, open_agent
from ._loop import AgentBusy, AgentLoop, LoopState
from ._messages import (
    ImageContent,
    InterventionRecord,
    Message,
    TextContent,
    ToolCallContent,
    ToolResultContent,
)
from ._providers.base import (
    ModelInfo,
    ModelRequest,
    Provider,
    ProviderEvent,
    ProviderSettings,
    ToolSpec,
)
from ._providers.factory import PROVIDERS, UnknownProvider, make_provider
from ._providers.offline import OfflineProvider
from ._providers.scripted import ScriptedProvider, ScriptTurn, load_script, parse_script
from ._rpc.server import serve_rpc
from ._runtime import EventStream, Job, JobState, Runtime, RuntimeClosed, RuntimeState, open_runtime
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
    "Engine",
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
    "ProviderSettings",
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
    "load_script",
    "make_provider",
    "open_agent",
    "open_runtime",
    "parse_script",
    "serve_rpc",
]
