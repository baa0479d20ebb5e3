"""Which extension owns which tool and command name.

Pure bookkeeping, rebuilt from the extensions (and tool hosts) in load order
whenever a registration changes. Built-in names always win; among extensions the
first loaded wins (load order, not registration timing, so the outcome is
deterministic). Every clash is logged once, in corral's log and in the log of the
one that lost (``ext logs``).
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping
from typing import Protocol

from sandbox.log import get_logger

from . import _frames as f
from ._api import CommandInfo, ToolInfo
from ._manifest import ChildKind

__all__ = ["Owner", "Registry"]

log = get_logger(__name__)


class Owner(Protocol):
    """What the registry needs of an extension."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> ChildKind: ...

    @property
    def tools(self) -> Mapping[str, f.RegisterTool]: ...

    @property
    def commands(self) -> Mapping[str, f.RegisterCommand]: ...

    @property
    def listed(self) -> bool:
        """Its registrations count (running, or restarting after a crash)."""
        ...

    def note(self, text: str) -> None:
        """Write ``text`` to its own log."""
        ...


OwnerT = typing.TypeVar("OwnerT", bound=Owner)


@typing.final
class Registry(typing.Generic[OwnerT]):
    """Name → owner maps for tools and commands."""

    def __init__(self, reserved_tools: Iterable[str], reserved_commands: Iterable[str]) -> None:
        self._reserved_tools = frozenset(reserved_tools)
        self._reserved_commands = frozenset(reserved_commands)
        self._tools: dict[str, tuple[OwnerT, f.RegisterTool]] = {}
        self._commands: dict[str, tuple[OwnerT, f.RegisterCommand]] = {}
        self._logged: set[tuple[str, str, str]] = set()

    def rebuild(self, owners: Iterable[OwnerT]) -> bool:
        """Recompute both maps from ``owners`` in load order; returns True when what
        the agent sees changed."""
        before = (self.tool_infos(), self.command_infos())
        tools: dict[str, tuple[OwnerT, f.RegisterTool]] = {}
        commands: dict[str, tuple[OwnerT, f.RegisterCommand]] = {}
        for owner in owners:
            if not owner.listed:
                continue
            for name, tool in owner.tools.items():
                self._claim(tools, self._reserved_tools, "tool", name, owner, tool)
            for name, cmd in owner.commands.items():
                self._claim(commands, self._reserved_commands, "command", name, owner, cmd)
        self._tools, self._commands = tools, commands
        return before != (self.tool_infos(), self.command_infos())

    def _claim(
        self,
        table: dict[str, tuple[OwnerT, typing.Any]],
        reserved: frozenset[str],
        kind: str,
        name: str,
        owner: OwnerT,
        item: object,
    ) -> None:
        if name in reserved:
            self._log_once(kind, name, owner, "built-in")
            return
        held = table.get(name)
        if held is not None:
            self._log_once(kind, name, owner, held[0].name)
            return
        table[name] = (owner, item)

    def _log_once(self, kind: str, name: str, loser: OwnerT, winner: str) -> None:
        key = (f"{kind}:{name}", loser.name, winner)
        if key not in self._logged:
            self._logged.add(key)
            log.warning("name_clash", kind=kind, name=name, shadowed=loser.name, winner=winner)
            loser.note(f"{kind} {name!r} not registered: the name is taken by {winner}")

    def tool_owner(self, name: str) -> OwnerT | None:
        """The extension that runs tool ``name``."""
        held = self._tools.get(name)
        return held[0] if held else None

    def command_owner(self, name: str) -> OwnerT | None:
        """The extension that runs command ``name``."""
        held = self._commands.get(name)
        return held[0] if held else None

    def tool_infos(self) -> list[ToolInfo]:
        """Every extension tool, in load order."""
        return [
            ToolInfo(
                name=name,
                description=t.description,
                schema=t.schema,
                extension=owner.name,
                kind=owner.kind,
            )
            for name, (owner, t) in self._tools.items()
        ]

    def command_infos(self) -> list[CommandInfo]:
        """Every extension command, in load order."""
        return [
            CommandInfo(name=name, description=c.description, extension=owner.name)
            for name, (owner, c) in self._commands.items()
        ]
