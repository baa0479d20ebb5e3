"""The spawn seam: from an :class:`ExtensionSpec` to a running process.

:func:`launch_request` builds what the sandbox needs (argv with an absolute
interpreter, the allowlisted environment, the data directory); the sandbox turns it
into a :class:`~sandbox.LaunchPlan`; :func:`~supervisor._process.spawn_child`
starts the plan in its own session and process group, with the limits applied in
the child before ``exec``. Every kind of child goes through here: a tool host with a
``runtime`` runs one of corral's runners from the SDK directory (bound read-only),
in its own directory, with the same environment allowlist as an extension.
:class:`ChosenOnUse` is the supervisor's sandbox backend, chosen when the first
plan is made (a host that starts nothing never probes the machine).
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
import subprocess
import typing
from pathlib import Path
from typing import Any

from sandbox import (
    LaunchPlan,
    LaunchRequest,
    Pin,
    Sandbox,
    SandboxMode,
    SandboxUnavailable,
    host_environment,
    select_sandbox,
)
from sandbox.log import get_logger

from ._config import SupervisorConfig, data_path
from ._frames import PROTOCOL_VERSION
from ._manifest import ChildKind, ExtensionSpec, Runtime

__all__ = [
    "INSTANCE_VAR",
    "SDK_DIR",
    "ChosenOnUse",
    "Refusing",
    "interpreter_argv",
    "launch_request",
    "node_version",
    "strip_types_flags",
]

log = get_logger(__name__)

#: Directory holding the stdlib-only Python SDK (``import corral_ext``).
SDK_DIR = str(Path(__file__).with_name("_sdk"))

#: Environment variable carrying a per-incarnation token; descendants inherit it,
#: which lets the supervisor find daemons that left the extension's process group.
INSTANCE_VAR = "CORRAL_EXT_INSTANCE"

_PY_LANGS = frozenset({"python", "python3", "py"})
_JS_LANGS = frozenset({"javascript", "js", "node", "nodejs"})
_JS_EXTS = (".js", ".mjs", ".cjs")


#: How the Python interpreter runs corral's tool-host runner: an import runs it from
#: its compiled bytecode (a script is compiled anew), without the runpy machinery
#: that ``-m corral_toolhost`` loads first. ``-S``: the runner puts the site
#: directories on ``sys.path`` itself and runs their ``.pth`` files only when a tool
#: module's import fails without them (``corral_toolhost.lean_site``).
PYTHON_RUNNER = ("-S", "-c", "import corral_toolhost as h; raise SystemExit(h.main())")

#: The Node tool-host runner.
_HOST_RUNNER = str(Path(SDK_DIR) / "host.cjs")
#: TypeScript tool modules, which Node runs by stripping their types (22.6 and later).
_TS_EXTS = (".ts", ".mts", ".cts")
_STRIP_TYPES = ("--experimental-strip-types", "--disable-warning=ExperimentalWarning")
_NODE_VERSION = re.compile(r"v(\d+)\.(\d+)\.")


def _is_python(spec: ExtensionSpec) -> bool:
    runtime = spec.manifest.runtime
    if runtime is not None:
        return runtime is Runtime.PYTHON
    if spec.exec_lookup:  # a program on PATH runs as it is; a bare python3 is corral's
        return spec.exec_lookup == "python"
    return spec.manifest.language.lower() in _PY_LANGS or spec.exec_path.endswith(".py")


def _is_node(spec: ExtensionSpec) -> bool:
    runtime = spec.manifest.runtime
    if runtime is not None:
        return runtime is Runtime.NODE
    if spec.exec_lookup:
        return False
    lang = spec.manifest.language.lower()
    return lang in _JS_LANGS or spec.exec_path.endswith(_JS_EXTS)


def _program(spec: ExtensionSpec) -> list[str]:
    """What the interpreter runs: the manifest's program, or corral's runner."""
    match spec.manifest.runtime:
        case Runtime.PYTHON:
            return list(PYTHON_RUNNER)
        case Runtime.NODE:
            return [_HOST_RUNNER]
        case None:
            # A bare python3 is the interpreter itself: its args are the program.
            return [] if spec.exec_lookup == "python" else [spec.exec_path]


def interpreter_argv(spec: ExtensionSpec, config: SupervisorConfig) -> list[str]:
    """The argv that runs the extension, never through a shell or ``env`` shim.

    Python extensions run with ``config.python`` (the host's own interpreter by
    default); JavaScript ones with the real path of ``node``; anything else is
    executed directly. A bare ``exec`` found on ``PATH`` (``node``, ``npx``, ``go``)
    is executed directly too, by its real path, whatever the manifest's ``language``
    says (the program is the interpreter: never ``node node index.js``); a bare
    ``python3`` is ``config.python``. A tool host with a ``runtime`` runs corral's runner for it;
    Node's runner gets the flag that turns type stripping on when its ``config``
    lists a TypeScript module and that Node needs it (see :func:`strip_types_flags`).
    """
    args = [*_program(spec), *spec.manifest.args]
    if spec.exec_lookup == "path":
        return [os.path.realpath(spec.exec_path), *spec.manifest.args]
    if _is_python(spec):
        return [os.path.abspath(config.python), *args]
    if _is_node(spec):
        node = config.node or shutil.which("node")
        if node is None:
            # Fall back to executing the script (its shebang) and let spawn fail clearly.
            return args if spec.manifest.runtime is None else ["node", *args]
        node = os.path.realpath(node)
        if spec.manifest.runtime is Runtime.NODE and _lists_typescript(spec.manifest.config):
            args = [*strip_types_flags(node_version(node)), *args]
        return [node, *args]
    return args


def _lists_typescript(config: dict[str, Any]) -> bool:
    modules = config.get("modules")
    return isinstance(modules, list) and any(
        isinstance(m, str) and m.endswith(_TS_EXTS) for m in modules
    )


def strip_types_flags(version: tuple[int, int] | None) -> list[str]:
    """Node's flags for a runner with TypeScript modules, by Node's ``(major, minor)``.

    Node strips types by default from 22.18 and 23.6; from 22.6 it does behind
    ``--experimental-strip-types`` (its warning silenced: it would fill the log at
    every start). Before 22.6 it cannot, and the runner refuses the module at
    ``init``, saying what to do; so does an unknown version (no flag that an old
    Node would refuse).
    """
    if version is None or version < (22, 6) or (22, 18) <= version < (23, 0):
        return []
    return list(_STRIP_TYPES) if version < (23, 6) else []


def node_version(node: str) -> tuple[int, int] | None:
    """``(major, minor)`` of the Node at ``node`` (None: it would not say).

    Blocking (it runs ``node --version``, a few milliseconds, with an empty
    environment): asked only for a runner with TypeScript modules, once per binary
    (kept while the file is the same).
    """
    try:
        st = os.stat(node)
    except OSError:
        return None
    return _node_version(node, st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _node_version(node: str, ino: int, size: int, mtime: int) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [node, "--version"], capture_output=True, env={}, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = _NODE_VERSION.match(out.decode("ascii", "replace").strip())
    return (int(found[1]), int(found[2])) if found else None


def _environment(spec: ExtensionSpec, data_dir: str | None, token: str) -> dict[str, str]:
    env = host_environment(spec.manifest.permissions.env) | spec.env
    env["CORRAL_EXT_NAME"] = spec.name
    env["CORRAL_EXT_DIR"] = spec.dir
    env["CORRAL_PROTOCOL_VERSION"] = str(PROTOCOL_VERSION)
    env[INSTANCE_VAR] = token
    if data_dir is not None:
        env["CORRAL_DATA_DIR"] = data_dir
    if _is_python(spec):
        env["PYTHONPATH"] = SDK_DIR
        # print() without flush would otherwise sit in a block buffer forever.
        env["PYTHONUNBUFFERED"] = "1"
        # The SDK directory is shared (and read-only in a sandbox): no __pycache__ there.
        # Its bytecode comes with the installation (pip compiles it; ./dev compiles a
        # checkout), so starts do not compile the SDK again.
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def launch_request(
    spec: ExtensionSpec, config: SupervisorConfig, pins: list[Pin] | None = None
) -> tuple[LaunchRequest, str]:
    """Build the sandbox's input for one incarnation; returns it with its instance token.

    ``pins`` are the identities to bind (``spec.pins`` from validation, then the
    first plan's); the sandbox creates the data directory when it is missing.
    """
    data_dir: str | None = None
    if spec.manifest.permissions.data_dir:
        # Keyed by identity: an extension named like another never gets its data.
        data_dir = data_path(config.home, spec.identity)
    token = f"{spec.name}:{secrets.token_hex(8)}"
    argv = interpreter_argv(spec, config)
    request = LaunchRequest(
        name=spec.name,
        argv=argv,
        env=_environment(spec, data_dir, token),
        ext_dir=spec.dir,
        data_dir=data_dir,
        permissions=spec.manifest.permissions,
        runtime_paths=[SDK_DIR] if _is_python(spec) or spec.manifest.runtime else [],
        # Only an interpreter corral chose brings its installation into the sandbox; an
        # MCP server's command is one by convention (python, node, npx, uvx), and so is
        # a program found on PATH (named by the link found there: its installation is
        # the link's prefix, e.g. nvm's npx -> ../lib/node_modules/npm/bin/npx-cli.js).
        interpreter=_interpreter(spec, argv),
        pins=list(spec.pins if pins is None else pins),
        hidden=[config.home],
    )
    return request, token


def _interpreter(spec: ExtensionSpec, argv: list[str]) -> str:
    if spec.exec_lookup == "path":
        return spec.exec_path
    if argv[0] != spec.exec_path or spec.exec_lookup or spec.kind is ChildKind.MCP_SERVER:
        return argv[0]
    return ""


@typing.final
class Refusing:
    """Stands in for the sandbox when ``required`` found none: refuses every start."""

    backend = "none"

    def __init__(self, error: SandboxUnavailable) -> None:
        self._error = error

    def plan(self, request: LaunchRequest) -> LaunchPlan:
        raise self._error

    def cleanup(self, plan: LaunchPlan) -> None:
        pass


@typing.final
class ChosenOnUse:
    """The backend for ``mode``, chosen (probing the machine) when first used: a host
    that starts no extension never probes. Unavailable under ``required``: a backend
    that refuses every plan, with the cause logged once."""

    def __init__(self, mode: SandboxMode) -> None:
        self._mode = mode
        self._chosen: Sandbox | None = None

    def _get(self) -> Sandbox:
        if self._chosen is None:
            try:
                self._chosen = select_sandbox(self._mode)
            except SandboxUnavailable as exc:
                log.error("sandbox_unavailable", problem=str(exc))
                self._chosen = Refusing(exc)
        return self._chosen

    @property
    def backend(self) -> str:
        return self._get().backend

    def plan(self, request: LaunchRequest) -> LaunchPlan:
        return self._get().plan(request)

    def cleanup(self, plan: LaunchPlan) -> None:
        self._get().cleanup(plan)
