"""``corral tools``: the dynamic tools the agent wrote, and the MCP servers declared here.

``list`` / ``show`` / ``rm`` / ``clear`` work on the catalog of dynamic tools
(``$CORRAL_HOME/state/dynamic-tools.db``, or ``$CORRAL_DYNAMIC_CATALOG``: the only
kind kept outside a session, so ``--dynamic`` is accepted, never needed), checking
every entry's seal as a session would (a refused entry is listed as such, with
why). ``tools mcp list|trust|untrust`` show the servers of ``$CORRAL_HOME/mcp.json``
and ``./.corral/mcp.json`` and trust the project's. Everything shown that an agent,
a catalog or a config file wrote is made terminal-safe first.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click
import msgspec
import trio

from supervisor import corral_home

from .._audit import AuditLog, ToolAction, audit_path
from .._exceptions import AgentError
from .._options import AgentOptions, mcp_allowances
from .._tools.dynamic import (
    SOURCE,
    Catalog,
    CatalogEntry,
    CatalogError,
    EntryRefused,
    Sealer,
    catalog_path,
    code_digest,
    open_catalog,
    verify_entry,
)
from .._tools.mcp.config import (
    Origin,
    ServerDecl,
    load_config,
    project_config_path,
    user_config_path,
)
from .._tools.mcp.errors import McpConfigError
from .._tools.mcp.policy import McpPolicy
from .._tools.mcp.trust import McpTrust, code_paths, entry_digest
from .confirm import confirm
from .errors import CLIError
from .helptext import COMMON_ENV, epilog
from .render import HumanRenderer
from .safe_text import visible

__all__ = ["ask_mcp_trust", "describe_server", "tools_group"]

_ENV = (
    *COMMON_ENV,
    ("CORRAL_DYNAMIC_CATALOG", "another catalog file (*.json: the JSON store)"),
)


#: ``--dynamic`` is accepted, never needed: dynamic tools are the only kind kept
#: outside a session (extension tools: ``corral ext list``; MCP servers: ``tools mcp``).
_DYNAMIC = click.option(
    "--dynamic",
    is_flag=True,
    expose_value=False,
    help="Dynamic tools: the only kind kept here, so the default.",
)


def _home() -> Path:
    return corral_home()


def _catalog() -> Catalog:
    return open_catalog(catalog_path(_home(), os.environ.get("CORRAL_DYNAMIC_CATALOG") or None))


def _entries() -> list[tuple[CatalogEntry | None, EntryRefused | None]]:
    """Every entry, checked: (entry, None) when it loads, (entry or None, why) when not."""
    sealer = Sealer(_home() / "state")
    out: list[tuple[CatalogEntry | None, EntryRefused | None]] = []
    try:
        for entry in _catalog().load():
            if isinstance(entry, EntryRefused):
                out.append((None, entry))
                continue
            try:
                verify_entry(entry, sealer)
            except EntryRefused as exc:
                out.append((entry, exc))
            else:
                out.append((entry, None))
    except CatalogError as exc:
        raise CLIError(str(exc)) from None
    return out


def _record(action: ToolAction, name: str) -> None:
    log = AuditLog(audit_path(_home()), session="", cwd=os.getcwd())
    trio.run(functools.partial(log.record_tool, action, name, SOURCE))


@click.group("tools")
def tools_group() -> None:
    """Dynamic tools and MCP servers: list, show, remove, trust.

    Dynamic tools are the ones the agent wrote with new_tool (sessions with
    --tools +dynamic); MCP servers are declared in $CORRAL_HOME/mcp.json and
    ./.corral/mcp.json.
    """


@tools_group.command(
    "list",
    epilog=epilog(
        examples=[
            ("corral tools list --dynamic", "the dynamic tools, and any the catalog refuses"),
            ("corral tools list --dynamic --json", "one JSON object per tool"),
        ],
        env=_ENV,
    ),
)
@_DYNAMIC
@click.option("--json", "as_json", is_flag=True, help="One JSON object per tool.")
def tools_list(as_json: bool) -> None:
    """List the dynamic tools in the catalog."""
    entries = _entries()
    if as_json:
        for entry, refused in entries:
            data: dict[str, Any] = {
                "name": (entry.name if entry else refused.name if refused else "")
            }
            data["source"] = SOURCE
            if entry is not None:
                data.update(description=entry.description, created=entry.created)
                data["digest"] = code_digest(entry.code)
            data["refused"] = refused.reason if refused is not None else None
            click.echo(json.dumps(data, ensure_ascii=False))
        return
    if not entries:
        click.echo(
            f"no dynamic tools (catalog: {_catalog().path}; MCP servers: `corral tools mcp "
            "list`; extension tools: `corral ext list`)"
        )
        return
    for entry, refused in entries:
        name = entry.name if entry else refused.name if refused else "?"
        if refused is not None:
            click.echo(visible(f"{name}  REFUSED: {refused.reason}"))
        elif entry is not None:
            click.echo(visible(f"{name}  {entry.created}  {entry.description.splitlines()[0]}"))


@tools_group.command(
    "show",
    epilog=epilog(
        examples=[("corral tools show word_count --dynamic", "its description, schema and code")],
        env=_ENV,
    ),
)
@click.argument("name")
@_DYNAMIC
def tools_show(name: str) -> None:
    """Show a dynamic tool: description, parameters, code, and whether it loads."""
    for entry, refused in _entries():
        if (entry.name if entry else refused.name if refused else None) != name:
            continue
        if entry is None:
            assert refused is not None
            raise CLIError(str(refused))
        status = "REFUSED: " + refused.reason if refused else "sealed, loads"
        fields = [
            ("name", entry.name),
            ("created", entry.created),
            ("code", code_digest(entry.code)),
            ("status", status),
            ("description", entry.description),
            ("parameters", json.dumps(entry.parameters, indent=2, ensure_ascii=False)),
        ]
        for label, value in fields:  # made safe line by line: real lines, no literal \n
            first, *rest = value.splitlines() or [""]
            click.echo(visible(f"{label:<12} {first}"))
            for line in rest:
                click.echo(" " * 13 + visible(line))
        click.echo("")
        click.echo("def tool(args):")
        for line in entry.code.splitlines():
            click.echo("    " + visible(line))
        return
    raise CLIError(f"no dynamic tool named {name!r}; `corral tools list --dynamic` lists them")


@tools_group.command(
    "rm",
    epilog=epilog(
        examples=[("corral tools rm word_count --dynamic", "")],
        env=_ENV,
        exit_codes=((0, "removed"), (1, "no such tool, or the catalog is unwritable")),
    ),
)
@click.argument("names", nargs=-1, required=True)
@_DYNAMIC
def tools_rm(names: tuple[str, ...]) -> None:
    """Remove dynamic tools from the catalog (refused entries too)."""
    catalog = _catalog()
    missing = []
    for name in names:
        try:
            found = catalog.remove(name)
        except CatalogError as exc:
            raise CLIError(str(exc)) from None
        if found:
            _record(ToolAction.REMOVE_TOOL, name)
            click.echo(visible(f"removed {name}"))
        else:
            missing.append(name)
    if missing:
        raise CLIError(f"no dynamic tool named {', '.join(missing)}")


@tools_group.command(
    "clear",
    epilog=epilog(
        examples=[("corral tools clear --dynamic --yes", "remove every dynamic tool")],
        env=_ENV,
    ),
)
@_DYNAMIC
@click.option("-y", "--yes", is_flag=True, help="Do not ask (needed without a terminal).")
def tools_clear(yes: bool) -> None:
    """Remove every dynamic tool from the catalog."""
    entries = _entries()
    names = [e.name if e else r.name if r else "?" for e, r in entries]
    if not names:
        click.echo("no dynamic tools")
        return
    confirm(f"remove {len(names)} dynamic tool(s)?", yes, declined="nothing removed")
    try:
        _catalog().clear()
    except CatalogError as exc:
        raise CLIError(str(exc)) from None
    for name in names:
        _record(ToolAction.REMOVE_TOOL, name)
    click.echo(visible(f"removed {len(names)}: {', '.join(names)}"))


# --- MCP servers ------------------------------------------------------------------


def describe_server(decl: ServerDecl) -> list[str]:
    """What the user reviews before trusting a server: one ``label  value`` line each."""
    c = decl.config
    rows = [("server", f"{decl.name} ({decl.origin.value}, {decl.path})")]
    if c.command is not None:
        rows.append(("runs", c.describe()))
        if c.env:
            rows.append(("env", ", ".join(f"{k}={v}" for k, v in c.env.items())))
        perms = msgspec.to_builtins(c.permissions)
        rows.append(("sandbox", json.dumps(perms, sort_keys=True)))
    else:
        rows.append(("url", c.url or ""))
        if c.headers:
            rows.append(("headers", ", ".join(f"{k}: {v}" for k, v in c.headers.items())))
    rows.append(("entry", entry_digest(decl)[:23] + "…"))
    if decl.origin is Origin.PROJECT:
        rows += [("pins", f"{path} (the code it runs, by content)") for path in code_paths(decl)]
    return [f"  {label:<8} {visible(value)}" for label, value in rows]


def _declared(project: str) -> list[ServerDecl]:
    found: list[ServerDecl] = []
    for path, origin in (
        (user_config_path(_home()), Origin.USER),
        (project_config_path(project), Origin.PROJECT),
    ):
        try:
            decls, bad = load_config(path, origin)
        except McpConfigError as exc:
            raise CLIError(str(exc)) from None
        for problem in bad:  # the rest is still listed and managed
            click.echo(visible(f"warning: {problem}"), err=True)
        found += decls
    return found


@tools_group.group(
    "mcp",
    epilog=epilog(
        examples=[
            ("corral tools mcp list", "declared servers and whether they start"),
            ("corral tools mcp trust files", "trust the project's server 'files'"),
        ],
        env=COMMON_ENV,
    ),
)
def mcp_group() -> None:
    """MCP servers declared for this project and user: list, trust, untrust."""


_MCP_ALLOW = click.option(
    "--mcp-allow",
    metavar="ADDR",
    multiple=True,
    help="An exception to the MCP network guard, as run's (also $CORRAL_MCP_ALLOW).",
)


def _policy(allow: tuple[str, ...]) -> McpPolicy:
    try:
        return McpPolicy.allowing(mcp_allowances(AgentOptions(mcp_allow=list(allow))))
    except AgentError as exc:
        raise CLIError(str(exc)) from None


def _states(decls: list[ServerDecl], policy: McpPolicy) -> list[tuple[str, str]]:
    """What a session would do with each server: (state, why), as ``declared_servers``
    and the policy decide it. Blocking (it runs the policy's checks)."""
    trust = McpTrust(_home())

    async def check() -> list[tuple[str, str]]:
        states: list[tuple[str, str]] = []
        users = {d.name: d for d in decls if d.origin is Origin.USER}
        for decl in decls:
            winner = users.get(decl.name)
            if decl.origin is Origin.PROJECT and winner is not None:
                states.append(("SHADOWED", f"the user's server of that name wins ({winner.path})"))
                continue
            refused = await policy.refusal(decl)  # trusting it would not change this
            if refused is not None:
                states.append(("REFUSED", refused))
                continue
            try:
                why = trust.problem(decl)
            except McpConfigError as exc:
                why = str(exc)
            states.append(("starts", "") if why is None else ("NOT TRUSTED", why))
        return states

    return trio.run(check)


@mcp_group.command(
    "list",
    epilog=epilog(examples=[("corral tools mcp list", "")], env=COMMON_ENV),
)
@click.option("--cwd", default=".", type=click.Path(file_okay=False, exists=True))
@_MCP_ALLOW
def mcp_list(cwd: str, mcp_allow: tuple[str, ...]) -> None:
    """List the declared MCP servers and what a session would do with each.

    STATE is `starts` only when `corral run` would start the server: trusted (a
    project's), not shadowed by a user server of the same name, and allowed by the
    connection policy (an absolute executable command; a URL the network guard lets
    through). Otherwise it says why not, on the next line: REFUSED (by the policy,
    trusted or not), NOT TRUSTED, or SHADOWED.
    """
    project = os.path.realpath(cwd)
    decls = _declared(project)
    if not decls:
        click.echo(
            f"no MCP servers declared ({user_config_path(_home())}, {project_config_path(project)})"
        )
        return
    states = _states(decls, _policy(mcp_allow))
    rows = [
        (visible(d.name), d.origin.value, state, visible(d.config.describe()))
        for d, (state, _) in zip(decls, states, strict=True)
    ]
    heads = ("NAME", "ORIGIN", "STATE", "RUNS")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads[:-1])]
    for row, (_, why) in zip([heads, *rows], [("", ""), *states], strict=True):
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=False)]
        click.echo("  ".join([*cells, row[-1]]).rstrip())
        if why:
            click.echo(visible(f"    {why}"))


