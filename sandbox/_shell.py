"""The agent's own shell (the built-in ``bash`` tool), confined with bubblewrap.

An extension gets an empty root holding only what it needs (:mod:`sandbox._bwrap`).
The agent's shell is different: it should see the machine as the user does
(compilers in ``/opt``, tools in ``~/.local/bin``, ``~/.gitconfig``), yet a command
an extension rewrote must not plant an extension or touch the user's dotfiles. So:

* the host's whole file system is visible **read-only**;
* the workspace is bound **read-write** (by descriptor, so the directory bound is
  the one that was checked), except the paths in ``read_only`` (its ``.corral``),
  bound read-only on top, again by descriptor; a missing one is created empty first,
  because a read-only bind needs a mount point and a later ``mkdir .corral`` in
  the writable workspace would otherwise succeed (in a directory the user may not
  write, nobody can create it, and none is needed);
* when the workspace is the home directory (or contains it) nothing is writable
  but the private ``/tmp``;
* ``hidden`` directories (corral's home) and the user's credential stores
  (:data:`CREDENTIALS`) are replaced by empty read-only directories (files: by an
  empty file); ``/run`` (D-Bus, Docker and other sockets) by an empty tmpfs;
* a fresh ``/proc`` (``/proc/sys`` read-only), a minimal ``/dev``, private
  size-limited ``/tmp`` and ``/dev/shm``; no network (its own loopback only), or
  with ``network`` TCP to those destinations through corral's egress proxy; the
  same namespaces, dropped capabilities, seccomp filter, cgroup and rlimits as an
  extension, from the same :class:`~sandbox._bwrap.BwrapSandbox` (its probe, its
  config, its cgroup manager), whose ``cleanup`` releases the plan.
"""

from __future__ import annotations

import errno
import os
from typing import final

import msgspec

from ._bwrap import NO_CHILD_NAMESPACE, BwrapSandbox, egress_note
from ._exceptions import PlanError
from ._network import EGRESS_PORT, proxy_env
from ._permissions import Limits
from ._plan import LaunchPlan, Sandbox
from ._preexec import rlimits_for
from ._seccomp import build_filter, filter_fd

__all__ = ["CREDENTIALS", "ShellRequest", "plan_shell"]

_MIB = 1024 * 1024

#: Credential stores under the home directory that the shell never sees.
CREDENTIALS = (
    ".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".kube", ".docker",
    ".password-store", ".local/share/keyrings", ".netrc", ".git-credentials", ".pgpass",
    ".pypirc", ".npmrc",
)  # fmt: skip

_DIR = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


