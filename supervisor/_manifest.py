"""Manifests (``extension.json``) of every kind of supervised child, and discovery.

A manifest declares one supervised child: an extension (``"kind": "extension"``, the
default) or a tool host (``"kind": "tool-host"``, seed ``tool-host-protocol.md``).
Both are discovered, trusted, sandboxed and supervised the same way; the kind only
decides what is spoken over the child's stdio (see ``docs/toolkit.md``). A tool host
runs one of corral's runners (``"runtime": "python"`` or ``"node"``) or its own
program (``exec``), and gets its ``config`` object with ``init``.

A manifest is read only if it is a regular file of at most :data:`MANIFEST_MAX`
bytes (a link to one is followed): a FIFO, a device or a huge file in a cloned
repository is a :class:`~supervisor._exceptions.ManifestError` like any other, never
waited on or read whole. A manifest is validated field by field; every problem is a
:class:`~supervisor._exceptions.ManifestError` naming the file and the field.
Discovery order is ``--ext`` paths, then ``./.corral/extensions``, then
``$CORRAL_HOME/extensions``; the first of a name wins (whatever its kind) and later
ones are reported as duplicates, never started.
"""

from __future__ import annotations

import enum
import hashlib
import os
import re
import stat
from pathlib import Path
from typing import Any, Literal

import msgspec

from sandbox import Permissions, PermissionsError, Pin, check_permissions

from ._config import RestartPolicy, choice_path, identity_of_real
from ._exceptions import ManifestError
from ._runners import PYTHON_NAMES, corral_python, find_on_path, project_roots, runner_note
from ._smallfile import SMALL_FILE_MAX, FileRefused, read_small_file

__all__ = [
    "MANIFEST_NAME",
    "ChildKind",
    "Discovery",
    "ExtensionSpec",
    "Manifest",
    "Runtime",
    "Source",
    "discover",
    "load_manifest",
    "mcp_server_spec",
]

MANIFEST_NAME = "extension.json"
#: The largest manifest read (bytes); a larger file is refused unread.
MANIFEST_MAX = SMALL_FILE_MAX
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_FIELD_RE = re.compile(r"at `\$\.?([^`]*)`")

#: Where a child was declared: ``--ext``, project-local, installed, or at run time
#: for an MCP server (whose trust is its MCP config's).
Source = Literal["cli", "project", "global", "mcp"]

#: How ``exec`` was found: a path (absolute, or relative to the directory), a bare
#: name on ``PATH``, or a bare Python name (corral's own interpreter).
ExecLookup = Literal["", "path", "python"]


class ChildKind(enum.StrEnum):
    """What a manifest declares: which protocol its child speaks over stdio."""

    #: An extension (seed extensions-phase4: hello, registrations, tool calls, hooks).
    EXTENSION = "extension"
    #: A tool host (seed tool-host-protocol v1: init, get_tool_schemas, execute_tool).
    TOOL_HOST = "tool-host"
    #: A stdio MCP server, started at run time: its JSON-RPC lines are relayed to the
    #: agent's MCP client (never declared by an ``extension.json``).
    MCP_SERVER = "mcp-server"


class Runtime(enum.StrEnum):
    """The tool-host runners corral ships (``runtime`` in a tool host's manifest)."""

    #: corral's Python runner (``corral_toolhost``): serves ``corral_tools`` tools.
    PYTHON = "python"
    #: ``node host.cjs``: serves JavaScript tool modules.
    NODE = "node"


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    """The contents of ``extension.json`` (the seed's fields plus corral's own)."""

    name: str
    #: The program; required for an extension, and for a tool host without ``runtime``.
    exec: str = ""
    #: corral: what the child speaks (an extension unless it says otherwise).
    kind: ChildKind = ChildKind.EXTENSION
    #: corral, tool hosts: one of corral's runners instead of an ``exec`` of its own.
    runtime: Runtime | None = None
    #: corral, tool hosts: the object sent with ``init`` (checked against the host's
    #: ``get_config_schema`` first).
    config: dict[str, Any] = {}
    version: str = ""
    args: list[str] = []
    language: str = ""
    description: str = ""
    enabled: bool = True
    #: corral: restart policy after the process exits on its own.
    restart: RestartPolicy = "on-failure"
    #: corral: what the sandbox lets the extension do.
    permissions: Permissions = Permissions()


