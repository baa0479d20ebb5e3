"""Trust in the CLI: what the user is shown before trusting, and the checks before a start.

``corral ext trust`` and the prompt of ``corral chat`` show the same description
(:func:`describe`); ``run``, ``rpc`` and ``chat`` check every project-local and
installed extension before the supervisor starts any (:func:`check_extensions`).
The supervisor checks again before every spawn, so a change in between is caught
too; these checks are for the user: one clear answer before anything runs.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

import trio

from supervisor import (
    Discovery,
    ExtensionSpec,
    TrustError,
    TrustState,
    TrustStore,
    TrustVerdict,
    corral_home,
    describe_permissions,
    describe_program,
    discover,
    trust_command,
)
from supervisor.lowlevel import TreeDigest

from .._options import AgentOptions
from .render import HumanRenderer
from .safe_text import visible

__all__ = ["ask_trust", "check_extensions", "describe", "shadowed_by", "visible"]


#: What ``network: true`` means, for the user deciding whether to trust it.
_ANYWHERE = (
    "RISKY: anywhere, as you: the internet, your LAN, this machine's own services "
    "(127.0.0.1, abstract sockets); a list of destinations would do"
)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def _status(v: TrustVerdict) -> str:
    at = v.pin.trusted_at if v.pin else ""
    match v.state:
        case TrustState.TRUSTED:
            return f"trusted on {at}"
        case TrustState.IMPLICIT:
            return "named with --ext: trusted for that run only"
        case TrustState.NEW:
            return "never trusted"
        case TrustState.CHANGED:
            return f"CHANGED since it was trusted on {at}"
        case TrustState.PERMISSIONS_CHANGED:
            assert v.pin is not None
            was = describe_permissions(v.pin.permissions)
            return f"PERMISSIONS CHANGED since it was trusted on {at} (were: {was})"
        case TrustState.UNHASHABLE:
            return v.problem


def describe(v: TrustVerdict, shadows: Iterable[ExtensionSpec] = ()) -> list[str]:
    """What the user reviews before trusting: one ``label  value`` line per fact."""
    spec = v.spec
    m = spec.manifest
    rows = [("extension", f"{spec.name} {m.version}".rstrip() + f" ({spec.source})")]
    if m.description:
        rows.append(("description", m.description))
    rows.append(("directory", spec.dir))
    exe = describe_program(spec)
    if m.runtime is not None:  # a tool host run by corral's runner
        exe += f", modules: {m.config.get('modules')!r}"
    rows.append(("runs", " ".join([exe, *m.args])))
    if spec.exec_note:
        rows.append(("needs", spec.exec_note))
    rows.append(("permissions", describe_permissions(m.permissions)))
    if m.permissions.network is True:
        rows.append(("network", _ANYWHERE))
    elif m.permissions.destinations:
        listed = ", ".join(m.permissions.destinations)
        rows.append(("network", f"only {listed}, through corral's proxy"))
    if v.tree is not None:
        size = f"{v.tree.files} files, {_size(v.tree.bytes)}"
        rows.append(("content", f"{v.tree.digest[:23]}… ({size})"))
        for link in v.tree.outside_links:
            rows.append(("link out", f"{link} (pinned: what it points to now)"))
    for other in shadows:
        rows.append(
            ("shadows", f"{other.name} ({other.source}, {other.dir}); each keeps its own state")
        )
    rows.append(("status", _status(v)))
    return [f"  {label:<12} {visible(value)}" for label, value in rows]


def shadowed_by(found: Discovery, spec: ExtensionSpec) -> list[ExtensionSpec]:
    """The extensions ``spec`` shadows (same name, later in discovery order)."""
    return [s for s, winner in found.duplicates if winner.identity == spec.identity]


def _home(options: AgentOptions) -> str:
    # As open_agent resolves it.
    return str(Path(options.home).expanduser().absolute()) if options.home else str(corral_home())


def check_extensions(options: AgentOptions) -> tuple[Discovery, list[TrustVerdict]]:
    """Discover as ``open_agent`` will, and check every enabled extension that needs trust.

    Returns the discovery and the verdicts that do not allow a start. Blocking: run
    it in a worker thread from async code.

    Raises:
        TrustStoreError: the trust store cannot be read.
    """
    cwd = os.path.realpath(os.path.expanduser(options.cwd))
    home = _home(options)
    found = discover(
        list(options.ext_paths), project_dir=cwd, home=home, include_installed=options.discover
    )
    store = TrustStore(home)
    verdicts = [store.verify(s) for s in found.specs if s.manifest.enabled and s.source != "cli"]
    return found, [v for v in verdicts if not v.ok]


async def _trusted(
    spec: ExtensionSpec,
    tree: TreeDigest,
    store: TrustStore,
    renderer: HumanRenderer,
    read: Callable[[str], Awaitable[str | None]],
) -> bool:
    answer = await read(f"trust {spec.name} and start it? [y/N] ")
    if answer is None or answer.strip().lower() not in ("y", "yes"):
        return False
    try:
        await trio.to_thread.run_sync(store.pin, spec, tree)
    except TrustError as exc:
        renderer.line(renderer.style(f"! not trusted: {exc}", "red"))
        return False
    renderer.line(f"trusted {spec.name}")
    return True


async def ask_trust(
    options: AgentOptions,
    renderer: HumanRenderer,
    read: Callable[[str], Awaitable[str | None]],
) -> None:
    """``corral chat``: ask y/N for each extension that needs trust, before any starts.

    A yes pins the extension as shown; anything else (or end of input) leaves it
    untrusted, and the supervisor will not start it.

    Cancellation: stops asking; what was answered so far is recorded.
    """
    found, verdicts = await trio.to_thread.run_sync(check_extensions, options)
    store = TrustStore(_home(options))
    for v in verdicts:
        renderer.line(renderer.style(f"extension {v.spec.name} needs your trust:", "bold"))
        for line in describe(v, shadowed_by(found, v.spec)):
            renderer.line(line)
        if v.tree is not None and await _trusted(v.spec, v.tree, store, renderer, read):
            continue
        hint = trust_command(v.spec) if v.tree is not None else "trim its directory"
        renderer.line(renderer.style(f"not starting {v.spec.name} ({hint})", "yellow"))