def _project_decl(name: str, cwd: str) -> ServerDecl:
    for decl in _declared(os.path.realpath(cwd)):
        if decl.name == name and decl.origin is Origin.PROJECT:
            return decl
    raise CLIError(f"no project MCP server named {name!r} in {project_config_path(cwd)}")


@mcp_group.command(
    "trust",
    epilog=epilog(
        examples=[
            ("corral tools mcp trust files", "review, then answer y"),
            ("corral tools mcp trust -y files", "no question (needed without a terminal)"),
        ],
        env=COMMON_ENV,
        exit_codes=((0, "trusted"), (1, "not trusted: refused by policy, or not confirmed")),
    ),
)
@click.argument("names", nargs=-1, required=True)
@click.option("--cwd", default=".", type=click.Path(file_okay=False, exists=True))
@click.option("-y", "--yes", is_flag=True, help="Trust without asking, as shown.")
@_MCP_ALLOW
def mcp_trust(names: tuple[str, ...], cwd: str, yes: bool, mcp_allow: tuple[str, ...]) -> None:
    """Trust project MCP servers as their entries are now.

    Each is shown first; one the connection policy would refuse at start is not
    pinned (a pin would only say `starts` where `run` refuses). Asks on a terminal;
    without one, only -y trusts.
    """
    trust = McpTrust(_home())
    policy = _policy(mcp_allow)
    for name in names:
        decl = _project_decl(name, cwd)
        for line in describe_server(decl):
            click.echo(line)
        refused = trio.run(policy.refusal, decl)
        if refused is not None:
            raise CLIError(f"not trusting {name}: a session would not start it: {refused}")
        confirm(f"Trust {name}?", yes, declined=f"{name} not trusted", what="trust it as shown")
        try:
            trust.trust(decl)
        except McpConfigError as exc:
            raise CLIError(str(exc)) from None
        click.echo(visible(f"trusted {name}"))