_KNOWN_FIELDS = frozenset(Manifest.__struct_fields__)
_decoder: msgspec.json.Decoder[dict[str, Any]] = msgspec.json.Decoder(dict[str, Any])


class ExtensionSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A validated manifest and where it came from."""

    manifest: Manifest
    #: Absolute directory of the extension.
    dir: str
    #: Absolute path of ``extension.json``.
    manifest_path: str
    source: Source
    #: Absolute path of the executable (``exec`` resolved against ``dir``); for a tool
    #: host run by one of corral's runners, ``dir`` itself.
    exec_path: str
    #: Name plus a hash of the directory's real path; keys the extension's state.
    identity: str
    #: SHA-256 (hex) of the manifest bytes this spec was parsed from, so a trust
    #: check can tell that the manifest it digests is the one that will be used.
    manifest_sha256: str
    #: Fields present in the file that corral does not know (reported, not fatal).
    unknown_fields: list[str] = []
    #: Identities of the extension's directory and grants when validated: every
    #: spawn binds these very files (see :mod:`sandbox._pin`).
    pins: list[Pin] = []
    #: Variables set to these values (an MCP server's ``env``; never from a manifest).
    env: dict[str, str] = {}
    #: How ``exec`` was found (``exec_path`` is then the file on ``PATH``, or corral's
    #: Python); see :mod:`supervisor._runners`.
    exec_lookup: ExecLookup = ""
    #: What its runner needs that its permissions withhold ("" when nothing).
    exec_note: str = ""

    @property
    def name(self) -> str:
        """The extension's name."""
        return self.manifest.name

    @property
    def kind(self) -> ChildKind:
        """What the child speaks."""
        return self.manifest.kind


class Discovery(msgspec.Struct, frozen=True, kw_only=True):
    """Result of scanning the extension directories."""

    #: Extensions to run (or show), in load order.
    specs: list[ExtensionSpec]
    #: Manifests that could not be loaded.
    problems: list[ManifestError]
    #: Later extensions shadowed by an earlier one of the same name: (shadowed, winner).
    duplicates: list[tuple[ExtensionSpec, ExtensionSpec]]


def _field_of(exc: msgspec.ValidationError) -> str:
    match = _FIELD_RE.search(str(exc))
    return match.group(1) if match else ""


