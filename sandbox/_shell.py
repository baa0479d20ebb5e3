"""The agent's own shell (the built-in ``bash`` tool), confined with bubblewrap.

An extension gets an empty root holding only what it needs (:mod:`sandbox._bwrap`).
The agent's shell is different: it should see the machine as the user does
(compilers in ``/opt``, tools in ``~/.local/bin``, ``~/.gitconfig``), yet a command
an extension rewrote must not plant an extension or touch the user's dotfiles. So:

* the host's whole file system is visible **read-only**;
* the workspace is bound **read-write** (by descriptor, so the directory bound is
  the one that was checked), except the protected paths inside it
  (:mod:`sandbox._protected`: corral's installation, ``.corral``, git's hooks and
  configuration, the user's own), bound read-only on top, again by descriptor,
  with every directory on the way bound onto itself so that it cannot be renamed
  away; a missing one is created empty first, because a read-only bind needs a
  mount point and a later ``mkdir .git/hooks`` in the writable workspace would
  otherwise succeed (in a directory the user may not write, nobody can create it,
  and none is needed); an empty directory made so is removed again after the
  command, when no other plan holds it (:func:`~sandbox._protected.protect_args`);
* when the workspace is the home directory (or contains it), or is itself
  protected (it holds corral's installation), nothing is writable but the
  private ``/tmp``;
* ``hidden`` directories (corral's home) and every credential store that exists
  and that the user can read (:func:`sandbox.credential_paths`, the list the
  grant rules use) are replaced by empty read-only directories (files: by an
  empty file), unless one holds the workspace; ``/run`` (D-Bus, Docker and other
  sockets) by an empty tmpfs;
* a fresh ``/proc`` (``/proc/sys`` read-only), an extension's ``/dev`` (minimal,
  read-only, built by corral's child) and its private ``/tmp`` and ``/dev/shm``,
  capped in size and in inodes; no network (its own loopback only), or
  with ``network`` TCP to those destinations through corral's egress proxy; the
  same namespaces, dropped capabilities, seccomp filter, cgroup and rlimits as an
  extension, from the same :class:`~sandbox._bwrap.BwrapSandbox` (its probe, its
  config, its cgroup manager), whose ``cleanup`` releases the plan.
"""

from __future__ import annotations

import os
from typing import final

import msgspec

from ._bwrap import NO_CHILD_NAMESPACE, BwrapSandbox, egress_note
from ._exceptions import PlanError
from ._network import EGRESS_PORT, proxy_env
from ._permissions import Limits
from ._plan import LaunchPlan, Sandbox
from ._preexec import rlimits_for
from ._protected import Protected, ProtectKind, protect_args, release_placeholders
from ._seccomp import build_filter, filter_fd
from ._secrets import existing, stores_around
from ._within import inside

__all__ = ["ShellRequest", "plan_shell"]

_CORRAL_WHY = "corral's project-local extensions"
#: Hidden already: an empty tmpfs replaces /run (and /var/run leads there).
_RUN = ("/run", "/var/run")

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
    #: Names of directories directly in the workspace to bind read-only, e.g.
    #: ``.corral`` (as :attr:`protected` entries).
    read_only: list[str] = []
    #: Protected paths (:class:`~sandbox.ProtectedPaths`): those inside the workspace
    #: are bound read-only; one that is the workspace or holds it makes it read-only.
    protected: list[Protected] = []
    #: Absolute paths to hide (replaced by an empty directory or file).
    hidden: list[str] = []
    #: The user's home; every credential store (:func:`sandbox.credential_paths`)
    #: is hidden too.
    home: str = ""
    #: Destinations the shell may reach through corral's egress proxy (checked
    #: entries of a network list, see :func:`sandbox.check_network`); [] for none.
    network: list[str] = []
    limits: Limits = Limits()


