"""corral's own tools of one session, made: ``read``, ``write``, ``edit``, ``bash`` and
the optional ones the session asked for.

Which tools a session offers is :mod:`.selection`'s; this module makes them for a
workspace. The sandbox backend is chosen when a tool needs it: at once when the web
tools or ``new_tool`` are on (they are made with it), else by ``bash`` before its
first command, so a session that runs none never probes for one.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from sandbox import Sandbox, SandboxMode, SandboxUnavailable, select_sandbox
from sandbox.log import get_logger
from supervisor import EgressReport

from .base import Tool
from .bash import BashTool
from .confine import Workspace
from .files import EditTool, ReadTool, WriteTool
from .web import WEB_TOOLS, WebConfig, web_tools

__all__ = ["builtin_tools", "sandbox_at_start", "session_sandbox"]

log = get_logger(__name__)


def sandbox_at_start(wanted: Sequence[str]) -> bool:
    """Whether tools other than ``bash`` need the backend when they are made."""
    return "new_tool" in wanted or any(name in wanted for name in WEB_TOOLS)


def session_sandbox(mode: str) -> Sandbox | None:
    """The backend the session's tools run in for ``--sandbox mode`` (None: none).

    A missing backend is logged (``bash_unsandboxed``), not raised: ``required``
    is enforced by each tool when it runs. Blocking (it may probe).
    """
    if mode == SandboxMode.OFF:
        return None
    try:
        return select_sandbox(mode)
    except SandboxUnavailable as exc:
        log.warning("bash_unsandboxed", problem=str(exc))
        return None


def builtin_tools(
    wanted: Sequence[str],
    workspace: Workspace,
    *,
    sandbox_mode: str,
    sandbox: Sandbox | None,
    web: WebConfig | None,
    bash_network: list[str],
    report: EgressReport,
    extra: Mapping[str, Tool],
) -> tuple[list[Tool], BashTool | None]:
    """The ``wanted`` built-in tools, in that order, and ``bash`` when it is one of them.

    Args:
        wanted: the names (see :func:`~.selection.wanted_tools`).
        workspace: where the file tools and ``bash`` work.
        sandbox_mode: ``--sandbox`` (``required`` makes every tool refuse to run bare).
        sandbox: the backend, when :func:`sandbox_at_start` chose it already.
        web: the web tools' settings (None: from ``CORRAL_*`` variables).
        bash_network: the destinations ``bash`` may reach through the egress proxy.
        report: where ``bash``'s egress refusals go (the audit log).
        extra: tools made elsewhere (``new_tool``, the ``mcp_*`` tools), by name.

    Raises:
        WebConfigError: an allowance of the web tools is malformed.
    """
    required = sandbox_mode == SandboxMode.REQUIRED
    shell = functools.partial(
        BashTool, workspace, require_sandbox=required, network=bash_network, report=report
    )
    if sandbox_at_start(wanted):
        bash = shell(sandbox=sandbox)
    else:  # chosen before the first command: a session that runs none never probes
        bash = shell(choose_sandbox=functools.partial(session_sandbox, sandbox_mode))
    made: dict[str, Tool] = {
        "read": ReadTool(workspace),
        "write": WriteTool(workspace),
        "edit": EditTool(workspace),
        "bash": bash,
        **extra,
    }
    if any(name in wanted for name in WEB_TOOLS):
        config = web if web is not None else WebConfig.from_env()
        made.update(web_tools(config, sandbox=sandbox, require_sandbox=required))
    return [made[name] for name in wanted], (bash if "bash" in wanted else None)