def load_manifest(
    path: str | os.PathLike[str],
    source: Source = "cli",
    *,
    home: str | None = None,
) -> ExtensionSpec:
    """Load and validate one manifest.

    Args:
        path: the ``extension.json`` file or the directory holding it.
        source: where it was found (shown in ``ext list``).
        home: corral's home, which permissions may never grant.

    Raises:
        ManifestError: naming the file and the field at fault.
    """
    where = _absolute(path)
    if os.path.isdir(where):
        where = os.path.join(where, MANIFEST_NAME)
    try:  # a FIFO, a device or a huge file is refused, never waited on or read whole
        raw = read_small_file(where, MANIFEST_MAX)
    except FileNotFoundError:
        raise ManifestError(where, "", "no extension.json here") from None
    except FileRefused as exc:
        raise ManifestError(where, "", exc.reason) from None
    except OSError as exc:
        raise ManifestError(where, "", f"cannot read: {exc.strerror}") from exc
    try:
        data = _decoder.decode(raw)
    except msgspec.ValidationError:
        raise ManifestError(where, "", "must be a JSON object") from None
    except msgspec.DecodeError as exc:
        raise ManifestError(where, "", f"not valid JSON ({exc})") from None
    try:
        manifest = msgspec.convert(data, Manifest)
    except msgspec.ValidationError as exc:
        field = _field_of(exc)
        message = str(exc).split(" - at ")[0]
        if "missing required field" in message:
            field = message.rsplit("`", 2)[-2]
            message = "is required"
        raise ManifestError(where, field, message) from None

    if not _NAME_RE.match(manifest.name):
        raise ManifestError(
            where, "name", f"{manifest.name!r} is not a valid name (letters, digits, . _ -)"
        )
    ext_dir = os.path.dirname(where)
    exec_path, lookup = _exec_path(manifest, ext_dir, where, project=source == "project")
    try:
        checked = check_permissions(
            manifest.permissions, ext_dir, home=_user_home(), corral_home=home or ""
        )
    except PermissionsError as exc:
        raise ManifestError(where, exc.field, exc.message) from None
    manifest = msgspec.structs.replace(manifest, permissions=checked.permissions)
    identity = identity_of_real(manifest.name, checked.pins[0].real)  # the directory's pin
    if home:
        try:  # the user's `ext enable`/`ext disable` wins over the manifest
            choice = read_small_file(choice_path(home, identity), 64).strip()
        except OSError:
            choice = b""
        if choice in (b"true", b"false"):
            manifest = msgspec.structs.replace(manifest, enabled=choice == b"true")
    return ExtensionSpec(
        manifest=manifest,
        dir=ext_dir,
        manifest_path=where,
        source=source,
        exec_path=exec_path,
        identity=identity,
        manifest_sha256=hashlib.sha256(raw).hexdigest(),
        unknown_fields=sorted(set(data) - _KNOWN_FIELDS),
        pins=checked.pins,
        exec_lookup=lookup,
        exec_note=runner_note(exec_path, manifest.args, checked.permissions),
    )


def _absolute(path: str | os.PathLike[str]) -> str:
    """``str(Path(path).expanduser().absolute())`` without building a Path (a start
    reads a manifest): ``~`` expanded, made absolute, and normalised as pathlib does
    (no empty or ``.`` component, no trailing ``/``; ``..`` is left to the kernel)."""
    p = os.path.expanduser(os.fspath(path))
    if not p.startswith("/"):
        p = os.path.join(os.getcwd(), p)
    if p.startswith("//") and not p.startswith("///"):
        return str(Path(p))  # POSIX leaves a leading // to the system: pathlib's rules
    if "//" in p or "/." in p or p.endswith("/"):
        return "/" + "/".join(c for c in p.split("/") if c and c != ".")
    return p


def _user_home() -> str:
    """The user's home directory; "" when unknown (a ``~`` grant is then refused)."""
    home = os.path.expanduser("~")
    return home if home.startswith("/") else ""


def _exec_path(
    manifest: Manifest, ext_dir: str, where: str, *, project: bool
) -> tuple[str, ExecLookup]:
    """The program to run, checked against the kind: ``exec``, or a runner's directory.

    A bare name (no ``/``) that is no file in the directory is looked up on ``PATH``
    (see :mod:`supervisor._runners`)."""
    host = manifest.kind is ChildKind.TOOL_HOST
    if not host and (manifest.runtime is not None or manifest.config):
        field = "runtime" if manifest.runtime is not None else "config"
        raise ManifestError(where, field, 'only a tool host has one (add "kind": "tool-host")')
    if host and manifest.runtime is not None:
        if manifest.exec:
            raise ManifestError(where, "exec", "a tool host has either runtime or exec, not both")
        return ext_dir, ""  # the runner is corral's; it runs in the directory
    if not manifest.exec.strip():
        hint = ' (or "runtime": "python" / "node" for a tool host)' if host else ""
        raise ManifestError(where, "exec", "is required and must not be empty" + hint)
    exec_path = _absolute(os.path.join(ext_dir, manifest.exec))  # (an absolute exec as is)
    if os.path.isfile(exec_path):
        return exec_path, ""
    name = manifest.exec
    if "/" in name or name in (".", ".."):
        raise ManifestError(where, "exec", f"{name!r} does not exist ({exec_path})")
    if PYTHON_NAMES.match(name):
        return corral_python(), "python"
    found, ignored = find_on_path(name, project_roots(ext_dir, project))
    if found is not None:
        return found, "path"
    why = f"; ignored: {', '.join(ignored)}" if ignored else ""
    raise ManifestError(
        where, "exec", f"{name!r} is neither a file in {ext_dir} nor a program on PATH{why}"
    )


