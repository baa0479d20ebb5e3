"""Configuration files: the user's and the project's ``config.toml``.

* user: ``$XDG_CONFIG_HOME/corral/config.toml`` (default ``~/.config/corral/config.toml``);
* project: ``.corral/config.toml`` in the working directory (``--cwd``).

Both are flat TOML tables whose keys are in :data:`KEYS`. A value in a file is the
default of the flag of that name: precedence is flag > environment variable >
project file > user file > built-in default (:func:`resolve`, which ``corral
config`` prints with where each value came from).

A project file comes with a cloned repository: whoever wrote it is not the user.
It may tune the model calls and narrow what the agent may do, never widen it or
send anything elsewhere: ``provider``, ``base_url``, ``system_prompt`` and
``append_system_prompt`` (a repository's words reach the model as data, never as
its instructions), the network allowances and ``searxng`` are refused in it, ``sandbox`` only as
``required``, ``tools`` only with ``-NAME`` entries. A refused key, an unknown
key, a wrong type or malformed TOML is one error naming the file, the key and its
line; nothing is half-applied. A file that is not a regular file (a FIFO, a device, a
directory; a link to one) or is larger than :data:`CONFIG_MAX` is refused unread.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor.lowlevel import SMALL_FILE_MAX, FileRefused, read_small_file

from .errors import CLIError

__all__ = [
    "KEYS",
    "ConfigError",
    "Key",
    "Setting",
    "file_settings",
    "flag_defaults",
    "project_config_path",
    "resolve",
    "user_config_path",
]


#: The largest configuration file read (bytes); a larger one is refused unread.
CONFIG_MAX = SMALL_FILE_MAX


class ConfigError(CLIError):
    """A configuration file is malformed, or sets a key it may not (file, key and line named)."""


Check = Callable[[Any], str | None]
"""A value's check: None when fine, else what is wrong (``must be …``)."""


def _string(value: Any) -> str | None:
    return None if isinstance(value, str) and value else "must be a non-empty string"


def _choice(*allowed: str) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, str) and value in allowed:
            return None
        return "must be one of " + ", ".join(f'"{a}"' for a in allowed)

    return check


def _integer(low: int) -> Check:
    def check(value: Any) -> str | None:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
        return None if ok else f"must be an integer >= {low}"

    return check


def _seconds(value: Any) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return None if ok else "must be a number of seconds > 0"


def _strings(value: Any) -> str | None:
    ok = isinstance(value, list) and all(isinstance(v, str) and v for v in value)
    return None if ok else 'must be a list of strings, e.g. ["a", "b"]'


def _only_narrowing_tools(value: list[str]) -> str | None:
    widening = [t for t in value if not t.startswith("-")]
    if not widening:
        return None
    return (
        f"a project may only remove tools (-NAME), not offer {', '.join(widening)}; "
        "add tools in your user config or with --tools"
    )


def _only_required(value: str) -> str | None:
    return None if value == "required" else 'a project may only make it stricter ("required")'


#: Why neither system prompt key may come from a project file.
_SYSTEM_PROMPT_IS_YOURS = (
    "a project may not set it (the system prompt is yours: a repository's text reaches "
    "the model as data, never as its instructions)"
)
_NOT_FROM_A_PROJECT = "a project may not set it (it would decide where your data or keys go)"


@dataclass(frozen=True)
class Key:
    """One configuration key."""

    name: str
    check: Check
    #: What the value means, for ``corral config``.
    help: str
    #: The environment variable that wins over the files, if any.
    env: str | None = None
    #: What a project file may set: None: anything valid; else a check (refusal).
    project: Callable[[Any], str | None] | None = None
    #: A list whose entries add up across sources (the environment's and a file's, as
    #: the environment's and a flag's do), rather than one replacing the other.
    additive: bool = False
    #: How the environment variable separates entries (additive keys).
    sep: str = r"[,\s]+"


def _providers() -> tuple[str, ...]:
    from .._providers.factory import PROVIDERS

    return tuple(PROVIDERS)