@mcp_group.command(
    "untrust",
    epilog=epilog(examples=[("corral tools mcp untrust files", "")], env=COMMON_ENV),
)
@click.argument("name")
@click.option("--cwd", default=".", type=click.Path(file_okay=False, exists=True))
def mcp_untrust(name: str, cwd: str) -> None:
    """Forget the trust of a project MCP server."""
    try:
        found = McpTrust(_home()).untrust(_project_decl(name, cwd))
    except McpConfigError as exc:
        raise CLIError(str(exc)) from None
    click.echo(visible(f"untrusted {name}" if found else f"{name} was not trusted"))


def _where(options: AgentOptions) -> tuple[str, str]:
    home = Path(options.home).expanduser().absolute() if options.home else corral_home()
    return str(home), os.path.realpath(os.path.expanduser(options.cwd))


async def ask_mcp_trust(
    options: AgentOptions,
    renderer: HumanRenderer,
    read: Callable[[str], Awaitable[str | None]],
) -> None:
    """``corral chat``: ask y/N for each project MCP server that needs trust.

    Cancellation: stops asking; what was answered is recorded.
    """
    home, cwd = await trio.to_thread.run_sync(_where, options)
    trust = McpTrust(home)
    try:
        policy = McpPolicy.allowing(mcp_allowances(options))
    except AgentError as exc:
        renderer.line(renderer.style(visible(f"! {exc}"), "red"))
        return
    try:
        decls, bad = await trio.to_thread.run_sync(
            load_config, project_config_path(cwd), Origin.PROJECT
        )
    except McpConfigError as exc:
        renderer.line(renderer.style(visible(f"! {exc}"), "red"))
        return
    for problem in bad:  # not started; the well-formed ones are still asked about
        renderer.line(renderer.style(visible(f"! {problem}"), "red"))
    for decl in decls:
        try:
            if await trio.to_thread.run_sync(trust.problem, decl) is None:
                continue
        except McpConfigError as exc:
            renderer.line(renderer.style(visible(f"! {exc}"), "red"))
            return
        refused = await policy.refusal(decl)
        if refused is not None:  # trusting it would not start it: not asked
            renderer.line(renderer.style(visible(f"! not starting {decl.name}: {refused}"), "red"))
            continue
        renderer.line(renderer.style(f"MCP server {decl.name} needs your trust:", "bold"))
        for line in describe_server(decl):
            renderer.line(line)
        answer = await read(f"trust {decl.name} and start it? [y/N] ")
        if answer is not None and answer.strip().lower() in ("y", "yes"):
            await trio.to_thread.run_sync(trust.trust, decl)
            renderer.line(visible(f"trusted {decl.name}"))
        else:
            renderer.line(renderer.style(visible(f"not starting {decl.name}"), "yellow"))