def _scan(root: str) -> list[str]:
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    entries = [os.path.join(root, name) for name in names]
    return [e for e in entries if os.path.isdir(e) and os.path.exists(e + "/" + MANIFEST_NAME)]


def _directory_of(path: str) -> tuple[int, int] | None:
    """The device and inode of the extension directory ``path`` names (itself, or the
    directory holding the manifest it names); None if it cannot be looked at (its
    manifest's load then says why)."""
    try:
        st = os.stat(os.path.expanduser(path))
        if not stat.S_ISDIR(st.st_mode):
            st = os.stat(os.path.dirname(_absolute(path)))
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def discover(
    ext_paths: list[str] | tuple[str, ...] = (),
    *,
    project_dir: str | None = None,
    home: str,
    include_installed: bool = True,
) -> Discovery:
    """Find every extension, in load order.

    Args:
        ext_paths: ``--ext`` paths (directory or ``extension.json``), loaded first.
        project_dir: directory whose ``.corral/extensions`` holds project-local ones.
        home: corral's home; ``<home>/extensions`` holds global ones.
        include_installed: scan project-local and global directories too.
    """
    candidates: list[tuple[str, Source]] = [(p, "cli") for p in ext_paths]
    if include_installed:
        if project_dir is not None:
            local = os.path.join(project_dir, ".corral", "extensions")
            candidates += [(d, "project") for d in _scan(local)]
        candidates += [(d, "global") for d in _scan(os.path.join(home, "extensions"))]

    specs: list[ExtensionSpec] = []
    problems: list[ManifestError] = []
    duplicates: list[tuple[ExtensionSpec, ExtensionSpec]] = []
    by_name: dict[str, ExtensionSpec] = {}
    seen: set[tuple[int, int]] = set()
    for path, source in candidates:
        place = _directory_of(path) if len(candidates) > 1 else None
        if place in seen:
            continue  # the same directory again (``--ext`` naming an installed one): one extension
        if place is not None:
            seen.add(place)
        try:
            spec = load_manifest(path, source, home=home)
        except ManifestError as exc:
            problems.append(exc)
            continue
        winner = by_name.get(spec.name)
        if winner is not None:
            duplicates.append((spec, winner))
            continue
        by_name[spec.name] = spec
        specs.append(spec)
    return Discovery(specs=specs, problems=problems, duplicates=duplicates)


def mcp_server_spec(
    name: str,
    argv: list[str],
    *,
    env: dict[str, str],
    permissions: Permissions,
    identity: str,
    home: str,
) -> ExtensionSpec:
    """The spec of a stdio MCP server to supervise (started at run time, not discovered).

    Its directory (working directory, and its data) is ``<home>/mcp/<identity>``,
    created here; the permissions are validated against it as a manifest's are, with
    a data directory always granted. ``argv[0]`` must be absolute (the MCP policy
    checked it); its installation is made visible as an interpreter's is.

    Raises:
        ManifestError: the permissions are invalid (field named).
    """
    folder = Path(home) / "mcp" / identity
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    wanted = msgspec.structs.replace(permissions, data_dir=True)
    try:
        checked = check_permissions(wanted, str(folder), home=str(Path.home()), corral_home=home)
    except PermissionsError as exc:
        raise ManifestError(f"MCP server {name}", exc.field, exc.message) from None
    manifest = Manifest(
        name=name,
        exec=argv[0],
        args=argv[1:],
        kind=ChildKind.MCP_SERVER,
        restart="always",
        permissions=checked.permissions,
    )
    return ExtensionSpec(
        manifest=manifest,
        dir=str(folder),
        manifest_path="",
        source="mcp",
        exec_path=argv[0],
        identity=identity,
        manifest_sha256="",
        pins=checked.pins,
        env=dict(env),
    )
