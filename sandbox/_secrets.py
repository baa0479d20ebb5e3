"""The one list of credential stores: what no sandboxed child may read.

Used by the grant rules (:mod:`sandbox._forbidden`: refused even read-only, unless
named in ``unsafe``), by the agent's shell (:mod:`sandbox._shell`: hidden, replaced
by an empty directory or file), and through them by everything else corral starts:
extensions, tool hosts, MCP servers (their ``permissions`` are grants) and dynamic
tools (which see no host path but the system's and the interpreter's anyway).

Three parts:

* :data:`HOME_STORES`: paths relative to a home directory. Each of the user's homes
  counts (``$HOME`` and the account's home from the password database).
* :data:`SYSTEM_STORES`: absolute paths outside any home.
* **other users' homes**: every home but the user's own (the directories directly
  in ``/home`` and ``/Users``, and the password database's human accounts), and
  ``/root`` when not running as root. As root they are readable; as another user
  some are (a home made with mode 0755).

:func:`credential_paths` returns absolute, normalised paths that may or may not
exist; :func:`existing` says which exist, what they resolve to and which are
directories, remembering the answer per parent directory while that directory is
unchanged (the shell asks at every command).
"""

from __future__ import annotations

import functools
import os
import pwd
import stat
import time
from collections.abc import Sequence
from typing import NamedTuple

from ._within import inside

__all__ = [
    "HOME_STORES",
    "SYSTEM_STORES",
    "credential_paths",
    "existing",
    "other_homes",
    "stores_around",
]

#: Credential stores and service sockets outside the home. ``/run`` holds the
#: sockets of system services (docker, dbus, the user's agents): a unix socket can
#: be connected to through a read-only mount.
SYSTEM_STORES = (
    # Password and group databases' hashes, sudo's rules, the host's keys.
    "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers",
    "/etc/sudoers.d", "/etc/security/opasswd", "/etc/ssh", "/etc/ssl/private",
    "/etc/pki/tls/private", "/etc/krb5.keytab", "/etc/letsencrypt",
    # Network secrets: Wi-Fi and VPN keys, dial-up passwords.
    "/etc/NetworkManager/system-connections", "/etc/wireguard", "/etc/openvpn",
    "/etc/ipsec.secrets", "/etc/ppp/chap-secrets", "/etc/ppp/pap-secrets",
    # Database maintenance logins, backups of the databases above, SSSD's cache.
    "/etc/mysql/debian.cnf", "/var/backups", "/var/lib/sss",
    "/run", "/var/run",
    # macOS.
    "/private/etc/master.passwd", "/private/var/db",
)  # fmt: skip

#: Credential stores in a home directory, relative to it.
HOME_STORES = (
    # Keys and agents.
    ".ssh", ".gnupg", ".pki", ".password-store", ".local/share/keyrings", ".gnome2/keyrings",
    ".local/share/kwalletd", ".config/op", ".config/Bitwarden", ".config/keepassxc",
    ".config/gopass", ".bitcoin", ".ethereum", ".electrum",
    # Cloud and cluster CLIs.
    ".aws", ".azure", ".oci", ".config/gcloud", ".kube", ".config/helm", ".docker",
    ".config/containers/auth.json", ".config/doctl", ".config/hcloud", ".fly",
    ".config/rclone", ".boto", ".s3cfg", ".terraform.d", ".terraformrc", ".vault-token",
    # Git hosts and generic logins.
    ".netrc", ".authinfo", ".authinfo.gpg", ".git-credentials", ".config/git/credentials",
    ".config/gh", ".config/glab-cli", ".config/hub", ".subversion/auth",
    ".config/github-copilot",
    # Package registries.
    ".npmrc", ".yarnrc", ".yarnrc.yml", ".pypirc", ".config/pip/pip.conf", ".pip/pip.conf",
    ".cargo/credentials", ".cargo/credentials.toml", ".gem/credentials", ".m2/settings.xml",
    ".m2/settings-security.xml", ".gradle/gradle.properties", ".ivy2/.credentials",
    ".sbt/.credentials", ".config/composer/auth.json", ".composer/auth.json",
    ".nuget/NuGet/NuGet.Config",
    # Databases, data services, AI CLIs.
    ".pgpass", ".my.cnf", ".mylogin.cnf", ".kaggle", ".cache/huggingface/token",
    ".huggingface/token", ".codex", ".claude", ".claude.json",
    # Browser profiles (cookies, saved passwords) and chat sessions.
    ".mozilla", ".thunderbird", ".config/google-chrome", ".config/chromium",
    ".config/BraveSoftware", ".config/microsoft-edge", ".config/vivaldi", ".config/opera",
    ".var/app", "snap/firefox", "snap/chromium", ".config/Slack", ".config/discord",
    ".config/Signal", ".config/Element", ".local/share/TelegramDesktop",
    # Shell and REPL histories (commands typed with secrets in them).
    ".bash_history", ".zsh_history", ".zhistory", ".histfile", ".sh_history",
    ".local/share/fish/fish_history", ".python_history", ".node_repl_history",
    ".psql_history", ".mysql_history", ".sqlite_history", ".rediscli_history",
    ".dbshell", ".irb_history", ".pry_history", ".Rhistory", ".julia/logs/repl_history.jl",
    ".scala_history", ".lesshst", ".viminfo", ".local/share/nvim/shada",
    # macOS.
    "Library/Keychains", "Library/Cookies", "Library/Application Support/Google/Chrome",
    "Library/Application Support/Firefox", "Library/Application Support/Chromium",
    "Library/Application Support/BraveSoftware",
)  # fmt: skip

