"""Tasks: one JSON object per line of ``TASKS.jsonl``, checked before anything starts.

A line names one session::

    {"id": "t1", "prompt": "fix the failing test",
     "extensions": ["exts/chaos"], "tools": ["read", "bash"],
     "script": [{"tool_calls": [{"name": "bash", "args": {"command": "ls"}}]}, {"text": "ok"}],
     "workspace": {"README.md": "# hi\\n"}, "sandbox": "auto", "timeout": 60}

:func:`load_tasks` decodes every line, applies the batch's defaults and resolves
what the line refers to (paths relative to the tasks file, a script file read and
parsed, every extension's manifest loaded), so that a bad line is reported with its
number and field before any session starts, and a resolved :class:`Task` carries
everything a session needs (a Ray worker on another machine included, see
:mod:`._pack`).

The tasks file and a script file must be regular files (a link to one is followed) of
at most :data:`TASKS_MAX` bytes and 64 MiB: a FIFO, a device or a larger file is a
line-0 error, never waited on or read whole.
"""

from __future__ import annotations

import math
import os
import re
import typing
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import msgspec

from supervisor import ManifestError, load_manifest
from supervisor.lowlevel import read_small_file

from .._exceptions import ScriptError
from .._providers.factory import PROVIDERS
from .._providers.scripted import ScriptTurn, load_script, parse_script
from .._tools.selection import BUILTIN_TOOLS, OPTIONAL_TOOLS
from ._exceptions import TaskError, TasksInvalid

__all__ = ["Defaults", "Task", "check_tasks", "load_tasks", "resolve_task"]

#: The groups ``tools`` entries may name besides single tools (see docs/agent.md).
_TOOL_GROUPS = ("web", "dynamic", "mcp")
#: Longest task id, in characters.
MAX_ID = 512
#: The largest tasks file read (bytes): it must be a regular file, read whole.
TASKS_MAX = 256 << 20
_FIELD = re.compile(r" - at `\$\.?([^`]*)`$")
_NAMED = re.compile(r"(?:missing required|unknown) field `([^`]+)`")


