"""The tools of one session, set up around the supervisor's start.

:func:`~agent._host.open_agent` opens a session in this order, and the tools'
part of it is here::

    ToolSetup.prepare     before any extension starts: the built-in tools chosen
                          (--tools), the sandbox backend when a tool needs it at
                          once, the dynamic tools loaded from their catalog
    open_supervisor       (the host's)
    ToolSetup.open        with the supervisor running: the MCP servers (stdio ones
                          are supervised children), the workspace, the built-in
                          tools made, and the registry over built-ins, extension
                          tools, dynamic tools and MCP tools

What it yields (:class:`SessionTools`) is what the loop and the host keep.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from sandbox import Sandbox, SandboxMode
from sandbox.log import get_logger
from supervisor import SupervisorClient

from ._audit import AuditLog
from ._options import AgentOptions, mcp_allowances, protected_paths
from ._registry import ToolRegistry
from ._tools.base import Tool, ToolSet
from ._tools.bash import BashTool
from ._tools.builtin import builtin_tools, sandbox_at_start, session_sandbox
from ._tools.confine import Workspace
from ._tools.dynamic import dynamic_tools
from ._tools.selection import BUILTIN_TOOLS, MCP_TOOLS, OPTIONAL_TOOLS, wanted_tools

if typing.TYPE_CHECKING:
    from ._tools.dynamic import DynamicTools
    from ._tools.mcp import McpServers

__all__ = ["SessionTools", "ToolSetup"]

log = get_logger(__name__)


@typing.final
class SessionTools:
    """A session's tools, set up.

    Attributes:
        registry: every tool the model may call.
        bash: the ``bash`` tool (None when ``--tools`` left it out).
        dynamic: the dynamic tools (None unless ``+dynamic``).
        mcp: the MCP servers (None when there are none and ``+mcp`` is off).
        mcp_problems: declared MCP servers that did not start, one line each.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        bash: BashTool | None,
        dynamic: DynamicTools | None,
        mcp: McpServers | None,
        mcp_problems: list[str],
    ) -> None:
        self.registry = registry
        self.bash = bash
        self.dynamic = dynamic
        self.mcp = mcp
        self.mcp_problems = mcp_problems

    def __repr__(self) -> str:
        return f"<SessionTools {self.registry!r}>"


@typing.final
class ToolSetup:
    """What a session's tools need before the supervisor starts; :meth:`open` the rest.

    Get one from :meth:`prepare`.
    """

    def __init__(
        self,
        options: AgentOptions,
        *,
        home: Path,
        cwd: str,
        audit: AuditLog,
        bash_network: list[str],
        wanted: list[str],
        sandbox: Sandbox | None,
        dynamic: DynamicTools | None,
    ) -> None:
        self._options = options
        self._home = home
        self._cwd = cwd
        self._audit = audit
        self._bash_network = bash_network
        self._wanted = wanted
        self._sandbox = sandbox
        self._dynamic = dynamic

    def __repr__(self) -> str:
        return f"<ToolSetup wanted={self._wanted}>"

    @classmethod
    async def prepare(
        cls,
        options: AgentOptions,
        *,
        home: Path,
        cwd: str,
        audit: AuditLog,
        bash_network: list[str],
    ) -> ToolSetup:
        """Choose the built-in tools, the backend (when a tool needs it at once) and
        load the dynamic tools (with ``+dynamic``).

        Raises:
            AgentError: ``options.tools`` names no tool or group.

        Cancellation: nothing is left behind (a probe in a worker thread finishes
        there).
        """
        wanted = wanted_tools(options.tools)
        sandbox = None
        if sandbox_at_start(wanted):
            sandbox = await trio.to_thread.run_sync(session_sandbox, options.sandbox)
        dynamic: DynamicTools | None = None
        if "new_tool" in wanted:
            dynamic = dynamic_tools(
                home,
                sandbox=sandbox,
                catalog=options.dynamic_catalog,
                audit=audit,
                reserved=[*BUILTIN_TOOLS, *OPTIONAL_TOOLS],
                require_sandbox=options.sandbox == SandboxMode.REQUIRED,
            )
            await dynamic.sync()
        return cls(
            options,
            home=home,
            cwd=cwd,
            audit=audit,
            bash_network=bash_network,
            wanted=wanted,
            sandbox=sandbox,
            dynamic=dynamic,
        )

    @asynccontextmanager
    async def open(self, client: SupervisorClient) -> AsyncIterator[SessionTools]:
        """Start the MCP servers, make the built-in tools and the registry over all.

        Raises:
            WebConfigError: an allowance of the web tools or of MCP is malformed.

        Cancellation: leaving the block stops every MCP server (each one's ladder,
        shielded and bounded).
        """
        options, dynamic = self._options, self._dynamic
        extra: dict[str, Tool] = {}
        if dynamic is not None:
            from ._tools.dynamic import NewTool

            extra["new_tool"] = NewTool(dynamic)
        async with self._open_mcp(client) as (mcp, mcp_problems):
            if mcp is not None:
                from ._tools.mcp import mcp_tools

                extra.update(mcp_tools(mcp))
            workspace = await trio.to_thread.run_sync(
                functools.partial(
                    Workspace,
                    self._cwd,
                    corral_home=str(self._home),
                    protect=protected_paths(options),
                )
            )
            builtins, bash = builtin_tools(
                self._wanted,
                workspace,
                sandbox_mode=options.sandbox,
                sandbox=self._sandbox,
                web=options.web,
                bash_network=self._bash_network,
                report=self._audit.record_egress,
                extra=extra,
            )
            sets: list[ToolSet] = [s for s in (dynamic, mcp) if s is not None]
            registry = ToolRegistry(builtins, client, sets)
            for tool_set in (dynamic, mcp):
                if tool_set is not None:
                    tool_set.lookup = registry.kinds
            registry.sync()
            yield SessionTools(registry, bash, dynamic, mcp, mcp_problems)

    @asynccontextmanager
    async def _open_mcp(
        self, client: SupervisorClient
    ) -> AsyncIterator[tuple[McpServers | None, list[str]]]:
        """The session's MCP servers, when ``+mcp`` is on or a config file declares some.

        The MCP modules (and the SDK) are imported only then.
        """
        options, home, cwd = self._options, self._home, self._cwd
        declared_files = options.mcp_servers and (
            (home / "mcp.json").exists() or (Path(cwd) / ".corral" / "mcp.json").exists()
        )
        if not declared_files and not any(n in self._wanted for n in MCP_TOOLS):
            yield None, []
            return
        from ._tools.mcp import (
            McpPolicy,
            McpTrust,
            SupervisedLauncher,
            declared_servers,
            open_mcp,
        )

        guard = McpPolicy.allowing(mcp_allowances(options)).guard
        # Supervised children: the session's sandbox mode applies (``required`` refuses
        # a server it cannot confine).
        launcher = SupervisedLauncher(client, home)
        async with open_mcp(launcher, guard, audit=self._audit) as servers:
            problems: list[str] = []
            if declared_files:
                decls, problems = await trio.to_thread.run_sync(
                    declared_servers, home, cwd, McpTrust(home)
                )
                problems += await servers.start_declared(decls)
            for problem in problems:
                log.warning("mcp_server_skipped", problem=problem)
            yield servers, problems
