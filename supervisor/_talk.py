"""Kinds of supervised child: what each speaks over stdio, chosen by the manifest's ``kind``.

Every kind shares the owner task (:mod:`supervisor._extension`), the lifecycle, the
incarnation (spawn, serve, the shutdown ladder, reaping), restart and quarantine,
trust, the sandbox and the environment allowlist. What differs is one
:class:`~supervisor._seams.Talk`: a :class:`~supervisor._seams.Conversation` that also turns the
owner's requests into lines. Adding a kind is one protocol module implementing
:class:`Talk` and one entry in :func:`open_talk`.

==============  ===============================  ===================================
kind            module                           speaks
==============  ===============================  ===================================
``extension``   :mod:`supervisor._protocol`      seed extensions-phase4 (``hello``...)
``tool-host``   :mod:`supervisor._toolhost`      seed tool-host-protocol v1
``mcp-server``  :mod:`supervisor._relay`         MCP (JSON-RPC), relayed to the agent
==============  ===============================  ===================================

Each kind also has a session: what outlives one incarnation of a child (a tool
host's state, a relayed child's incarnations for its client).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ._api import EgressRefused, SupervisorEvent
from ._calls import PendingCalls
from ._config import HostInfo, SupervisorConfig, data_path, ui_file
from ._hoststate import HostSession
from ._manifest import ChildKind, ExtensionSpec
from ._netguard import NetGuard
from ._protocol import ExtensionProtocol
from ._protocol import Owner as ExtensionOwner
from ._relay import Relay, RelayProtocol
from ._seams import Pipe, Talk
from ._toolhost import Owner as HostOwner
from ._toolhost import ToolHostProtocol

if TYPE_CHECKING:
    from ._extension import Extension

__all__ = ["Host", "Session", "Talk", "new_session", "open_talk"]

#: What outlives an incarnation, by kind.
Session = HostSession | Relay


class Owner(ExtensionOwner, HostOwner, Protocol):
    """What every kind's protocol needs of its owner."""

    @property
    def spec(self) -> ExtensionSpec: ...


class Host(Protocol):
    """What a supervised child (its owner task and its protocol) needs of the supervisor."""

    def host_info(self) -> HostInfo:
        """What ``hello_ack`` reports and ``get_tags`` is asked about (provider, model, cwd)."""
        ...

    def publish(self, event: SupervisorEvent) -> None:
        """Send an event to every subscriber (never blocks)."""
        ...

    def extension_changed(self, ext: Extension) -> None:
        """``ext`` became ready, changed its registrations, or left the registry."""
        ...

    def trust_problem(self, spec: ExtensionSpec) -> str | None:
        """Why ``spec`` may not start now (None: it may). Blocking: reads the disk."""
        ...

    def net_guard(self) -> NetGuard:
        """The network guard of the egress proxies of children with a network list."""
        ...

    async def egress_refused(self, event: EgressRefused) -> None:
        """A child's egress proxy refused a connection: publish it, and report it to the
        host's egress report (the audit log)."""
        ...


def new_session(kind: ChildKind) -> Session:
    """A new run's session for a child of ``kind``."""
    return Relay() if kind is ChildKind.MCP_SERVER else HostSession()


def open_talk(
    owner: Owner,
    pipe: Pipe,
    calls: PendingCalls,
    config: SupervisorConfig,
    host: Host,
    session: Session,
    sandboxed: bool,
) -> Talk:
    """The protocol for one incarnation of ``owner``, by its manifest's kind."""
    spec = owner.spec
    match spec.kind:
        case ChildKind.EXTENSION:
            # hello_ack tells it where it lives and where to persist (the seed's
            # reference sends both; data_dir only when it has one).
            data = spec.manifest.permissions.data_dir
            return ExtensionProtocol(
                owner,
                pipe,
                calls=calls,
                config=config,
                host=host,
                extension_dir=spec.dir,
                data_dir=data_path(config.home, spec.identity) if data else "",
            )
        case ChildKind.TOOL_HOST:
            assert isinstance(session, HostSession)
            settings: dict[str, Any] = spec.manifest.config
            return ToolHostProtocol(
                owner,
                pipe,
                calls=calls,
                config=config,
                host=host,
                host_config=settings,
                session=session,
                ui_cache=ui_file(config.home, spec.identity),
                pipelined=spec.manifest.runtime is not None,
            )
        case ChildKind.MCP_SERVER:
            assert isinstance(session, Relay)
            return RelayProtocol(
                owner, pipe, calls=calls, config=config, relay=session, sandboxed=sandboxed
            )