def plan_shell(sandbox: Sandbox, request: ShellRequest) -> LaunchPlan | None:
    """The bwrap command line, environment and limits for ``request``.

    Opens the workspace and its protected paths (creating missing ones), creates
    a cgroup when available and a seccomp descriptor; ``sandbox.cleanup(plan)``
    releases them, as for an extension's plan.

    Returns:
        The plan, or None when ``sandbox`` is not the bwrap backend (the caller
        falls back to its own plan).

    Raises:
        PlanError: the workspace is missing, or a protected path (or a directory on
            the way to one) is a symlink or cannot be opened.
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
    held: list[tuple[int, int, str, bool]] = []  # protected directories, locked
    try:
        # /dev and the capped /tmp and /dev/shm, as an extension gets them (the child
        # builds /dev and mounts them, with an inode cap: a command cannot fill the
        # kernel's memory with empty files).
        dev, tmp, tmpfs = sandbox.tmp_args(request.limits, notes)
        mounts = _mounts(request, [*dev, *tmp], fds, held)
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
            *sandbox.namespace_args(bool(listed), child_tmpfs=bool(tmpfs)),
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
        release_placeholders(held)
        for fd in fds:
            os.close(fd)
        if sandbox.cgroups is not None:
            sandbox.cgroups.destroy(cgroups)
        raise
    # The backend's cleanup() closes only descriptors it owns: hand ours over.
    sandbox.own(fds)
    sandbox.own(fd for lock, parent, _, _ in held for fd in (lock, parent))
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
        placeholders=held,
        tmpfs=tmpfs,
        egress=listed,
        egress_port=EGRESS_PORT if listed else 0,
    )


def _mounts(
    request: ShellRequest,
    private: list[str],
    fds: list[int],
    held: list[tuple[int, int, str, bool]],
) -> list[str]:
    """The shell's mounts; ``private``: its /dev, /tmp and /dev/shm (``tmp_args``)."""
    args = ["--ro-bind", "/", "/", "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
    args += [*private, "--tmpfs", "/run"]
    # Read-only last: bwrap may still need to create mount points in them.
    remount = ["--remount-ro", "/run"]
    try:
        ws = os.open(request.workspace, _DIR | os.O_NOFOLLOW)
    except OSError as exc:
        raise PlanError("bash", f"{request.workspace}: {exc.strerror}") from exc
    fds.append(ws)
    protected = [
        *request.protected,
        *(
            Protected(os.path.join(request.workspace, name), ProtectKind.DIR, _CORRAL_WHY)
            for name in request.read_only
        ),
    ]
    writable = request.writable and not any(inside(request.workspace, p.path) for p in protected)
    # Bound even when read-only: the workspace may sit in /tmp, which is private.
    args += ["--bind-fd" if writable else "--ro-bind-fd", str(ws), request.workspace]
    if writable:
        args += protect_args(request.workspace, ws, protected, fds, who="bash", placeholders=held)
    for real, is_dir in _hidden(request):
        # An empty tmpfs of one page, writable: what is written there goes nowhere.
        # Read-only would cost a second mount per store, and bwrap reads the mount
        # table again for each remount (about 0.2 ms each, measured).
        args += ["--size", "4096", "--tmpfs", real] if is_dir else ["--ro-bind", "/dev/null", real]
    return args + remount


def _hidden(request: ShellRequest) -> list[tuple[str, bool]]:
    """Real paths to hide (and whether each is a directory): corral's home, every
    credential store that exists and that this user can read, never one holding the
    workspace, nothing twice, nothing inside another."""
    found: dict[str, bool] = {}
    # /run is an empty tmpfs already: what lies in it needs no look.
    wanted = [*request.hidden, *stores_around(request.home, request.workspace)]
    wanted = [p for p in wanted if not p.startswith(("/run/", "/var/run/")) and p not in _RUN]
    for real, is_dir in existing(wanted):
        if real in found or inside(request.workspace, real):
            continue
        # What this user cannot read needs no hiding (root can read everything).
        if os.access(real, os.R_OK) or (is_dir and os.access(real, os.X_OK)):
            found[real] = is_dir
    # /run is already an empty tmpfs; a store inside a hidden directory is hidden.
    dirs = ["/run/", *(p + "/" for p, d in found.items() if d)]
    return [(p, d) for p, d in found.items() if not p.startswith(tuple(dirs))]


def _cgroups(sandbox: BwrapSandbox, limits: Limits, notes: list[str]) -> list[str]:
    if sandbox.cgroups is None:
        return []
    try:
        return sandbox.cgroups.create("bash", limits)
    except OSError as exc:
        notes.append(f"no cgroup for this run ({exc.strerror}); using rlimits only")
        return []