#: Every key a configuration file may hold.
KEYS: dict[str, Key] = {
    k.name: k
    for k in (
        Key(
            "provider",
            lambda v: _choice(*_providers())(v),
            "model provider (offline, scripted, openai, anthropic)",
            env="CORRAL_PROVIDER",
            project=lambda v: _NOT_FROM_A_PROJECT,
        ),
        Key("model", _string, "model id"),
        Key(
            "base_url",
            _string,
            "API base URL (openai, anthropic)",
            project=lambda v: _NOT_FROM_A_PROJECT,
        ),
        Key(
            "sandbox",
            _choice("auto", "required", "off"),
            "sandbox of extensions and bash: auto, required, off",
            project=_only_required,
        ),
        Key(
            "tools",
            _strings,
            'built-in tools, as --tools: ["+web"], ["read", "bash"], ["-bash"]',
            project=_only_narrowing_tools,
        ),
        Key("max_steps", _integer(1), "model calls per prompt at most"),
        Key("max_tokens", _integer(1), "max_tokens of each model call", env="CORRAL_MAX_TOKENS"),
        Key(
            "connect_timeout",
            _seconds,
            "seconds to connect to the model API",
            env="CORRAL_CONNECT_TIMEOUT",
        ),
        Key(
            "read_timeout", _seconds, "longest silence of a model reply", env="CORRAL_READ_TIMEOUT"
        ),
        Key("retries", _integer(0), "retries of a failed model call", env="CORRAL_RETRIES"),
        Key(
            "retry_max_time",
            _seconds,
            "no retry starts after this many seconds",
            env="CORRAL_RETRY_MAX_TIME",
        ),
        Key(
            "system_prompt",
            _string,
            "replace the system prompt",
            project=lambda v: _SYSTEM_PROMPT_IS_YOURS,
        ),
        Key(
            "append_system_prompt",
            _string,
            "text appended to the system prompt",
            project=lambda v: _SYSTEM_PROMPT_IS_YOURS,
        ),
        Key(
            "protect",
            _strings,
            "more paths bash, write and edit never change (added up across sources)",
            env="CORRAL_PROTECT",
            additive=True,
            sep=":",
        ),
        Key(
            "bash_network",
            _strings,
            "destinations bash may reach through corral's proxy",
            env="CORRAL_BASH_NETWORK",
            project=lambda v: _NOT_FROM_A_PROJECT,
            additive=True,
        ),
        Key(
            "mcp_allow",
            _strings,
            "exceptions to the MCP network guard",
            env="CORRAL_MCP_ALLOW",
            project=lambda v: _NOT_FROM_A_PROJECT,
            additive=True,
        ),
        Key(
            "web_allow",
            _strings,
            "exceptions to web_fetch's SSRF guard",
            env="CORRAL_WEB_ALLOW",
            project=lambda v: _NOT_FROM_A_PROJECT,
            additive=True,
        ),
        Key(
            "searxng",
            _string,
            "SearXNG instance of web_search",
            env="CORRAL_SEARXNG_URL",
            project=lambda v: _NOT_FROM_A_PROJECT,
        ),
    )
}


@dataclass(frozen=True)
class Setting:
    """A value and where it came from: ``flag``, ``env VAR``, ``project FILE``,
    ``user FILE`` or ``default``."""

    value: Any
    source: str


