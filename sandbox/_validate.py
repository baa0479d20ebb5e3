"""Validation of a manifest's ``permissions`` object.

Paths are resolved once, here, so every backend binds exactly the real path the
user reviewed: a symlink in a declared path cannot later be swapped to point
somewhere else. A few paths can never be granted, because granting them would
hand the extension the whole disk, the kernel's interfaces or corral's own state.
"""

from __future__ import annotations

import os
import re

import msgspec

from ._exceptions import PermissionsError
from ._permissions import Limits, Permissions

__all__ = ["validate_permissions"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Kernel interfaces: granting them (or anything inside) exposes the host itself.
_KERNEL_TREES = ("/proc", "/sys", "/dev")

#: (field, smallest, largest) for every limit; the bounds catch typos (MiB vs bytes).
_LIMIT_BOUNDS: dict[str, tuple[int, int]] = {
    "memory_mb": (16, 1 << 20),
    "processes": (1, 1 << 16),
    "open_files": (16, 1 << 20),
    "tmp_mb": (1, 1 << 20),
    "file_mb": (1, 1 << 24),
}


def _inside(path: str, root: str) -> bool:
    """True when ``path`` is ``root`` or lies below it (both absolute and normalised)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _resolve(raw: str, field: str, ext_dir: str, home: str) -> str:
    if not raw.strip():
        raise PermissionsError(field, "must not be empty")
    if raw == "~" or raw.startswith("~/"):
        if not home:
            raise PermissionsError(field, f"{raw!r} uses ~ but the home directory is unknown")
        raw = home + raw[1:]
    elif raw.startswith("~"):
        raise PermissionsError(field, f"{raw!r}: only ~ and ~/... are supported, not ~user")
    path = raw if os.path.isabs(raw) else os.path.join(ext_dir, raw)
    path = os.path.normpath(path)
    if not os.path.exists(path):
        raise PermissionsError(field, f"{raw!r} does not exist ({path})")
    return os.path.realpath(path)


def _refuse_forbidden(
    path: str, raw: str, field: str, home: str, corral_home: str, ext_dir: str
) -> None:
    if path == "/":
        raise PermissionsError(field, f"{raw!r} is / (the whole disk); grant specific folders")
    for tree in _KERNEL_TREES:
        if _inside(path, tree):
            raise PermissionsError(field, f"{raw!r} is inside {tree}, which is never granted")
    if home:
        if path == home:
            raise PermissionsError(
                field, f"{raw!r} is your home directory itself; grant the folders it needs"
            )
        if _inside(home, path):
            raise PermissionsError(field, f"{raw!r} contains your home directory ({home})")
    # Installed extensions live in corral's home: their own directory is fine.
    exposes = _inside(corral_home, path) or (
        _inside(path, corral_home) and not _inside(path, ext_dir)
    )
    if corral_home and exposes:
        raise PermissionsError(
            field,
            f"{raw!r} would expose corral's home ({corral_home}), which holds other "
            "extensions' data and logs",
        )


def _check_paths(
    raws: list[str], name: str, ext_dir: str, home: str, corral_home: str
) -> list[str]:
    out: list[str] = []
    for index, raw in enumerate(raws):
        field = f"permissions.{name}[{index}]"
        path = _resolve(raw, field, ext_dir, home)
        _refuse_forbidden(path, raw, field, home, corral_home, ext_dir)
        out.append(path)
    return out


def _check_env(names: list[str]) -> None:
    for index, name in enumerate(names):
        field = f"permissions.env[{index}]"
        if not _ENV_NAME.match(name):
            raise PermissionsError(field, f"{name!r} is not a valid environment variable name")
        if name.startswith("CORRAL_"):
            raise PermissionsError(field, f"{name!r}: CORRAL_* variables are set by corral")


def _check_limits(limits: Limits) -> None:
    for name, (low, high) in _LIMIT_BOUNDS.items():
        value = getattr(limits, name)
        if not low <= value <= high:
            raise PermissionsError(
                f"permissions.limits.{name}", f"{value} is out of range ({low}..{high})"
            )


def validate_permissions(
    perms: Permissions, ext_dir: str, *, home: str, corral_home: str
) -> Permissions:
    """Check a ``permissions`` object and return a copy with absolute, real paths.

    Paths may be absolute, ``~/...`` (the user's home) or relative to the
    extension's directory; they must exist. They may never be ``/``, anything in
    ``/proc``, ``/sys`` or ``/dev``, the home directory itself or a parent of it,
    nor corral's home, a parent of it or anything in it other than the
    extension's own directory.

    Args:
        perms: the permissions as decoded from the manifest.
        ext_dir: absolute directory of the extension (base of relative paths).
        home: the user's home directory ("" if unknown: ``~`` is then refused).
        corral_home: corral's home ("" if unknown: that check is skipped).

    Returns:
        The same permissions with ``read_only`` and ``read_write`` made absolute
        and resolved (symlinks followed).

    Raises:
        PermissionsError: naming the field, e.g. ``permissions.read_only[1]``.
    """
    home = os.path.realpath(home) if home else ""
    corral_home = os.path.realpath(corral_home) if corral_home else ""
    ext_dir = os.path.realpath(ext_dir)
    read_only = _check_paths(perms.read_only, "read_only", ext_dir, home, corral_home)
    read_write = _check_paths(perms.read_write, "read_write", ext_dir, home, corral_home)
    for index, path in enumerate(read_write):
        if path in read_only:
            raise PermissionsError(
                f"permissions.read_write[{index}]",
                f"{perms.read_write[index]!r} is also listed in read_only; list it once",
            )
    _check_env(perms.env)
    _check_limits(perms.limits)
    return msgspec.structs.replace(perms, read_only=read_only, read_write=read_write)
