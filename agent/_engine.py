"""The contract between the agent loop and what drives it (CLI, RPC, embedding).

:func:`agent.open_agent` (in ``_host.py``) opens the supervisor, the
provider and the loop for one :class:`AgentOptions` and yields an :class:`Engine`.
The RPC server and the in-process runtime add queueing, abort and ``done`` on top.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import msgspec

from ._events import AgentEvent, UsageTotals
from ._messages import ImageContent, Message
from ._providers.base import ModelInfo, ProviderSettings, ToolSpec
from ._tools.web.config import WebConfig

__all__ = ["AgentOptions", "Emit", "Engine"]

#: Where the loop sends its events; awaiting it applies back-pressure.
Emit = Callable[[AgentEvent], Awaitable[None]]


class AgentOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Everything needed to open an agent session."""

    provider: str = "offline"
    model: str | None = None
    cwd: str = "."
    #: ``--ext`` paths, loaded before project-local and global extensions.
    ext_paths: list[str] = []
    #: Load installed (project-local and global) extensions too.
    discover: bool = True
    sandbox: str = "auto"
    #: corral's home; None means ``$CORRAL_HOME`` or the platform default.
    home: str | None = None
    #: Session name to save to / resume from, or None for no persistence.
    session: str | None = None
    #: Resume the most recently written session of ``cwd`` (``--continue``).
    continue_session: bool = False
    max_steps: int = 16
    system_prompt: str | None = None
    append_system_prompt: str | None = None
    #: JSONL script for the ``scripted`` provider.
    script: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    #: Timeouts, ``max_tokens`` and retries of the model calls.
    provider_settings: ProviderSettings = msgspec.field(default_factory=ProviderSettings)
    #: Start once the other extensions are ready, leaving one that has not said
    #: ``hello`` after this many seconds to join (or fail) on its own; None waits
    #: for every extension (see ``SupervisorConfig.late_after``).
    late_after: float | None = None
    #: Built-in tools to offer: exact names, or ``+name``/``-name`` changes to the
    #: defaults (``["+web"]`` adds ``web_fetch`` and ``web_search``); None: the defaults.
    tools: list[str] | None = None
    #: Settings of the web tools; None reads them from ``CORRAL_*`` variables.
    web: WebConfig | None = None
    #: The dynamic tools' catalog file (``*.json``: the JSON store); None:
    #: ``$CORRAL_HOME/state/dynamic-tools.db``. Dynamic tools are on with ``+dynamic``.
    dynamic_catalog: str | None = None
    #: Start the MCP servers of ``$CORRAL_HOME/mcp.json`` and (trusted) ``./.corral/mcp.json``.
    mcp_servers: bool = True
    #: Exceptions to the MCP network guard (``127.0.0.1:8080``, ``10.0.0.0/8``), added
    #: to those of ``CORRAL_MCP_ALLOW``.
    mcp_allow: list[str] = []


class Engine(Protocol):
    """One agent session: a transcript, a model, tools, and the supervisor behind them."""

    @property
    def provider_name(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def cwd(self) -> str: ...

    async def prompt(self, text: str, images: list[ImageContent], emit: Emit) -> None:
        """Run one prompt to the end of the loop, emitting events (never ``done``).

        Emits ``user_message``, then per step ``turn_start`` … ``turn_end``.
        Provider and tool failures end the step with ``turn_end(stop="error")``; they
        do not raise.

        Cancellation: the running step ends; the loop emits ``turn_end(stop="aborted")``
        (shielded) and re-raises ``Cancelled``. The transcript keeps what completed.
        """
        ...

    async def compact(self, emit: Emit) -> str:
        """Summarise the transcript into one message; returns the summary.

        Cancellation: the transcript is left unchanged.
        """
        ...

    def messages(self) -> list[Message]: ...

    def clear(self) -> None: ...

    def set_model(self, model: str) -> None:
        """Switch model within the provider. Raises ``ValueError`` for an unknown one."""
        ...

    def models(self) -> list[ModelInfo]: ...

    def tools(self) -> list[ToolSpec]: ...

    def usage(self) -> UsageTotals: ...