def user_config_path() -> Path:
    """``$XDG_CONFIG_HOME/corral/config.toml`` (``~/.config`` when unset or relative)."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "corral" / "config.toml"


def project_config_path(cwd: str | Path) -> Path:
    """``.corral/config.toml`` of the project in ``cwd``."""
    return Path(cwd) / ".corral" / "config.toml"


def _line_of(text: str, key: str) -> int | None:
    name = rf"(?:{re.escape(key)}|\"{re.escape(key)}\")"
    pattern = re.compile(rf"^\s*(?:{name}\s*=|\[+\s*{name}\s*[\].])", re.M)  # key = / [key]
    found = pattern.search(text)
    return text.count("\n", 0, found.start()) + 1 if found else None


def _where(path: Path, text: str, key: str) -> str:
    line = _line_of(text, key)
    return f"{path}:{line}" if line else str(path)


def load_file(path: Path, *, project: bool) -> dict[str, Any]:
    """The settings of one file ({} when it does not exist).

    Raises:
        ConfigError: unreadable, malformed TOML, an unknown key, a wrong value, or
            (``project``) a key a project may not set this way: file, key and line.
    """
    try:  # a FIFO, a device or a huge file is refused, never waited on or read whole
        raw = read_small_file(path, CONFIG_MAX)
    except FileNotFoundError:
        return {}
    except FileRefused as exc:
        raise ConfigError(f"{path}: not a usable configuration file: {exc.reason}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration: {exc.strerror}") from None
    try:  # newlines as a text-mode read gives them
        text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: cannot read the configuration: not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        why = str(exc).replace("at end of document", f"at line {text.count(chr(10)) + 1}, its end")
        raise ConfigError(f"{path}: not valid TOML: {why}") from None
    settings: dict[str, Any] = {}
    for key, value in data.items():
        where = _where(path, text, key)
        spec = KEYS.get(key)
        if spec is None:
            known = ", ".join(KEYS)
            raise ConfigError(f"{where}: unknown key {key!r} (known keys: {known})")
        if key == "tools" and isinstance(value, str):  # "read,bash" as --tools takes it
            value = [t.strip() for t in value.split(",") if t.strip()]
        wrong = spec.check(value)
        if wrong is not None:
            raise ConfigError(f"{where}: {key} {wrong}")
        if project and spec.project is not None:
            refused = spec.project(value)
            if refused is not None:
                raise ConfigError(f"{where}: {key} is refused in a project file: {refused}")
        settings[key] = value
    return settings


def file_settings(cwd: str | Path) -> dict[str, Setting]:
    """The settings of the user's and the project's files, the project's winning
    (an additive key's entries are added up).

    Raises:
        ConfigError: either file is malformed or sets what it may not.
    """
    found: dict[str, Setting] = {}
    project = project_config_path(os.path.realpath(os.path.expanduser(str(cwd))))
    for path, is_project in ((user_config_path(), False), (project, True)):
        for key, value in load_file(path, project=is_project).items():
            origin = f"{'project' if is_project else 'user'} {path}"
            earlier = found.get(key)
            if KEYS[key].additive and earlier is not None:
                found[key] = Setting([*earlier.value, *value], f"{earlier.source} + {origin}")
            else:
                found[key] = Setting(value, origin)
    return found


def resolve(
    cwd: str | Path,
    defaults: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
) -> dict[str, Setting]:
    """Every key's effective value without flags: env > project > user > default.

    Raises:
        ConfigError: a file is malformed or sets what it may not.
    """
    environ = os.environ if environ is None else environ
    files = file_settings(cwd)
    out: dict[str, Setting] = {}
    for name, spec in KEYS.items():
        env = environ.get(spec.env, "") if spec.env else ""
        got = files.get(name)
        if env and spec.additive:
            entries = [e for e in re.split(spec.sep, env) if e.strip()]
            prior = got.value if got else []
            source = f"env {spec.env}" + (f" + {got.source}" if got else "")
            out[name] = Setting([*entries, *prior], source)
        elif env:
            out[name] = Setting(env, f"env {spec.env}")
        elif got is not None:
            out[name] = got
        else:
            out[name] = Setting(defaults.get(name), "default")
    return out


#: The flag (click parameter) each key is the default of, when its name differs.
_PARAMS = {"tools": "builtin_tools"}


def flag_defaults(cwd: str | Path, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The files' settings as defaults of the agent flags (a click ``default_map``).

    Click puts a flag and its own environment variable before these; a key whose
    variable the command reads itself (``CORRAL_SEARXNG_URL``) is left out while
    that variable is set, so the environment still wins; additive keys are added
    to their variable's entries where they are used.

    Raises:
        ConfigError: a file is malformed or sets what it may not.
    """
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for name, setting in file_settings(cwd).items():
        spec = KEYS[name]
        if spec.env and not spec.additive and environ.get(spec.env):
            continue
        value = setting.value
        if name == "tools":
            value = ",".join(value)
        out[_PARAMS.get(name, name)] = value
    return out
