"""What an agent session is opened with: :class:`AgentOptions`, and the settings
the environment adds to it.

Every mode builds one (the CLI from its flags, the RPC server, embedders) and
hands it to :func:`~agent._host.open_agent`; the provider factory reads it too, so
it stands below both. The ``CORRAL_*`` variables that add to an option are read
here, when a session opens: ``CORRAL_BASH_NETWORK`` (``bash_network``),
``CORRAL_PROTECT`` (``protect``) and ``CORRAL_MCP_ALLOW`` (``mcp_allow``).
"""

from __future__ import annotations

import os
import re

import msgspec

from sandbox import PermissionsError, check_network

from ._exceptions import AgentError
from ._providers.base import ProviderSettings, ReasoningLevel
from ._tools.web.config import WebConfig

__all__ = ["AgentOptions", "bash_network", "mcp_allowances", "protected_paths"]


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
    #: Paths the agent's ``bash``, ``write`` and ``edit`` never change, besides the
    #: defaults (corral's installation, ``.corral``, git's hooks and configuration):
    #: relative to ``cwd`` (or absolute, or ``~/...``), a trailing ``/`` for a
    #: directory, e.g. ``[".envrc", ".vscode/"]``. None reads ``CORRAL_PROTECT``
    #: (separated by ``:``).
    protect: list[str] | None = None
    #: Destinations the ``bash`` tool's commands may reach through corral's egress
    #: proxy (entries as in ``permissions.network``), added to those of
    #: ``CORRAL_BASH_NETWORK``; none by default.
    bash_network: list[str] = []
    #: The session shows extension panels (``ext_panel_*`` events, keys sent back):
    #: chat on a terminal, RPC and the in-process API do; ``corral run`` and a chat
    #: reading a pipe do not, and an extension's ``open_panel`` then fails with
    #: "panel unsupported here" (the extension gets ``panel_close``).
    panels: bool = True

    # -- reasoning -----------------------------------------------------------------------
    #: How hard the model may think (``--reasoning``): ``off``, ``low``, ``medium`` or
    #: ``high``, mapped to each provider's control and refused for a model that cannot
    #: reason; None sends no reasoning control (the provider's default).
    reasoning: ReasoningLevel | None = None


def bash_network(options: AgentOptions) -> list[str]:
    """The ``bash`` tool's destinations, checked (the user's own: local ones too).

    Raises:
        AgentError: an entry is malformed (the setting named).
    """
    env = [e for e in re.split(r"[,\s]+", os.environ.get("CORRAL_BASH_NETWORK", "")) if e]
    entries = [*env, *options.bash_network]
    try:
        network, _ = check_network(entries, entries, "--bash-network / CORRAL_BASH_NETWORK")
    except PermissionsError as exc:
        raise AgentError(str(exc)) from None
    return network if isinstance(network, list) else []


def protected_paths(options: AgentOptions) -> list[str]:
    """The paths ``bash``, ``write`` and ``edit`` never change, besides the defaults:
    ``options.protect``, or else ``CORRAL_PROTECT``."""
    if options.protect is not None:
        return list(options.protect)
    return [p for p in os.environ.get("CORRAL_PROTECT", "").split(os.pathsep) if p.strip()]


def mcp_allowances(options: AgentOptions) -> list[str]:
    """Exceptions to the MCP network guard: ``CORRAL_MCP_ALLOW``'s, then ``options.mcp_allow``."""
    env = [e for e in re.split(r"[,\s]+", os.environ.get("CORRAL_MCP_ALLOW", "")) if e]
    return [*env, *options.mcp_allow]