#: Where homes live: each directory in one is somebody's home.
_HOME_BASES = ("/home", "/Users")
#: The first uid of human accounts (``UID_MIN`` of ``login.defs``), and ``nobody``.
_UID_MIN = 1000
_NOBODY = 65534


@functools.cache
def _account_home() -> str:
    """The home directory of the user we run as, from the password database."""
    try:
        return os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)
    except (KeyError, AttributeError):
        return ""


@functools.cache
def _human_homes() -> tuple[str, ...]:
    """Homes of the password database's human accounts (read once per process)."""
    homes: list[str] = []
    try:
        entries = pwd.getpwall()
    except (OSError, AttributeError):
        return ()
    for entry in entries:
        if entry.pw_uid < _UID_MIN or entry.pw_uid == _NOBODY:
            continue
        home = os.path.normpath(entry.pw_dir or "/")
        # A system directory as a home (``/``, ``/nonexistent``, ``/var/...``) is
        # not where that account keeps its secrets: hiding it would hide the system.
        if any(home == b or home.startswith(b + "/") for b in _HOME_BASES):
            homes.append(home)
    return tuple(homes)


def _own_homes(home: str) -> list[str]:
    homes = (os.path.normpath(home) if home else "", _account_home())
    return [h for h in dict.fromkeys(homes) if h]


def other_homes(home: str) -> list[str]:
    """Every home directory but the user's own (``home`` and the account's).

    Directories directly in ``/home`` and ``/Users`` and the homes of the password
    database's human accounts there, plus ``/root`` when not running as root.
    """
    own = set(_own_homes(home))
    found: list[str] = []
    for base in _HOME_BASES:
        try:
            with os.scandir(base) as it:
                found += [e.path for e in it if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
    found += _human_homes()
    if os.geteuid() != 0:
        found.append("/root")
    return [
        h for h in dict.fromkeys(found) if not any(o == h or o.startswith(h + "/") for o in own)
    ]


@functools.lru_cache(maxsize=16)
def _fixed(homes: tuple[str, ...]) -> tuple[str, ...]:
    paths = list(SYSTEM_STORES)
    for base in homes:
        if base != "/":
            paths += [os.path.join(base, p) for p in HOME_STORES]
    return tuple(paths)


def credential_paths(home: str) -> list[str]:
    """Every credential store, for a user whose home is ``home`` ("" if unknown).

    :data:`SYSTEM_STORES`, :data:`HOME_STORES` under each of the user's homes
    (``home`` and the account's home from the password database; never ``/``),
    ``$XDG_RUNTIME_DIR``, and :func:`other_homes`.
    """
    paths = list(_fixed(tuple(_own_homes(home))))
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        paths.append(os.path.normpath(runtime))
    return paths + other_homes(home)


class _Listing(NamedTuple):
    """What :func:`existing` found in one directory, and the directory's identity."""

    #: Device, inode and modification time of the directory (None: it is missing).
    key: tuple[int, int, int] | None
    #: (real path, is a directory) of each name found.
    found: tuple[tuple[str, bool], ...]


#: Listings by (directory, names looked for).
_listings: dict[tuple[str, tuple[str, ...]], _Listing] = {}
#: A directory changed this recently is looked at again next time (a file system
#: with coarse timestamps could hide a second change in the same tick).
_RACY_NS = 2_000_000_000


def _identity(directory: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(directory)  # through symlinks: a retargeted one is another inode
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


def stores_around(home: str, workspace: str) -> list[str]:
    """:func:`credential_paths` for a sandbox working in ``workspace`` (a real path).

    A store that holds the workspace is left out (the user chose to work there),
    except another user's home, whose own stores are listed instead: root working
    in ``/home/alice/project`` still does not see ``/home/alice/.ssh``.
    """
    out: list[str] = []
    others = set(other_homes(home))
    for path in credential_paths(home):
        if not inside(workspace, path):
            out.append(path)
        elif path in others:
            out += [os.path.join(path, p) for p in HOME_STORES]
    return out


@functools.lru_cache(maxsize=16)
def _groups(paths: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``paths`` by directory: (directory, names in it)."""
    groups: dict[str, list[str]] = {}
    for path in paths:
        groups.setdefault(os.path.dirname(path), []).append(os.path.basename(path))
    return tuple((d, tuple(names)) for d, names in groups.items())


def _present(directory: str, names: tuple[str, ...]) -> Sequence[str]:
    """Those of ``names`` listed in ``directory`` (one listing beats many stat calls)."""
    if len(names) < 8:
        return names
    try:
        listed = set(os.listdir(directory))
    except OSError:
        return names
    return [n for n in names if n in listed]


def existing(paths: Sequence[str]) -> list[tuple[str, bool]]:
    """The real paths of those of ``paths`` that exist, and whether each is a directory.

    What a directory holds is remembered while its device, inode and modification
    time stay the same (an entry made, removed, renamed or replaced by a link
    changes the time) and it was last changed more than 2 s before it was read.
    """
    out: list[tuple[str, bool]] = []
    for cache_key in _groups(tuple(paths)):
        directory, names = cache_key
        key = _identity(directory)
        known = _listings.get(cache_key)
        if known is not None and known.key == key:
            out += known.found
            continue
        started = time.time_ns()
        found: list[tuple[str, bool]] = []
        if key is not None:
            for name in _present(directory, names):
                path = os.path.join(directory, name)
                try:
                    mode = os.stat(path).st_mode
                except OSError:
                    continue
                found.append((os.path.realpath(path), stat.S_ISDIR(mode)))
        if key is None or started - key[2] > _RACY_NS:
            _listings[cache_key] = _Listing(key, tuple(found))
        out += found
    return out
