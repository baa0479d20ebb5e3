"""The dynamic tool set: the catalog, checked, bridged to the live registry.

:class:`DynamicTools` is a :class:`~agent._tools.base.ToolSet` of kind
``DYNAMIC`` (source ``dynamic`` on every tool). :meth:`DynamicTools.sync` rebuilds
it from the catalog (at session start): each entry's seal is checked and its draft
checked and compiled again, and an entry that fails is refused by name and never
runs. :meth:`DynamicTools.create` is what ``new_tool`` does: check the draft, make
sure the name is free, render and compile the program, let the user approve it
(``chat``), run its ``--describe`` in the sandbox and compare the spec with the
request, seal and store the entry, record it in the audit log, and bump the
generation so the registry picks it up before the next model call.

Built-in and extension tools always win a name: ``new_tool`` refuses a taken name,
and an entry that a later built-in or extension takes is shadowed (the registry
logs the clash), never the other way round.
"""

from __future__ import annotations

import datetime
import json
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import msgspec
import trio

from sandbox.log import get_logger

from ..._audit import AuditLog, ToolAction
from ..._messages import TextContent
from ..._providers.base import ToolSpec
from ..base import Progress, ToolKind, ToolRunResult, error_result, source_of
from .catalog import Catalog, CatalogEntry
from .errors import CatalogError, DraftRejected, EntryRefused
from .runner import DynamicRunner, RunCaps, RunResult
from .seal import Sealer, code_digest
from .template import ToolDraft, check_compiles, check_draft, expected_spec, render

__all__ = ["SOURCE", "Approver", "DynamicTool", "DynamicTools", "verify_entry"]

log = get_logger(__name__)

#: The source of every dynamic tool (in the audit log, ``corral tools``).
SOURCE = source_of(ToolKind.DYNAMIC)

#: Asked before a new tool's program first runs: (the draft, its program) -> go ahead?
Approver = Callable[[ToolDraft, str], Awaitable[bool]]

_TRACE_LINES = 6


def verify_entry(entry: CatalogEntry, sealer: Sealer) -> tuple[ToolDraft, str]:
    """Check a stored entry: its seal, its draft, and that its program compiles.

    Returns:
        The draft and its rendered program.

    Raises:
        EntryRefused: the seal does not match (edited outside corral), or the entry
            is not a valid tool any more.
        CatalogError: the key cannot be read.
    """
    if not sealer.matches(entry.content(), entry.seal):
        raise EntryRefused(
            entry.name,
            "its seal does not match: it was changed outside corral, so its code may not be "
            f"what you were shown; remove it (corral tools rm {entry.name} --dynamic)",
        )
    draft = entry.draft()
    try:
        if check_draft(draft) != draft:
            raise DraftRejected(draft.name, "code", "not in the form corral stores")
        source = render(draft)
        check_compiles(draft, source)
    except DraftRejected as exc:
        raise EntryRefused(entry.name, f"not a valid tool: {exc}") from None
    return draft, source


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(lines[-_TRACE_LINES:])


def _failure(result: RunResult, caps: RunCaps, what: str) -> str | None:
    """Why a run failed as a whole (timeout, cap, crash), or None."""
    if result.timed_out:
        return f"{what} timed out after {caps.timeout:g} s; its process group was killed"
    if result.overflowed:
        return (
            f"{what} wrote more than {caps.max_stdout // 1024} KiB to stdout; it was killed "
            "and its output dropped"
        )
    return None


