"""What ``ext list`` shows: one :class:`ExtensionInfo` per extension and per manifest
that did not load, with process figures from psutil (inspection only)."""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

if typing.TYPE_CHECKING:
    import psutil

from ._api import ExtensionInfo, ExtensionStats
from ._extension import Extension
from ._lifecycle import ExtensionState
from ._manifest import Discovery
from ._registry import Registry

__all__ = ["ProcessFigures", "discovery_infos", "extension_infos"]


@typing.final
class ProcessFigures:
    """RSS, CPU and open fds per extension, summed over its process tree.

    The tree matters: under bwrap the pid we spawned is bwrap itself, and the
    extension runs below it. ``psutil.Process`` objects are kept between calls,
    because ``cpu_percent`` measures since the previous call on the same object.
    """

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def __repr__(self) -> str:
        return f"<ProcessFigures tracked={len(self._procs)}>"

    def measure(self, pids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """Figures per root pid (blocking: run it in a worker thread)."""
        import psutil  # only ``ext list`` needs it: not imported at start-up

        out: dict[int, dict[str, Any]] = {}
        seen: set[int] = set()
        kids = _children_by_parent(psutil)  # one pass over /proc for every tree
        for pid in pids:
            try:
                root = self._procs.get(pid)
                if root is None:
                    root = self._procs[pid] = psutil.Process(pid)
                if not root.is_running():  # the pid was reused: not ours any more
                    raise psutil.NoSuchProcess(pid)
            except psutil.Error:
                self._procs.pop(pid, None)
                continue
            tree = [root]
            for below in _below(pid, kids):
                try:
                    tree.append(self._procs.get(below) or psutil.Process(below))
                except psutil.Error:
                    continue  # it ended since the scan
            rss = fds = 0
            cpu = 0.0
            for found in tree:
                proc = self._procs.setdefault(found.pid, found)
                try:
                    with proc.oneshot():
                        rss += proc.memory_info().rss
                        fds += proc.num_fds() if hasattr(proc, "num_fds") else 0
                        cpu += proc.cpu_percent(None)
                except psutil.Error:
                    self._procs.pop(found.pid, None)
            out[pid] = {"rss": rss, "cpu": round(cpu, 1), "fds": fds}
            seen.update(p.pid for p in tree)
        for gone in set(self._procs) - seen:
            del self._procs[gone]
        return out


def _children_by_parent(psutil: Any) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        kids.setdefault(proc.info["ppid"], []).append(proc.pid)
    return kids


def _below(pid: int, kids: Mapping[int, list[int]]) -> list[int]:
    """Every descendant of ``pid`` in ``kids`` (a parent-to-children map)."""
    out: list[int] = []
    todo = list(kids.get(pid, ()))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(kids.get(child, ()))
    return out


def extension_infos(
    exts: Sequence[Extension],
    figures: dict[int, dict[str, Any]],
    backend: str,
    registry: Registry[Extension] | None = None,
) -> list[ExtensionInfo]:
    """The status of each extension; ``backend`` is shown for one never planned.

    With the ``registry``, an extension's ``tools`` and ``commands`` are the ones it
    runs; the names it registered that a built-in or an earlier extension holds are
    its ``shadowed_tools`` / ``shadowed_commands`` (the agent's tool list agrees).
    """
    out = []
    for e in exts:
        plan = e.plan
        tool_owner = command_owner = None
        if registry is not None and e.listed:
            tool_owner, command_owner = registry.tool_owner, registry.command_owner
        tools, shadowed_tools = _split(e, e.tools, tool_owner)
        commands, shadowed_commands = _split(e, e.commands, command_owner)
        out.append(
            ExtensionInfo(
                name=e.name,
                version=e.spec.manifest.version,
                source=e.spec.source,
                path=e.spec.dir,
                state=e.state,
                enabled=e.spec.manifest.enabled,
                pid=e.pid if e.serving else None,
                sandboxed=bool(plan and plan.sandboxed),
                backend=plan.backend if plan else backend,
                tools=tools,
                commands=commands,
                shadowed_tools=shadowed_tools,
                shadowed_commands=shadowed_commands,
                problem=e.problem,
                stats=_stats(e, figures.get(e.pid) if e.pid is not None else None),
                kind=e.kind,
                ui_elements=list(e.session.ui_elements),
            )
        )
    return out


def _split(
    e: Extension, names: Mapping[str, object], owner: Callable[[str], Extension | None] | None
) -> tuple[list[str], list[str]]:
    """``names`` it runs and those another holds (all run, without an ``owner`` to ask)."""
    if owner is None:
        return sorted(names), []
    runs = sorted(n for n in names if owner(n) is e)
    return runs, sorted(n for n in names if owner(n) is not e)


def _stats(e: Extension, proc_figures: dict[str, Any] | None) -> ExtensionStats:
    """Counters, latency percentiles and (given) psutil figures of one child."""
    figures = proc_figures or {}
    egress = e.egress
    return e.calls.stats(
        egress_allowed=egress.allowed if egress is not None else 0,
        egress_refused=egress.refused if egress is not None else 0,
        restarts=e.restarts,
        rss_bytes=figures.get("rss"),
        cpu_percent=figures.get("cpu"),
        open_fds=figures.get("fds"),
        uptime_s=e.uptime,
    )


def discovery_infos(discovery: Discovery) -> list[ExtensionInfo]:
    """Manifests that did not load, and extensions shadowed by another of their name."""
    infos = [
        ExtensionInfo(
            name=p.extension,
            version="",
            source="",
            path=p.path,
            state=ExtensionState.INVALID,
            enabled=False,
            problem=f"{p.field}: {p.message}" if p.field else p.message,
        )
        for p in discovery.problems
    ]
    infos += [
        ExtensionInfo(
            name=s.name,
            version=s.manifest.version,
            source=s.source,
            path=s.dir,
            state=ExtensionState.DUPLICATE,
            enabled=s.manifest.enabled,
            problem=f"shadowed by {w.dir} ({w.source})",
            kind=s.kind,
        )
        for s, w in discovery.duplicates
    ]
    return infos
