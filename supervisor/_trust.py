"""Explicit trust: project-local and installed extensions run only as the user pinned them.

A *pin* records, per extension identity (see :func:`~supervisor._config.identity_of`),
the digest of its directory's content (:mod:`supervisor._digest`) and its resolved
permissions. An extension whose content or permissions differ from its pin, or that
has none, is not started until the user trusts it again (``corral ext trust``, or
the prompt in ``corral chat``). ``corral ext install`` pins what it installed.
Extensions named with ``--ext`` are trusted for that run: the user named them.

The pins live in ``$CORRAL_HOME/state/trust.json``: a JSON object written atomically
(temporary file, ``fsync``, rename) with mode 0600 in a 0700 directory, under an
exclusive ``flock`` on ``trust.lock`` beside it for every read-modify-write (a
:class:`~supervisor._statefile.StateFile`). A store
that is not a regular file owned by the user, or that others may write, is refused:
whoever can write it could trust anything.
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import functools
import os
import shlex
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from sandbox import Permissions
from sandbox.log import get_logger

from ._config import data_dir, log_file, quarantine_file
from ._digest import DigestLimits, TreeDigest, digest_tree
from ._exceptions import DirectoryUnhashable, TrustError, TrustStoreError
from ._manifest import ExtensionSpec
from ._statefile import StateFile, StateFileRefused

__all__ = [
    "TrustPin",
    "TrustState",
    "TrustStore",
    "TrustVerdict",
    "canonical_permissions",
    "describe_permissions",
    "describe_program",
    "trust_command",
]

log = get_logger(__name__)

_STORE_MAX = 64 * 1024 * 1024


class TrustState(enum.Enum):
    """How an extension stands against its pin."""

    #: Pinned, and content and permissions are as pinned.
    TRUSTED = "trusted"
    #: Named with ``--ext``: trusted for this run without a pin.
    IMPLICIT = "--ext"
    #: Never trusted (or untrusted since).
    NEW = "untrusted"
    #: Its directory's content differs from the pin.
    CHANGED = "changed"
    #: Same content, but its permissions resolve differently than when pinned.
    PERMISSIONS_CHANGED = "permissions changed"
    #: Its directory cannot be digested (too large, unreadable): it cannot be pinned.
    UNHASHABLE = "unhashable"


class TrustPin(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the user trusted, for one extension identity."""

    name: str
    #: Real path of the extension's directory.
    dir: str
    #: ``project`` or ``global`` (where it was found when trusted).
    source: str
    #: Digest of the directory's content (``sha256:<hex>``).
    content: str
    #: The resolved permissions, fields at their defaults left out.
    permissions: dict[str, Any]
    files: int
    bytes: int
    #: When, in UTC (ISO 8601).
    trusted_at: str


class _StoreFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    version: int = 1
    pins: dict[str, TrustPin] = {}


_decoder = msgspec.json.Decoder(_StoreFile)


class TrustVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of checking one extension against its pin."""

    spec: ExtensionSpec
    state: TrustState
    #: The digest just taken (None when it could not be, or was not needed).
    tree: TreeDigest | None = None
    #: The pin it was compared with, if any.
    pin: TrustPin | None = None
    #: One line for the user when not :attr:`ok`, naming the command that trusts it.
    problem: str = ""

    @property
    def ok(self) -> bool:
        """The extension may start."""
        return self.state in (TrustState.TRUSTED, TrustState.IMPLICIT)


def _non_default(struct: msgspec.Struct) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in msgspec.structs.fields(struct):
        value = getattr(struct, field.name)
        if isinstance(value, msgspec.Struct):
            inner = _non_default(value)
            if inner:
                out[field.encode_name] = inner
            continue
        if field.default is not msgspec.NODEFAULT:
            default = field.default
        elif field.default_factory is not msgspec.NODEFAULT:
            default = field.default_factory()
        else:
            default = msgspec.NODEFAULT
        if value != default:
            out[field.encode_name] = msgspec.to_builtins(value)
    return out


def canonical_permissions(perms: Permissions) -> dict[str, Any]:
    """Resolved permissions as a plain dict, fields at their defaults left out.

    Leaving defaults out keeps existing pins valid when corral adds a permission
    field (with a default), while any grant an extension asks for is compared.
    """
    return _non_default(perms)


#: Short names of permission fields in :func:`describe_permissions`; others show as is.
_ALIASES = {"network": "net", "read_only": "ro", "read_write": "rw", "data_dir": "data dir"}
#: Limits: (label, unit suffix).
_LIMITS = {
    "memory_mb": ("mem", "M"),
    "processes": ("procs", ""),
    "open_files": ("files", ""),
    "tmp_mb": ("tmp", "M"),
    "file_mb": ("fsize", "M"),
}


def _short_path(value: Any) -> str:
    text = str(value)
    home = str(Path.home())
    if text == home or text.startswith(home.rstrip("/") + "/"):
        return "~" + text[len(home.rstrip("/")) :]
    return text


def describe_permissions(perms: Permissions | dict[str, Any]) -> str:
    """Permissions in one compact line, e.g. ``net:api.github.com, rw:~/proj, env:API_KEY``.

    ``network: true`` shows as ``net:ANYWHERE (risky)``: the host's whole network, its
    loopback services and LAN included. Only what differs from the defaults is
    shown (no network, no extra paths or
    environment, a private data directory, the default limits); ``defaults`` when
    nothing does. Fields are formatted by shape, so a field added later shows up
    too: a flag as its name, a list as ``name:item`` per item, a group of limits as
    ``label value``.
    """
    fields = canonical_permissions(perms) if isinstance(perms, Permissions) else perms
    parts: list[str] = []
    for name, value in fields.items():
        label = _ALIASES.get(name, name)
        if name == "network" and value is True:
            parts.append(f"{label}:ANYWHERE (risky)")
        elif isinstance(value, bool):
            parts.append(label if value else f"no {label}")
        elif isinstance(value, list):
            parts += [f"{label}:{_short_path(item)}" for item in value]
        elif isinstance(value, dict):
            for key, inner in value.items():
                tag, unit = _LIMITS.get(key, (key, ""))
                parts.append(f"{tag} {inner}{unit}")
        else:
            parts.append(f"{label}={value}")
    return ", ".join(parts) or "defaults"


def describe_program(spec: ExtensionSpec) -> str:
    """Which file runs ``spec`` (``ext list``, the trust screen): a path in its
    directory, a file outside it, a program found on ``PATH`` (with its real file),
    corral's Python (a bare ``python3``) or one of corral's tool-host runners."""
    manifest = spec.manifest
    if manifest.runtime is not None:
        return f"corral's {manifest.runtime.value} tool-host runner"
    if spec.exec_lookup == "python":
        return f"corral's Python ({spec.exec_path})"
    real = os.path.realpath(spec.exec_path)
    if spec.exec_lookup == "path":
        via = f" = {real}" if real != spec.exec_path else ""
        return f"{spec.exec_path}{via} (found on PATH)"
    rel = os.path.relpath(real, os.path.realpath(spec.dir))
    return f"{real} (outside its directory)" if rel.startswith("../") else rel


def trust_command(spec: ExtensionSpec) -> str:
    """The exact command that trusts ``spec``: by path, relative to here when inside it."""
    where = Path(spec.dir)
    with contextlib.suppress(ValueError, OSError):
        rel = where.relative_to(Path.cwd())
        if rel.parts:
            return f"corral ext trust {shlex.quote(str(rel))}"
    short = _short_path(where)
    if short.startswith("~/"):
        return f"corral ext trust ~/{shlex.quote(short[2:])}"
    return f"corral ext trust {shlex.quote(str(where))}"


_WHY = {
    TrustState.NEW: "is not trusted",
    TrustState.CHANGED: "changed since it was trusted",
    TrustState.PERMISSIONS_CHANGED: "asks for other permissions than when it was trusted",
}


def _verdict(
    spec: ExtensionSpec,
    state: TrustState,
    tree: TreeDigest | None,
    pin: TrustPin | None,
    detail: str = "",
) -> TrustVerdict:
    who = f"extension {spec.name} ({spec.source}, {_short_path(spec.dir)})"
    if state is TrustState.TRUSTED:
        problem = ""
    elif state is TrustState.UNHASHABLE:
        problem = f"{who} cannot be pinned: {detail}; trim its directory"
    else:
        problem = f"{who} {_WHY[state]}{detail}; review it, then run: {trust_command(spec)}"
    return TrustVerdict(spec=spec, state=state, tree=tree, pin=pin, problem=problem)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


@typing.final
class TrustStore:
    """The pins under one corral home (see the module docstring).

    Every method does blocking file-system work: run it in a worker thread from
    async code.
    """

    def __init__(self, home: str | os.PathLike[str], limits: DigestLimits | None = None) -> None:
        self._home = home
        self.limits = limits or DigestLimits()

    # Made when first used (a Path costs more than the rest of a supervisor's set-up,
    # and an extension named by --ext never needs the store).

    @functools.cached_property
    def dir(self) -> Path:
        """``<home>/state``, where the store lives."""
        return Path(self._home) / "state"

    @functools.cached_property
    def path(self) -> Path:
        """The store, ``<home>/state/trust.json``."""
        return self.dir / "trust.json"

    @functools.cached_property
    def _file(self) -> StateFile:
        # ``trust.lock``, not ``trust.json.lock``: the lock every corral has taken.
        return StateFile(self.path, lock=self.dir / "trust.lock", limit=_STORE_MAX)

    def __repr__(self) -> str:
        return f"<TrustStore {str(self.path)!r}>"

    # --- the file ---------------------------------------------------------------

    def pins(self) -> dict[str, TrustPin]:
        """Every pin, by identity.

        Raises:
            TrustStoreError: the store is unreadable, corrupt, or others may write it.
        """
        where = str(self.path)
        try:
            raw = self._file.read()
        except StateFileRefused as exc:
            raise TrustStoreError(where, exc.reason) from exc
        except OSError as exc:
            raise TrustStoreError(where, f"cannot open: {exc.strerror}") from exc
        if raw is None:
            return {}
        try:
            return _decoder.decode(raw).pins
        except msgspec.DecodeError as exc:
            raise TrustStoreError(
                where, f"is corrupt ({exc}); remove it to start over (every extension asks again)"
            ) from None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self._file.locked())
            except OSError as exc:
                raise TrustStoreError(str(self.path), f"cannot lock: {exc.strerror}") from exc
            yield

    def _write(self, pins: dict[str, TrustPin]) -> None:
        data = msgspec.json.format(msgspec.json.encode(_StoreFile(pins=pins)), indent=2)
        try:
            self._file.replace(data + b"\n")
        except OSError as exc:  # a refusal's strerror is its reason
            raise TrustStoreError(str(self.path), f"cannot write: {exc.strerror}") from exc

    # --- checking and pinning -------------------------------------------------------

    def digest(self, spec: ExtensionSpec) -> TreeDigest:
        """Digest ``spec``'s directory, and every file outside it that will run.

        What lies outside the directory is code the walk would not cover: an
        ``exec`` there (an absolute path, ``../``, or a link leading out), a file its
        ``args`` name, a tool host's ``config.modules`` leading out (see
        :func:`named_paths`), and the targets of links leading out of the directory,
        files and directories (see :func:`~supervisor._digest.digest_tree`); each is
        pinned by content too.

        Raises:
            DirectoryUnhashable: see :func:`~supervisor._digest.digest_tree`.
        """
        root = os.path.realpath(spec.dir)
        return digest_tree(root, self.limits, also=named_paths(spec))

    def verify(self, spec: ExtensionSpec) -> TrustVerdict:
        """Check ``spec`` against its pin, digesting its directory now.

        The manifest in the digest must be the very one ``spec`` was parsed from;
        if it changed in between, the verdict is :attr:`TrustState.CHANGED`.

        Raises:
            TrustStoreError: the store cannot be read (see :meth:`pins`).
        """
        if spec.source in ("cli", "mcp"):  # named by the user; an MCP server: its config's
            return TrustVerdict(spec=spec, state=TrustState.IMPLICIT)
        pin = self.pins().get(spec.identity)
        try:
            tree = self.digest(spec)
        except DirectoryUnhashable as exc:
            return _verdict(spec, TrustState.UNHASHABLE, None, pin, exc.reason)
        manifest = tree.entry(os.path.basename(spec.manifest_path))
        if manifest is None or manifest.payload != spec.manifest_sha256:
            why = " (its manifest changed while it was being checked)"
            return _verdict(spec, TrustState.CHANGED, tree, pin, why)
        if pin is None:
            return _verdict(spec, TrustState.NEW, tree, pin)
        if pin.content != tree.digest:
            return _verdict(spec, TrustState.CHANGED, tree, pin)
        now = canonical_permissions(spec.manifest.permissions)
        if pin.permissions != now:
            was = describe_permissions(pin.permissions)
            why = f" (now: {describe_permissions(now)}; was: {was})"
            return _verdict(spec, TrustState.PERMISSIONS_CHANGED, tree, pin, why)
        return _verdict(spec, TrustState.TRUSTED, tree, pin)

    def pin(self, spec: ExtensionSpec, tree: TreeDigest) -> TrustPin:
        """Trust ``spec`` as digested in ``tree`` (what the user was shown).

        An installed extension pinned for the first time also takes over the state
        an older corral kept under its name (see :func:`_adopt_legacy_state`).

        Raises:
            TrustError: ``tree`` is not a digest of the manifest ``spec`` came from.
            TrustStoreError: the store cannot be read or written.
        """
        manifest = tree.entry(os.path.basename(spec.manifest_path))
        if manifest is None or manifest.payload != spec.manifest_sha256:
            raise TrustError(spec.manifest_path, "changed while it was being checked; try again")
        pin = TrustPin(
            name=spec.name,
            dir=os.path.realpath(spec.dir),
            source=spec.source,
            content=tree.digest,
            permissions=canonical_permissions(spec.manifest.permissions),
            files=tree.files,
            bytes=tree.bytes,
            trusted_at=_now(),
        )
        with self._locked():
            pins = self.pins()
            pins[spec.identity] = pin
            self._write(pins)
        moved = _adopt_legacy_state(self.dir.parent, spec)
        if moved:
            log.info("legacy_state_adopted", extension=spec.name, moved=moved)
        return pin

    def unpin(self, identity: str) -> bool:
        """Forget the pin of ``identity``; False when there was none.

        Raises:
            TrustStoreError: the store cannot be read or written.
        """
        with self._locked():
            pins = self.pins()
            found = pins.pop(identity, None) is not None
            if found:
                self._write(pins)
        return found

    def problem(self, spec: ExtensionSpec) -> str | None:
        """Why ``spec`` may not start now, or None when it may (never raises)."""
        try:
            verdict = self.verify(spec)
        except TrustError as exc:
            return f"extension {spec.name}: cannot check trust: {exc}"
        return None if verdict.ok else verdict.problem


def named_paths(spec: ExtensionSpec) -> list[str]:
    """Existing files outside ``spec``'s directory that its manifest names as code:
    the ``exec``, ``args`` (also the value of ``--opt=PATH``) and a tool host's
    ``config.modules``, relative ones against its directory. A directory named in
    ``args`` is taken for data (a link to one is followed, see :meth:`TrustStore.digest`)."""
    root = os.path.realpath(spec.dir)
    manifest = spec.manifest
    # A tool host run by corral's runner has no program of its own (exec_path is
    # its directory); the runner is corral's code, not the extension's; so is the
    # interpreter a bare python3 names. A program found on PATH is pinned like any
    # exec outside the directory: when it changes (an upgrade), trust is asked again.
    own = manifest.runtime is None and spec.exec_lookup != "python"
    values = [spec.exec_path] if own else []
    values += [v for a in manifest.args for v in (a, a.partition("=")[2]) if v]
    modules = manifest.config.get("modules") if manifest.runtime is not None else None
    if isinstance(modules, list):
        values += [m for m in modules if isinstance(m, str)]
    out: list[str] = []
    for value in values:
        if "\x00" in value:
            continue
        path = os.path.join(root, os.path.expanduser(value))
        real = os.path.realpath(path)
        if real != root and not real.startswith(root + "/") and os.path.isfile(real):
            out.append(real)
    return list(dict.fromkeys(out))


def _adopt_legacy_state(home: str | Path, spec: ExtensionSpec) -> list[str]:
    """Move an installed extension's name-keyed state to its identity; returns what moved.

    Before identities, the data directory, log and quarantine record were keyed by
    name alone. They belong to the installed extension of that name, so they move
    to it when it is pinned, unless it already has state of its own. Links are
    left where they are (corral never made them).
    """
    if spec.source != "global":
        return []
    old_quarantine = Path(home) / "state" / "quarantine" / f"{spec.name}.txt"
    moves = [
        (Path(home) / "data" / spec.name, data_dir(home, spec.identity)),
        (Path(home) / "logs" / f"ext-{spec.name}.log", log_file(home, spec.identity)),
        (old_quarantine, quarantine_file(home, spec.identity)),
    ]
    moved: list[str] = []
    for old, new in moves:
        if old.is_symlink() or not old.exists() or new.exists() or new.is_symlink():
            continue
        with contextlib.suppress(OSError):
            os.rename(old, new)
            moved.append(str(new))
    return moved
