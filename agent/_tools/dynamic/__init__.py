"""Dynamic tools: tools the agent writes for itself (the seed's "dynamic" section).

``new_tool`` renders a standalone program around ``corral_tools.run()``
(:mod:`.template`), checks it (it compiles; its ``--describe``, run sandboxed,
prints the spec that was asked for), seals and stores it in the catalog
(:mod:`.catalog`, :mod:`.seal`) and registers it (:mod:`.registrar`). Every call
runs confined and capped (:mod:`.runner`). :func:`dynamic_tools` builds the set
for one session.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from pathlib import Path

from ..._lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:
    from sandbox import Sandbox
    from supervisor import NetGuard

    from ..._audit import AuditLog
    from .catalog import (
        CATALOG_NAME,
        Catalog,
        CatalogEntry,
        JsonCatalog,
        SqliteCatalog,
        open_catalog,
    )
    from .errors import CatalogError, DraftRejected, DynamicToolError, EntryRefused
    from .new_tool import NewTool
    from .registrar import SOURCE, Approver, DynamicTool, DynamicTools, verify_entry
    from .runner import LIMITS, DynamicRunner, RunCaps, RunResult
    from .seal import KEY_NAME, Sealer, code_digest
    from .template import ToolDraft, check_compiles, check_draft, render

__all__ = [
    "CATALOG_NAME",
    "DYNAMIC_TOOLS",
    "KEY_NAME",
    "LIMITS",
    "SOURCE",
    "Approver",
    "Catalog",
    "CatalogEntry",
    "CatalogError",
    "DraftRejected",
    "DynamicRunner",
    "DynamicTool",
    "DynamicToolError",
    "DynamicTools",
    "EntryRefused",
    "JsonCatalog",
    "NewTool",
    "RunCaps",
    "RunResult",
    "Sealer",
    "SqliteCatalog",
    "ToolDraft",
    "catalog_path",
    "check_compiles",
    "check_draft",
    "code_digest",
    "dynamic_tools",
    "open_catalog",
    "render",
    "verify_entry",
]

#: The built-in tools of this package.
DYNAMIC_TOOLS = ("new_tool",)


def catalog_path(home: str | Path, override: str | None = None) -> str:
    """Where the catalog of corral home ``home`` lives (``override`` when given)."""
    from .catalog import CATALOG_NAME

    return override or str(Path(home) / "state" / CATALOG_NAME)


def dynamic_tools(
    home: str | Path,
    *,
    sandbox: Sandbox | None,
    catalog: str | None = None,
    audit: AuditLog | None = None,
    reserved: Sequence[str] = (),
    require_sandbox: bool = False,
    caps: RunCaps | None = None,
    guard: NetGuard | None = None,
) -> DynamicTools:
    """The dynamic tool set of corral home ``home`` (call :meth:`DynamicTools.sync` next).

    Args:
        home: corral's home (the catalog and the seal key live in its ``state``).
        sandbox: the session's backend (None: programs run unconfined).
        catalog: another catalog file (``*.json``: the JSON store).
        audit: where creations and removals are recorded.
        reserved: names no dynamic tool may take.
        require_sandbox: refuse to run programs without a sandbox.
        caps: timeout and stdout cap of each run (the seed's by default).
        guard: the network guard of tools granted destinations (default: public
            addresses only); refusals go to ``audit``.
    """
    from .catalog import open_catalog
    from .registrar import DynamicTools
    from .runner import DynamicRunner
    from .seal import Sealer

    return DynamicTools(
        open_catalog(catalog_path(home, catalog)),
        Sealer(Path(home) / "state"),
        DynamicRunner(
            sandbox, guard=guard, report=audit.record_egress if audit is not None else None
        ),
        caps=caps,
        audit=audit,
        reserved=reserved,
        require_sandbox=require_sandbox,
    )


#: Where each other public name lives: imported on first use (PEP 562), so that a
#: session without ``+dynamic`` (the default) does not load the catalog, sqlite3
#: and the template checker.
_WHERE: dict[str, str] = {
    **dict.fromkeys(
        ("CATALOG_NAME", "Catalog", "CatalogEntry", "JsonCatalog", "SqliteCatalog", "open_catalog"),
        ".catalog",
    ),
    **dict.fromkeys(
        ("CatalogError", "DraftRejected", "DynamicToolError", "EntryRefused"), ".errors"
    ),
    "NewTool": ".new_tool",
    **dict.fromkeys(
        ("SOURCE", "Approver", "DynamicTool", "DynamicTools", "verify_entry"), ".registrar"
    ),
    **dict.fromkeys(("LIMITS", "DynamicRunner", "RunCaps", "RunResult"), ".runner"),
    **dict.fromkeys(("KEY_NAME", "Sealer", "code_digest"), ".seal"),
    **dict.fromkeys(("ToolDraft", "check_compiles", "check_draft", "render"), ".template"),
}


__getattr__, __dir__ = _lazy_exports(__name__, _WHERE, globals(), __all__)
