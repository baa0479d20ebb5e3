"""Reload as a swap: which extensions the new generation replaces, and which stay.

A reload starts the new generation beside the running one (same sandbox, same
checks: trust, pins, handshake). Once every new extension is ready or has given
up, :func:`plan_swap` decides, per extension identity:

* the new version is running, or was disabled, or nothing of the old one runs:
  the new one goes in, the old one (if any) is retired (stopped after the swap);
* the new version was quarantined because its granted paths are no longer what
  was validated (see :mod:`sandbox._pin`): it goes in too, quarantined, and the
  old one is retired; a grant swapped under an extension is never left running;
* the new version did not start otherwise (bad handshake, crash or silence
  before ready, its directory no longer matches its trust pin) while the old one
  runs: the old one is kept, the new one discarded;
* the manifest no longer loads (discovery reported it) while the old one runs:
  the old one is kept (after the others: its place in the load order is gone);
* the extension is gone from discovery: the old one is retired;
* a child started at run time (a stdio MCP server) is not the reload's: it stays.

Pure: the supervisor carries the plan out in one step (registry, interception
chain and listing switch together) and then stops what it retires.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Sequence
from typing import Generic, Protocol, TypeVar

from ._api import ReloadStats
from ._lifecycle import ExtensionState
from ._manifest import Discovery, ExtensionSpec

__all__ = ["Member", "Swap", "plan_swap", "reload_stats"]


class Member(Protocol):
    """What the plan needs of an extension."""

    @property
    def name(self) -> str: ...

    @property
    def problem(self) -> str: ...

    @property
    def spec(self) -> ExtensionSpec: ...

    @property
    def state(self) -> ExtensionState: ...

    @property
    def listed(self) -> bool: ...


M = TypeVar("M", bound=Member)

#: States of a new version that replace the old one whatever it does.
_REPLACING = frozenset(
    {ExtensionState.RUNNING, ExtensionState.DISABLED, ExtensionState.QUARANTINED}
)


@typing.final
class Swap(Generic[M]):
    """The outcome of :func:`plan_swap`."""

    __slots__ = ("discarded", "exts", "kept", "retired", "staying")

    def __init__(self) -> None:
        #: The set after the swap, in load order.
        self.exts: list[M] = []
        #: Old extensions to stop: replaced, disabled or gone.
        self.retired: list[M] = []
        #: New extensions that did not start while their old version runs on.
        self.discarded: list[M] = []
        #: Old extensions kept, running their previous version.
        self.kept: list[M] = []
        #: Children started at run time: the reload leaves them as they are.
        self.staying: list[M] = []

    def __repr__(self) -> str:
        return (
            f"<Swap exts={len(self.exts)} retired={len(self.retired)} "
            f"discarded={len(self.discarded)} kept={len(self.kept)}>"
        )


def _replaces(new: Member, old: Member | None) -> bool:
    if old is None or not old.listed:
        return True
    return new.state in _REPLACING


def plan_swap(old: Sequence[M], new: Sequence[M], unloadable: Iterable[str]) -> Swap[M]:
    """Decide the swap of a reload (see the module docstring).

    Args:
        old: the running generation.
        new: the new generation, each ready or given up (``nursery.start`` returned).
        unloadable: manifest paths discovery could not load this time.
    """
    swap: Swap[M] = Swap()
    by_identity = {e.spec.identity: e for e in old}
    for ext in new:
        prev = by_identity.pop(ext.spec.identity, None)
        if _replaces(ext, prev):
            swap.exts.append(ext)
            if prev is not None:
                swap.retired.append(prev)
        else:
            assert prev is not None
            swap.exts.append(prev)
            swap.kept.append(prev)
            swap.discarded.append(ext)
    broken = set(unloadable)
    for prev in by_identity.values():
        if prev.spec.source == "mcp":
            swap.exts.append(prev)
            swap.staying.append(prev)
        elif prev.listed and prev.spec.manifest_path in broken:
            swap.exts.append(prev)
            swap.kept.append(prev)
        else:
            swap.retired.append(prev)
    return swap


def reload_stats(discovery: Discovery, swap: Swap[M], stopped: int) -> ReloadStats:
    """What a reload did: ``stopped`` serving old ones, what loaded, got ready, failed, kept."""
    kept = {e.name for e in swap.kept}
    mine = [e for e in swap.exts if e not in swap.staying and e.name not in kept]
    errors = [str(p) for p in discovery.problems]
    errors += [f"{e.name}: {e.problem}" for e in swap.discarded]
    errors += [
        f"{e.name}: {e.problem}"
        for e in mine
        if e.problem and e.state is not ExtensionState.RUNNING
    ]
    return ReloadStats(
        stopped=stopped,
        loaded=len([s for s in discovery.specs if s.manifest.enabled]),
        ready=sum(1 for e in mine if e.state is ExtensionState.RUNNING),
        errors=errors,
        kept_old=sorted(kept),
    )