@typing.final
class DynamicTool:
    """One dynamic tool: its checked program, run confined at every call."""

    def __init__(
        self,
        draft: ToolDraft,
        source: str,
        runner: DynamicRunner,
        caps: RunCaps,
        *,
        require_sandbox: bool = False,
    ) -> None:
        self.draft = draft
        self.program = source
        self.digest = code_digest(draft.code)
        self._runner = runner
        self._caps = caps
        self._require_sandbox = require_sandbox
        self._spec = ToolSpec(
            name=draft.name, description=draft.description, schema=draft.parameters
        )

    def __repr__(self) -> str:
        return f"<DynamicTool {self.draft.name!r} {self.digest[:19]}>"

    @property
    def spec(self) -> ToolSpec:
        """As the agent defined it."""
        return self._spec

    #: Written by the agent (source ``dynamic``).
    kind = ToolKind.DYNAMIC
    owner = ""

    async def run(self, call_id: str, args: dict[str, Any], progress: Progress) -> ToolRunResult:
        """Run the program with ``--call`` in the sandbox.

        Cancellation: the program's process group is killed and reaped first.
        """
        name = self.draft.name
        if self._require_sandbox and not self._runner.sandboxed:
            return error_result(f"{name}: --sandbox required, but no sandbox backend is available")
        try:
            stdin = msgspec.json.encode(args)
            result = await self._runner.run(
                name, self.program, "--call", stdin, self._caps, network=self.draft.network
            )
        except Exception as exc:  # the sandbox or the spawn failed: an error result
            log.warning("dynamic_tool_start_failed", tool=name, error=str(exc))
            return error_result(f"{name}: cannot run: {exc}")
        why = _failure(result, self._caps, name)
        if why is not None:
            return error_result(why)
        try:
            reply = json.loads(result.stdout)
        except ValueError:
            reply = None
        if isinstance(reply, dict) and "error" in reply:
            text = str(reply["error"])
            # An exception other than ToolError: its traceback helps the agent fix it.
            if "Traceback" in result.stderr:
                text += "\n" + _tail(result.stderr)
            return error_result(text)
        if not isinstance(reply, dict) or "data" not in reply:
            detail = _tail(result.stderr) or "no output"
            return error_result(f"{name}: {result.status()} without a result: {detail}")
        data = reply["data"]
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        return ToolRunResult(content=[TextContent(text=text)])