class Task(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One session to run: a line of the tasks file, or built in Python.

    Paths are relative to the tasks file (to the current directory for tasks built
    in Python); :func:`load_tasks` and :func:`check_tasks` make them absolute.
    """

    #: Unique in the batch; the result carries it.
    id: str
    #: The one prompt of the session.
    prompt: str
    #: Extension directories, loaded as with ``-e`` (after the batch's own ``-e``).
    extensions: list[str] = []
    #: Built-in tools, as ``--tools`` takes them (``["read", "bash"]``, ``["+web"]``).
    tools: list[str] | None = None
    provider: str | None = None
    model: str | None = None
    #: API base URL of the HTTP providers (keys come from the environment only).
    base_url: str | None = None
    #: Scripted model turns (the format of docs/agent.md), or the path of a script.
    script: list[ScriptTurn] | str | None = None
    #: A directory to copy as the session's working directory, or its files inline
    #: (relative path -> UTF-8 text). None: an empty directory.
    workspace: str | dict[str, str] | None = None
    sandbox: Literal["auto", "required", "off"] | None = None
    #: Seconds for the whole session (start-up, prompt, stop); None: the batch default.
    timeout: float | None = None
    max_steps: int | None = None
    system_prompt: str | None = None
    #: Anything: copied into the result as is (labels, expected answers).
    meta: Any = None


class Defaults(msgspec.Struct, frozen=True, kw_only=True):
    """What a task that does not say gets (the command line's options)."""

    #: Extensions every task loads, before its own.
    extensions: list[str] = []
    tools: list[str] | None = None
    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    sandbox: Literal["auto", "required", "off"] = "auto"
    #: Seconds per session; None: no limit.
    timeout: float | None = 600.0
    max_steps: int = 16


_decoder = msgspec.json.Decoder(Task)
_turn_encoder = msgspec.json.Encoder()


def _decode_error(source: str, line: int, exc: msgspec.DecodeError) -> TaskError:
    message = str(exc)
    field = ""
    at = _FIELD.search(message)
    if at:
        field, message = at.group(1), message[: at.start()]
    else:
        named = _NAMED.search(message)
        if named:
            field = named.group(1)
    if not isinstance(exc, msgspec.ValidationError):
        message = f"not a JSON object: {message}"
    elif message.startswith("Object missing required field") and not at:
        message = "missing: every task needs an id and a prompt"
    elif message.startswith("Object contains unknown field") and not at:
        known = ", ".join(Task.__struct_fields__)
        message = f"unknown field (a task has: {known})"
    return TaskError(source, line, field, message)


@typing.final
class _Cache:
    """Manifests and scripts read once per path, however many tasks name them."""

    def __init__(self) -> None:
        self.manifests: dict[str, str | None] = {}
        self.scripts: dict[str, list[ScriptTurn] | ScriptError] = {}

    def manifest_problem(self, path: str) -> str | None:
        if path not in self.manifests:
            try:
                load_manifest(path, "cli")
                self.manifests[path] = None
            except ManifestError as exc:
                self.manifests[path] = str(exc)
        return self.manifests[path]

    def script(self, path: str) -> list[ScriptTurn]:
        if path not in self.scripts:
            try:
                self.scripts[path] = load_script(path)
            except ScriptError as exc:
                self.scripts[path] = exc
        found = self.scripts[path]
        if isinstance(found, ScriptError):
            raise found
        return found


def _absolute(base: Path, path: str) -> str:
    return str((base / os.path.expanduser(path)).absolute())


def _check_files(files: dict[str, str]) -> tuple[str, str] | None:
    """The first inline workspace path that is unsafe, and why (None: all fine)."""
    for name in files:
        parts = PurePosixPath(name).parts
        if not name or "\0" in name or "\\" in name:
            return name, "not a usable file name"
        if name.startswith("/") or ".." in parts or "." in name.split("/"):
            return name, "must be a relative path inside the workspace, without . or .."
        if any(part.casefold() == ".corral" for part in parts):
            return name, "cannot go into .corral (extensions come from the task's extensions)"
    names = set(files)
    for name in files:
        parent = PurePosixPath(name).parent
        while str(parent) != ".":
            if str(parent) in names:
                return name, f"its directory {parent} is also given as a file"
            parent = parent.parent
    return None


def _check_tools(tools: list[str]) -> str | None:
    known = {*BUILTIN_TOOLS, *OPTIONAL_TOOLS, *_TOOL_GROUPS}
    for entry in tools:
        name = entry.strip().lstrip("+-").strip()
        if name not in known:
            return f"unknown built-in tool {entry!r}; valid: {', '.join(sorted(known))}"
    return None


def resolve_task(
    task: Task,
    *,
    base: Path,
    defaults: Defaults = Defaults(),  # noqa: B008 (frozen, shared on purpose)
    source: str = "<tasks>",
    line: int = 0,
    cache: _Cache | None = None,
) -> Task:
    """``task`` with the defaults applied and what it refers to checked and resolved.

    Extension and workspace paths become absolute (relative ones are taken from
    ``base``), a script path is read and parsed into turns, and the provider is
    decided (``scripted`` when there is a script and no provider).

    Raises:
        TaskError: naming ``source``, ``line`` and the field at fault.
    """
    cache = cache or _Cache()

    def bad(field: str, reason: str) -> TaskError:
        return TaskError(source, line, field, reason)

    if not task.id.strip():
        raise bad("id", "must not be empty")
    if len(task.id) > MAX_ID:
        raise bad("id", f"longer than {MAX_ID} characters")
    if not task.prompt.strip():
        raise bad("prompt", "must not be empty")
    extensions: list[str] = []
    own_from = len(defaults.extensions)
    for index, path in enumerate([*defaults.extensions, *task.extensions]):
        where = _absolute(base, path) if index >= own_from else path
        problem = cache.manifest_problem(where)
        if problem is not None:
            field = f"extensions[{index - own_from}]" if index >= own_from else "--ext"
            raise bad(field, problem)
        if where not in extensions:
            extensions.append(where)
    tools = task.tools if task.tools is not None else defaults.tools
    if tools is not None:
        problem = _check_tools(tools)
        if problem:
            raise bad("tools", problem)
    script = task.script
    if isinstance(script, str):
        try:
            script = cache.script(_absolute(base, script))
        except ScriptError as exc:
            raise bad("script", str(exc)) from None
    elif script is not None:
        text = "\n".join(_turn_encoder.encode(turn).decode() for turn in script)
        try:
            script = parse_script(text, "turn")
        except ScriptError as exc:
            raise bad("script", str(exc).replace("turn:", "turn ", 1)) from None
    provider = task.provider or defaults.provider or ("scripted" if script else "offline")
    if provider not in PROVIDERS:
        raise bad("provider", f"unknown provider {provider!r}; valid: {', '.join(PROVIDERS)}")
    if provider == "scripted" and not script:
        raise bad("script", "the scripted provider needs a script (turns, or a script file)")
    workspace = task.workspace
    if isinstance(workspace, str):
        workspace = _absolute(base, workspace)
        if not os.path.isdir(workspace):
            raise bad("workspace", f"{workspace}: not a directory")
    elif workspace is not None:
        unsafe = _check_files(workspace)
        if unsafe:
            raise bad(f"workspace[{unsafe[0]!r}]", unsafe[1])
    timeout = task.timeout if task.timeout is not None else defaults.timeout
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise bad("timeout", "must be a number of seconds above 0")
    max_steps = task.max_steps if task.max_steps is not None else defaults.max_steps
    if max_steps < 1:
        raise bad("max_steps", "must be at least 1")
    return msgspec.structs.replace(
        task,
        extensions=extensions,
        tools=tools,
        provider=provider,
        model=task.model or defaults.model,
        base_url=task.base_url or defaults.base_url,
        script=script,
        workspace=workspace,
        sandbox=task.sandbox or defaults.sandbox,
        timeout=timeout,
        max_steps=max_steps,
    )


def _dedupe(tasks: list[tuple[int, Task]], source: str) -> list[TaskError]:
    first: dict[str, int] = {}
    errors = []
    for line, task in tasks:
        if task.id in first:
            why = f"duplicate id {task.id!r} (first on line {first[task.id]})"
            errors.append(TaskError(source, line, "id", why))
        else:
            first[task.id] = line
    return errors


def check_tasks(
    tasks: Iterable[Task],
    *,
    base: Path | None = None,
    defaults: Defaults = Defaults(),  # noqa: B008 (frozen, shared on purpose)
    skip_invalid: bool = False,
) -> tuple[list[Task], list[TaskError]]:
    """Resolve tasks built in Python (see :func:`resolve_task`); ids must be unique.

    Args:
        tasks: the tasks; relative paths are taken from ``base`` (default: the
            current directory).
        defaults: what a task that does not say gets.
        skip_invalid: return the valid tasks and the errors instead of raising.

    Returns:
        The resolved tasks, and the errors of the invalid ones (``line`` is the
        task's 1-based position).

    Raises:
        TasksInvalid: some task is invalid and ``skip_invalid`` is false.
    """
    where = base or Path.cwd()
    cache = _Cache()
    good: list[tuple[int, Task]] = []
    errors: list[TaskError] = []
    for line, task in enumerate(tasks, start=1):
        try:
            good.append(
                (line, resolve_task(task, base=where, defaults=defaults, line=line, cache=cache))
            )
        except TaskError as exc:
            errors.append(exc)
    return _finish(good, errors, "<tasks>", skip_invalid)


def _finish(
    good: list[tuple[int, Task]], errors: list[TaskError], source: str, skip_invalid: bool
) -> tuple[list[Task], list[TaskError]]:
    duplicates = _dedupe(good, source)
    if duplicates:
        bad_lines = {e.line for e in duplicates}
        good = [(line, task) for line, task in good if line not in bad_lines]
        errors = sorted([*errors, *duplicates], key=lambda e: e.line)
    if errors and not skip_invalid:
        raise TasksInvalid(errors)
    return [task for _, task in good], errors


def load_tasks(
    path: str | os.PathLike[str],
    *,
    defaults: Defaults = Defaults(),  # noqa: B008 (frozen, shared on purpose)
    skip_invalid: bool = False,
) -> tuple[list[Task], list[TaskError]]:
    """Read, check and resolve the tasks file at ``path`` (blocking: run it in a thread).

    Blank lines are skipped. Relative paths in a task are taken from the file's
    directory.

    Returns:
        The resolved tasks in file order, and the errors of the bad lines (empty
        unless ``skip_invalid``).

    Raises:
        TasksInvalid: some line is invalid and ``skip_invalid`` is false; every bad
            line is listed with its number and field.
        TaskError: the file cannot be read (line 0).
    """
    source = os.fspath(path)
    try:  # a FIFO, a device or a huge file is refused, never waited on or read whole
        data = read_small_file(source, TASKS_MAX)
    except OSError as exc:
        raise TaskError(source, 0, "", f"cannot read the tasks: {exc.strerror}") from None
    base = Path(source).absolute().parent
    cache = _Cache()
    good: list[tuple[int, Task]] = []
    errors: list[TaskError] = []
    for line, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            task = _decoder.decode(raw)
            good.append(
                (
                    line,
                    resolve_task(
                        task, base=base, defaults=defaults, source=source, line=line, cache=cache
                    ),
                )
            )
        except msgspec.DecodeError as exc:
            errors.append(_decode_error(source, line, exc))
        except TaskError as exc:
            errors.append(exc)
    return _finish(good, errors, source, skip_invalid)