@final
class ShellRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One shell command to run confined."""

    #: Full argv, e.g. ``["/usr/bin/bash", "-c", "ls"]``.
    argv: list[str]
    #: Environment, passed as is except ``TMPDIR`` (the private ``/tmp``).
    env: dict[str, str]
    #: Absolute real path of the workspace (the working directory).
    workspace: str
    #: Bind the workspace read-write (False: everything is read-only but ``/tmp``).
    writable: bool = True
    #: Names of entries directly in the workspace to bind read-only, e.g. ``.corral``.
    read_only: list[str] = []
    #: Absolute paths to hide (replaced by an empty directory or file).
    hidden: list[str] = []
    #: The user's home; its :data:`CREDENTIALS` are hidden too ("" for none).
    home: str = ""
    #: Destinations the shell may reach through corral's egress proxy (checked
    #: entries of a network list, see :func:`sandbox.check_network`); [] for none.
    network: list[str] = []
    limits: Limits = Limits()


def _open_dir(name: str, dir_fd: int) -> int | None:
    """A descriptor of directory ``name`` in ``dir_fd``, never through a symlink.

    A missing one is created empty (someone else creating it first is fine: what is
    there is opened, still without following a symlink). None when it is missing and
    cannot be created for want of permission: then the shell, which runs as the
    same user with fewer privileges, cannot create it either.
    """
    flags = _DIR | os.O_NOFOLLOW
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        try:
            os.mkdir(name, 0o755, dir_fd=dir_fd)
        except FileExistsError:
            pass
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                return None
            raise
    return os.open(name, flags, dir_fd=dir_fd)


def plan_shell(sandbox: Sandbox, request: ShellRequest) -> LaunchPlan | None:
    """The bwrap command line, environment and limits for ``request``.

    Opens the workspace and its read-only entries (creating missing ones), creates
    a cgroup when available and a seccomp descriptor; ``sandbox.cleanup(plan)``
    releases them, as for an extension's plan.

    Returns:
        The plan, or None when ``sandbox`` is not the bwrap backend (the caller
        falls back to its own plan).

    Raises:
        PlanError: the workspace, or a read-only entry, is missing or not a plain
            directory.
    """
    if not isinstance(sandbox, BwrapSandbox):
        return None
    fds: list[int] = []
    notes: list[str] = []
    cgroups: list[str] = []
    listed = list(request.network)
    if listed and not sandbox.config.private_tmpfs:
        raise PlanError("bash", NO_CHILD_NAMESPACE)
    env = {**request.env, "TMPDIR": "/tmp"}
    if listed:
        env.update(proxy_env(EGRESS_PORT, listed))
        notes.append(egress_note(listed))
    try:
        mounts = _mounts(request, fds)
        cgroups = _cgroups(sandbox, request.limits, notes)
        manager = sandbox.cgroups
        memory_done = bool(cgroups) and manager is not None and manager.limits_memory()
        pids_done = bool(cgroups) and manager is not None and manager.limits_processes()
        # The same prefix and namespaces as an extension gets (one bwrap path).
        command = sandbox.process_limit(list(request.argv), request.limits, pids_done, notes)
        args = [
            sandbox.config.bwrap,
            # A network list: the child made the network namespace (and the proxy's
            # listener in it); bwrap shares it.
            *sandbox.namespace_args(bool(listed)),
            *mounts,
            "--chdir",
            request.workspace,
        ]
        if sandbox.config.seccomp:
            fd = filter_fd(build_filter(network=False))
            fds.append(fd)
            args += ["--seccomp", str(fd)]
        else:
            notes.append(f"no seccomp filter: {sandbox.config.seccomp_why}")
    except BaseException:
        for fd in fds:
            os.close(fd)
        if sandbox.cgroups is not None:
            sandbox.cgroups.destroy(cgroups)
        raise
    # The backend's cleanup() closes only descriptors it owns: hand ours over.
    sandbox.own(fds)
    return LaunchPlan(
        argv=[*args, "--", *command],
        env=env,
        cwd=request.workspace,
        backend="bwrap",
        sandboxed=True,
        rlimits=rlimits_for(request.limits, memory=not memory_done, processes=False),
        cgroup=cgroups[0] if cgroups else None,
        extra_cgroups=cgroups[1:],
        notes=notes,
        pass_fds=fds,
        egress=listed,
        egress_port=EGRESS_PORT if listed else 0,
    )


def _mounts(request: ShellRequest, fds: list[int]) -> list[str]:
    size = str(request.limits.tmp_mb * _MIB)
    args = ["--ro-bind", "/", "/", "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
    args += ["--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm"]
    args += ["--size", size, "--tmpfs", "/tmp", "--tmpfs", "/run"]
    # Read-only last: bwrap may still need to create mount points in them.
    remount = ["--remount-ro", "/run"]
    try:
        ws = os.open(request.workspace, _DIR | os.O_NOFOLLOW)
    except OSError as exc:
        raise PlanError("bash", f"{request.workspace}: {exc.strerror}") from exc
    fds.append(ws)
    # Bound even when read-only: the workspace may sit in /tmp, which is private.
    args += ["--bind-fd" if request.writable else "--ro-bind-fd", str(ws), request.workspace]
    for name in request.read_only if request.writable else []:
        try:
            fd = _open_dir(name, ws)
        except OSError as exc:
            where = os.path.join(request.workspace, name)
            raise PlanError("bash", f"{where} must be a plain directory ({exc.strerror})") from exc
        if fd is None:
            continue
        fds.append(fd)
        args += ["--ro-bind-fd", str(fd), os.path.join(request.workspace, name)]
    hidden = list(request.hidden)
    if request.home:
        hidden += [os.path.join(request.home, c) for c in CREDENTIALS]
    for path in hidden:
        real = os.path.realpath(path)
        if os.path.isdir(real):
            args += ["--tmpfs", real]
            remount += ["--remount-ro", real]
        elif os.path.exists(real):
            args += ["--ro-bind", "/dev/null", real]
    return args + remount


def _cgroups(sandbox: BwrapSandbox, limits: Limits, notes: list[str]) -> list[str]:
    if sandbox.cgroups is None:
        return []
    try:
        return sandbox.cgroups.create("bash", limits)
    except OSError as exc:
        notes.append(f"no cgroup for this run ({exc.strerror}); using rlimits only")
        return []