@typing.final
class DynamicTools:
    """The dynamic tools of a session (a :class:`~agent._tools.base.ToolSet`).

    Args:
        catalog: where entries are stored.
        sealer: the key entries are sealed with.
        runner: runs the programs.
        caps: timeout and stdout cap of each run.
        audit: where creations and removals are recorded.
        reserved: names no dynamic tool may take (every built-in's, enabled or not).
        require_sandbox: refuse to run programs without a sandbox (``--sandbox required``).
    """

    def __init__(
        self,
        catalog: Catalog,
        sealer: Sealer,
        runner: DynamicRunner,
        *,
        caps: RunCaps | None = None,
        audit: AuditLog | None = None,
        reserved: Sequence[str] = (),
        require_sandbox: bool = False,
    ) -> None:
        self.catalog = catalog
        self.sealer = sealer
        self.runner = runner
        self.caps = caps or RunCaps()
        self.audit = audit
        self.reserved = frozenset(reserved)
        self.require_sandbox = require_sandbox
        #: Asked before a new program first runs (``chat`` sets it); None: no one to ask.
        self.approver: Approver | None = None
        #: The live registry's tool kinds by name (the host sets it).
        self.lookup: Callable[[], Mapping[str, ToolKind]] = dict
        #: Entries of the last :meth:`sync` that were refused, and why.
        self.refused: list[EntryRefused] = []
        #: Why the catalog could not be read at the last :meth:`sync` ("" when it was).
        self.problem = ""
        self._tools: dict[str, DynamicTool] = {}
        self._generation = 0
        self._lock = trio.Lock()

    def __repr__(self) -> str:
        return f"<DynamicTools {len(self._tools)} tools catalog={self.catalog.path!r}>"

    @property
    def generation(self) -> int:
        """Bumped at every change."""
        return self._generation

    def tools(self) -> list[DynamicTool]:
        """The loaded tools, in creation order."""
        return list(self._tools.values())

    def _tool(self, draft: ToolDraft, source: str) -> DynamicTool:
        return DynamicTool(
            draft, source, self.runner, self.caps, require_sandbox=self.require_sandbox
        )

    async def sync(self) -> None:
        """Rebuild the set from the catalog, refusing entries that fail their checks.

        A catalog (or key) that cannot be read leaves the set empty and says why in
        :attr:`problem` (logged): the session goes on without dynamic tools.

        Cancellation: the set is left as it was.
        """
        async with self._lock:
            try:
                tools, refused = await trio.to_thread.run_sync(self._load)
                self.problem = ""
            except CatalogError as exc:
                tools, refused = {}, []
                self.problem = str(exc)
                log.error("dynamic_catalog_unreadable", error=self.problem)
            self._tools = tools
            self.refused = refused
            self._generation += 1
        for problem in refused:
            log.warning("dynamic_tool_refused", tool=problem.name, reason=problem.reason)
        log.info("dynamic_tools_loaded", tools=list(tools), refused=len(refused))

    def _load(self) -> tuple[dict[str, DynamicTool], list[EntryRefused]]:
        tools: dict[str, DynamicTool] = {}
        refused: list[EntryRefused] = []
        for entry in self.catalog.load():
            if isinstance(entry, EntryRefused):
                refused.append(entry)
                continue
            try:
                draft, source = verify_entry(entry, self.sealer)
            except EntryRefused as exc:
                refused.append(exc)
                continue
            tools[draft.name] = self._tool(draft, source)
        return tools, refused

    def _check_name(self, draft: ToolDraft, replace: bool) -> None:
        name = draft.name
        if name in self.reserved:
            raise DraftRejected(name, "name", "taken by a built-in tool; choose another name")
        kind = self.lookup().get(name)
        if kind is not None and kind is not ToolKind.DYNAMIC:
            raise DraftRejected(name, "name", f"taken by a {kind.value} tool; choose another name")
        if name in self._tools and not replace:
            raise DraftRejected(
                name, "name", "a dynamic tool of that name exists; pass replace: true to replace it"
            )

    async def _describe(self, draft: ToolDraft, source: str) -> None:
        if self.require_sandbox and not self.runner.sandboxed:
            raise DraftRejected(
                draft.name, "describe", "--sandbox required, but no sandbox backend is available"
            )
        try:
            result = await self.runner.run(draft.name, source, "--describe", b"", self.caps)
        except Exception as exc:  # the sandbox or the spawn failed
            raise DraftRejected(draft.name, "describe", f"cannot run the program: {exc}") from exc
        why = _failure(result, self.caps, "--describe")
        if why is not None:
            raise DraftRejected(draft.name, "describe", why)
        try:
            spec = json.loads(result.stdout)
        except ValueError:
            detail = _tail(result.stderr) or "no output"
            raise DraftRejected(
                draft.name, "describe", f"{result.status()}, no spec printed: {detail}"
            ) from None
        if spec != expected_spec(draft):
            raise DraftRejected(
                draft.name,
                "describe",
                f"printed a spec that does not match the request: {spec!r:.300}",
            )

    async def create(self, draft: ToolDraft, *, replace: bool = False) -> DynamicTool:
        """``new_tool``: check, approve, describe, seal, store and register ``draft``.

        Raises:
            DraftRejected: the draft is invalid, its name taken, the user declined it,
                or its ``--describe`` failed or did not match.
            CatalogError: it could not be stored.

        Cancellation: nothing is stored; a running ``--describe`` is killed.
        """
        draft = check_draft(draft)
        source = render(draft)
        check_compiles(draft, source)
        async with self._lock:
            self._check_name(draft, replace)
            if self.approver is not None and not await self.approver(draft, source):
                raise DraftRejected(draft.name, "approval", "the user declined to create it")
            await self._describe(draft, source)
            created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
            entry = await trio.to_thread.run_sync(self.sealer.entry, draft, created)
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.catalog.put, entry)
            tool = self._tool(draft, source)
            self._tools[draft.name] = tool
            self._generation += 1
        log.info("dynamic_tool_created", tool=draft.name, digest=tool.digest, replaced=replace)
        if self.audit is not None:
            await self.audit.record_tool(
                ToolAction.NEW_TOOL,
                draft.name,
                SOURCE,
                digest=tool.digest,
                code=draft.code,
                detail=f"network: {', '.join(draft.network)}" if draft.network else "",
            )
        return tool

    async def remove(self, name: str) -> bool:
        """Remove ``name`` from the catalog and the set; False when it was not there.

        Raises:
            CatalogError: the catalog cannot be written.

        Cancellation: the removal runs to its end (shielded).
        """
        async with self._lock:
            with trio.CancelScope(shield=True):
                found = await trio.to_thread.run_sync(self.catalog.remove, name)
            found = self._tools.pop(name, None) is not None or found
            self.refused = [r for r in self.refused if r.name != name]
            self._generation += 1
        if found and self.audit is not None:
            await self.audit.record_tool(ToolAction.REMOVE_TOOL, name, SOURCE)
        return found

    async def clear(self) -> list[str]:
        """Remove every dynamic tool; returns the names removed.

        Raises:
            CatalogError: the catalog cannot be written.

        Cancellation: the removal runs to its end (shielded).
        """
        async with self._lock:
            names = [*self._tools, *(r.name for r in self.refused)]
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.catalog.clear)
            self._tools = {}
            self.refused = []
            self._generation += 1
        if self.audit is not None:
            for name in names:
                await self.audit.record_tool(ToolAction.REMOVE_TOOL, name, SOURCE)
        return names
