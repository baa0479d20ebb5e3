"""Validation of a manifest's ``permissions`` object.

Every path is resolved here, checked against :mod:`sandbox._forbidden`, and its
real target *pinned* (device, inode, kind; see :mod:`sandbox._pin`): each spawn
binds that very file or refuses to start. Two structural rules close the ways an
extension could change what a path means between validation and use:

* no grant may lie inside a directory the extension can write (a ``read_write``
  grant, or its own directory when that is writable): it could swap a directory
  on the way for a symlink;
* no path may be reached through a symlink that sits in such a directory, or
  anywhere in corral's home but the extension's own (read-only) directory: the
  extension could have planted it in an earlier session.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import stat
from typing import final

import msgspec

from ._exceptions import PermissionsError
from ._forbidden import env_risk, never_problem, path_risk
from ._network import check_network
from ._permissions import Limits, Permissions
from ._pin import Pin, real_path, walk
from ._within import inside

__all__ = ["Checked", "check_permissions", "validate_permissions"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Symlinks followed while resolving one path, at most (as the kernel's limit).
_MAX_LINKS = 40

#: (field, smallest, largest) for every limit; the bounds catch typos (MiB vs bytes).
_LIMIT_BOUNDS: dict[str, tuple[int, int]] = {
    "memory_mb": (16, 1 << 20),
    "processes": (1, 1 << 16),
    "open_files": (16, 1 << 20),
    "tmp_mb": (1, 1 << 20),
    "file_mb": (1, 1 << 24),
}


@final
class Checked(msgspec.Struct, frozen=True, kw_only=True):
    """Validated permissions and the identities every spawn must bind."""

    #: Paths absolute and real; ``unsafe`` reduced to what needed it, resolved.
    permissions: Permissions
    #: The extension's directory, then each grant, as validated.
    pins: list[Pin]


@dataclasses.dataclass
class _Grant:
    field: str
    raw: str
    writable: bool
    real: str
    #: Real directories holding a symlink that resolving ``raw`` followed.
    links: list[str]
    pin: Pin
    ancestors: tuple[tuple[int, int], ...]

    @property
    def identity(self) -> tuple[int, int]:
        return (self.pin.dev, self.pin.ino)


def _absolute(raw: str, field: str, ext_dir: str, home: str) -> str:
    if not raw.strip():
        raise PermissionsError(field, "must not be empty")
    if raw == "~" or raw.startswith("~/"):
        if not home:
            raise PermissionsError(field, f"{raw!r} uses ~ but the home directory is unknown")
        raw = home + raw[1:]
    elif raw.startswith("~"):
        raise PermissionsError(field, f"{raw!r}: only ~ and ~/... are supported, not ~user")
    return os.path.normpath(raw if os.path.isabs(raw) else os.path.join(ext_dir, raw))


def _resolve(path: str) -> tuple[str, list[str]]:
    """Like ``realpath(strict=True)``; also returns where each symlink followed lives."""
    pending = [p for p in path.split("/") if p]
    done = "/"
    links: list[str] = []
    while pending:
        name = pending.pop(0)
        if name == ".":
            continue
        if name == "..":
            done = os.path.dirname(done)
            continue
        candidate = os.path.join(done, name)
        if not stat.S_ISLNK(os.lstat(candidate).st_mode):
            done = candidate
            continue
        links.append(done)
        if len(links) > _MAX_LINKS:
            raise OSError(errno.ELOOP, "too many symlinks", path)
        target = os.readlink(candidate)
        if target.startswith("/"):
            done = "/"
        pending = [p for p in target.split("/") if p] + pending
    return done, links


def _refuse_corral_home(real: str, raw: str, field: str, corral_home: str, ext_dir: str) -> None:
    # Installed extensions live in corral's home: their own directory is fine.
    exposes = inside(corral_home, real) or (inside(real, corral_home) and not inside(real, ext_dir))
    if corral_home and exposes:
        raise PermissionsError(
            field,
            f"{raw!r} would expose corral's home ({corral_home}), which holds other "
            "extensions' data and logs",
        )


def _grant(
    raw: str, field: str, writable: bool, *, ext_dir: str, home: str, corral_home: str
) -> tuple[_Grant, str | None]:
    """One grant, resolved, checked and pinned; with its risk (if any)."""
    absolute = _absolute(raw, field, ext_dir, home)
    try:
        real, links = _resolve(absolute)
    except FileNotFoundError:
        raise PermissionsError(field, f"{raw!r} does not exist ({absolute})") from None
    except OSError as exc:
        raise PermissionsError(field, f"{raw!r} cannot be resolved: {exc.strerror}") from None
    problem = never_problem(real, home=home)
    if problem:
        raise PermissionsError(field, f"{raw!r} {problem}")
    _refuse_corral_home(real, raw, field, corral_home, ext_dir)
    try:
        walked = walk(real, keep_fd=False)
    except OSError as exc:
        raise PermissionsError(
            field, f"{raw!r} changed while it was validated ({exc.strerror}: {exc.filename})"
        ) from None
    risk = path_risk(real, writable=writable, home=home, ext_dir=ext_dir)
    pin = msgspec.structs.replace(walked.pin(real, real), declared=raw)
    return _Grant(field, raw, writable, real, links, pin, walked.ancestors), risk


def _check_structure(grants: list[_Grant], ext: _Grant, corral_home: str) -> None:
    """The two rules of the module docstring."""
    writable = [g for g in grants if g.writable]
    if any(w.identity == ext.identity or w.identity in ext.ancestors for w in writable):
        writable.append(ext)
    for g in grants:
        for w in writable:
            # The same directory as another writable grant counts; as the (then
            # writable) extension directory, it is that very grant.
            same = w.identity == g.identity and w is not ext
            if w is not g and (same or w.identity in g.ancestors):
                raise PermissionsError(
                    g.field,
                    f"{g.raw!r} lies inside {w.real}, which the extension can write: it could "
                    "replace a directory on the way with a symlink. Grant one or the other",
                )
        for where in g.links:
            for w in writable:
                if inside(where, w.real):
                    raise PermissionsError(
                        g.field,
                        f"{g.raw!r} goes through a symlink in {where}, which the extension can "
                        "write (it may have planted it); name the real path",
                    )
            if corral_home and inside(where, corral_home) and not inside(where, ext.real):
                raise PermissionsError(
                    g.field,
                    f"{g.raw!r} goes through a symlink in corral's home ({where}), where "
                    "extensions write; name the real path",
                )


def _check_env(names: list[str], unsafe: set[str]) -> list[str]:
    risky: list[str] = []
    for index, name in enumerate(names):
        field = f"permissions.env[{index}]"
        if not _ENV_NAME.match(name):
            raise PermissionsError(field, f"{name!r} is not a valid environment variable name")
        if name.startswith("CORRAL_"):
            raise PermissionsError(field, f"{name!r}: CORRAL_* variables are set by corral")
        risk = env_risk(name)
        if risk and name not in unsafe:
            raise PermissionsError(field, _needs_unsafe(name, risk))
        if risk:
            risky.append(name)
    return risky


def _needs_unsafe(raw: str, risk: str) -> str:
    return f"{raw!r} {risk}; to ask for it anyway, also list {raw!r} in permissions.unsafe"


def _check_limits(limits: Limits) -> None:
    for name, (low, high) in _LIMIT_BOUNDS.items():
        value = getattr(limits, name)
        if not low <= value <= high:
            raise PermissionsError(
                f"permissions.limits.{name}", f"{value} is out of range ({low}..{high})"
            )


def check_permissions(perms: Permissions, ext_dir: str, *, home: str, corral_home: str) -> Checked:
    """Check a ``permissions`` object; return it resolved, with the pins to bind.

    Paths may be absolute, ``~/...`` (the user's home) or relative to the
    extension's directory; they must exist. Never granted: ``/``, anything in
    ``/proc``, ``/sys`` or ``/dev``, the home directory itself or a parent of it,
    corral's home or anything in it but the extension's own directory, a path
    inside a directory the extension can write, or one reached through a symlink
    it could have planted. Granted only when also listed in ``unsafe``: the risky
    paths and variables of :mod:`sandbox._forbidden`, and network destinations
    naming a local address (:mod:`sandbox._network`).

    Args:
        perms: the permissions as decoded from the manifest.
        ext_dir: absolute directory of the extension (base of relative paths).
        home: the user's home directory ("" if unknown: ``~`` is then refused).
        corral_home: corral's home ("" if unknown: that check is skipped).

    Returns:
        The permissions with ``read_only`` and ``read_write`` absolute and real,
        ``network`` destinations canonical, and ``unsafe`` reduced to the resolved
        entries that needed it, and the pins of
        the extension's directory and of every grant.

    Raises:
        PermissionsError: naming the field, e.g. ``permissions.read_only[1]``.
    """
    if perms.read_only or perms.read_write:  # only grants are checked against them
        home = os.path.realpath(home) if home else ""
        corral_home = os.path.realpath(corral_home) if corral_home else ""
    ext_real = real_path(ext_dir)
    try:
        # Its ancestors matter only below a writable grant (the structure rules):
        # without one, one openat2 refusing every symlink does the walk's check.
        ext_walked = walk(ext_real, ancestors=bool(perms.read_write))
    except OSError as exc:
        raise PermissionsError("", f"the extension's directory {ext_dir}: {exc.strerror}") from None
    if ext_walked.fd >= 0:
        os.close(ext_walked.fd)
    ext = _Grant(
        "", ext_dir, False, ext_real, [], ext_walked.pin(os.path.abspath(ext_dir), ext_real),
        ext_walked.ancestors,
    )  # fmt: skip
    unsafe = set(perms.unsafe)
    grants: list[_Grant] = []
    needed: list[str] = []
    for name, writable in (("read_only", False), ("read_write", True)):
        for index, raw in enumerate(getattr(perms, name)):
            field = f"permissions.{name}[{index}]"
            grant, risk = _grant(
                raw, field, writable, ext_dir=ext_real, home=home, corral_home=corral_home
            )
            if risk and raw not in unsafe:
                raise PermissionsError(field, _needs_unsafe(raw, risk))
            if risk:
                needed.append(grant.real)
            grants.append(grant)
    read_only = [g.real for g in grants if not g.writable]
    for grant in grants:
        if grant.writable and grant.real in read_only:
            raise PermissionsError(
                grant.field, f"{grant.raw!r} is also listed in read_only; list it once"
            )
    _check_structure(grants, ext, corral_home)
    needed += _check_env(perms.env, unsafe)
    network, local = check_network(perms.network, unsafe)
    needed += local
    listed = {*perms.read_only, *perms.read_write, *perms.env, *perms.destinations}
    for index, entry in enumerate(perms.unsafe):
        if entry not in listed:
            raise PermissionsError(
                f"permissions.unsafe[{index}]",
                f"{entry!r} names nothing in read_only, read_write, env or network",
            )
    _check_limits(perms.limits)
    validated = msgspec.structs.replace(
        perms,
        network=network,
        read_only=read_only,
        read_write=[g.real for g in grants if g.writable],
        unsafe=list(dict.fromkeys(needed)),
    )
    return Checked(permissions=validated, pins=[ext.pin, *(g.pin for g in grants)])


def validate_permissions(
    perms: Permissions, ext_dir: str, *, home: str, corral_home: str
) -> Permissions:
    """:func:`check_permissions` without the pins (for display and tests).

    Raises:
        PermissionsError: naming the field, e.g. ``permissions.read_only[1]``.
    """
    return check_permissions(perms, ext_dir, home=home, corral_home=corral_home).permissions
