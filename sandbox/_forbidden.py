"""What a grant (or a runtime bind) may not expose, and why.

Two levels:

* **never**: ``/``, the kernel's trees, the user's home itself or a parent of it,
  corral's home (other extensions' data and logs), and for runtime binds the
  project tree. Nothing overrides these.
* **risky**: writable system trees, writable dotfiles of the home, credential
  stores (the one list of :mod:`sandbox._secrets`, even read-only, and any grant
  containing one), the extension's own directory as writable, corral's own
  installation as writable, and environment variables that make an interpreter
  or the dynamic loader run other code. An extension may still ask for one of
  these by also naming it, exactly as written, in ``permissions.unsafe``; the
  user sees that list at install and trust time.

The functions here are pure: they compare absolute, real (symlink-free) paths.
"""

from __future__ import annotations

import os

from ._protected import installation_paths
from ._secrets import credential_paths
from ._within import inside

__all__ = [
    "KERNEL_TREES",
    "env_risk",
    "never_problem",
    "path_risk",
]

#: Kernel interfaces: granting them (or anything inside) exposes the host itself.
KERNEL_TREES = ("/proc", "/sys", "/dev")

#: System trees that are never granted writable (the OS, its configuration, other
#: users' and services' state). Scratch space inside them stays allowed.
_SYSTEM_TREES = (
    "/etc", "/usr", "/var", "/boot", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
    "/libx32", "/srv", "/root", "/run", "/snap", "/nix", "/System", "/Library",
    "/Applications", "/private", "/cores",
)  # fmt: skip
_SCRATCH = ("/var/tmp", "/private/tmp", "/private/var/tmp", "/private/var/folders")

#: Environment variables that make the dynamic loader, an interpreter or a shell
#: load or run other code, by exact name...
_ENV_EXACT = frozenset({
    "NODE_OPTIONS", "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE", "PERLLIB", "PERLIO_DEBUG",
    "GEM_PATH", "GEM_HOME", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS",
    "CLASSPATH", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS",
    "GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH", "NLSPATH", "HOSTALIASES", "RES_OPTIONS",
    "RESOLV_HOST_CONF", "LOCALDOMAIN", "GETCONF_DIR", "TZDIR", "TCLLIBPATH", "PHPRC",
    "PHP_INI_SCAN_DIR", "OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES", "GTK_MODULES",
    "GTK_PATH", "GIO_EXTRA_MODULES", "QT_PLUGIN_PATH", "GIT_SSH", "GIT_SSH_COMMAND",
    "GIT_EXEC_PATH", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_PROXY_COMMAND", "GIT_EXTERNAL_DIFF",
    "GIT_TEMPLATE_DIR",
})  # fmt: skip
#: ...and by prefix.
_ENV_PREFIXES = (
    "LD_", "DYLD_", "PYTHON", "PERL5", "RUBY", "LUA_", "BASH_FUNC_", "MALLOC_", "GIT_CONFIG",
)  # fmt: skip


def never_problem(path: str, *, home: str, hidden: tuple[str, ...] = ()) -> str | None:
    """Why ``path`` can never be exposed, or None.

    Args:
        path: absolute real path.
        home: the user's home ("" if unknown).
        hidden: further paths no grant may contain or equal (corral's home, the
            project tree); a grant inside one is the caller's to judge.
    """
    if path == "/":
        return "is / (the whole disk); grant specific folders"
    for tree in KERNEL_TREES:
        if inside(path, tree):
            return f"is inside {tree}, which is never granted"
    if home:
        if path == home:
            return "is your home directory itself; grant the folders it needs"
        if inside(home, path):
            return f"contains your home directory ({home})"
    for keep in hidden:
        if keep and inside(keep, path):
            return f"contains {keep}, which must stay hidden"
    return None


def path_risk(path: str, *, writable: bool, home: str, ext_dir: str) -> str | None:
    """Why granting ``path`` needs an explicit ``unsafe`` entry, or None.

    Args:
        path: absolute real path of the grant.
        writable: the grant is ``read_write``.
        home: the user's home ("" if unknown).
        ext_dir: the extension's real directory.
    """
    for secret in credential_paths(home):
        if inside(path, secret):
            return f"is inside {secret}, which holds credentials"
        if inside(secret, path):
            return f"contains {secret}, which holds credentials"
    if not writable:
        return None
    if inside(ext_dir, path):
        return (
            "would make the extension's own directory writable: it could rewrite its "
            "code and manifest"
        )
    for tree in _SYSTEM_TREES:
        if inside(path, tree) and not any(inside(path, s) for s in _SCRATCH):
            if home and inside(path, home):
                break  # e.g. root's home is /root
            return f"is a system tree ({tree}); writing there changes the machine"
    if home and inside(path, home) and not inside(path, ext_dir):
        first = os.path.relpath(path, home).split("/", 1)[0]
        if first.startswith("."):
            return f"is a dotfile or dot-directory of your home (~/{first}); it configures programs"
    for corral in installation_paths():
        if inside(corral.path, path) or inside(path, corral.path):
            where = "contains" if inside(corral.path, path) else "is inside"
            return (
                f"{where} {corral.why} ({corral.path}): the host would run what the "
                "extension writes there"
            )
    return None


def env_risk(name: str) -> str | None:
    """Why passing the variable ``name`` needs an explicit ``unsafe`` entry, or None."""
    if name in _ENV_EXACT or name.startswith(_ENV_PREFIXES):
        return "makes the loader, an interpreter or a shell load or run other code"
    return None
