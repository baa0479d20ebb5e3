"""The spawn seam between the supervisor and the sandbox backends.

The supervisor describes what it wants to run as a :class:`LaunchRequest`; a
:class:`Sandbox` backend turns it into a :class:`LaunchPlan`: the wrapped argv, the
environment, the working directory and the limits the child applies to itself
before ``exec``. The supervisor spawns the plan and, once the process is reaped,
calls :meth:`Sandbox.cleanup`.

Spawning a plan, exactly::

    proc = sandbox.spawn(plan)  # from any thread; a fraction of a millisecond
    # The guardian forks a child that runs in a new session with only its stdio
    # and plan.pass_fds open, applies the plan (limits, cgroups, tmpfs, death with
    # the guardian; see sandbox._preexec) and executes plan.argv in plan.cwd.
    ...
    sandbox_backend.cleanup(plan)  # after it exited, and also if spawning failed

With bwrap, the process the supervisor holds is bwrap itself: signals sent to it
are not forwarded (SIGTERM to it ends the whole sandbox at once, the pid
namespace taking every process with it), and an extension killed by signal N
shows up as exit status 128 + N.
"""

from __future__ import annotations

import enum
from typing import Protocol

import msgspec

from ._permissions import Permissions
from ._pin import Pin

__all__ = ["DEV", "LaunchPlan", "LaunchRequest", "Sandbox", "SandboxMode"]

#: The bytes and inodes of a :attr:`LaunchPlan.tmpfs` entry that is a ``/dev`` the child
#: builds, not a tmpfs of that size (the guardian's child knows it as ``DEV`` too).
DEV = 0


class SandboxMode(enum.StrEnum):
    """How the host asks for isolation (``--sandbox``); see :func:`sandbox.select_sandbox`."""

    #: The best backend that works here, else none, flagged loudly.
    AUTO = "auto"
    #: The best backend that works here, else refuse to start anything.
    REQUIRED = "required"
    #: No isolation (limits only), flagged.
    OFF = "off"


class LaunchRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What the supervisor wants to run."""

    #: Extension name (for cgroup names, logs and errors).
    name: str
    #: Full argv; ``argv[0]`` is an absolute path (interpreters resolved by the supervisor).
    argv: list[str]
    #: Environment already reduced to the allowlist plus what the manifest asks for.
    env: dict[str, str]
    #: Absolute path of the extension's directory (its manifest lives there).
    ext_dir: str
    #: Absolute path of the extension's private writable directory, or None.
    data_dir: str | None
    #: Declared permissions, with paths already validated and made absolute.
    permissions: Permissions = Permissions()
    #: Extra read-only paths the runtime needs (e.g. corral's SDK directory).
    runtime_paths: list[str] = []
    #: The interpreter corral chose to run the extension with (``argv[0]``), whose
    #: installation is made visible; "" when ``argv[0]`` is the extension's own
    #: program, which then sees the system directories only.
    interpreter: str = ""
    #: Identities the paths to bind must still have (from validation, or from the
    #: first spawn): a mismatch raises :class:`GrantChanged` instead of binding.
    pins: list[Pin] = []
    #: Paths no runtime bind may contain or lie inside (corral's home); the user's
    #: home and the current directory (the project tree) are never contained either.
    hidden: list[str] = []
    #: A network namespace of its own (its own loopback only), whatever
    #: ``permissions.network`` says: with ``network: true`` the child keeps what that
    #: grant allows inside the sandbox (unix sockets, the resolver's and TLS files)
    #: and reaches nothing outside it (a headless browser, whose every request corral
    #: answers itself). Only a backend with network namespaces can give it: ``none``
    #: notes that it does not.
    private_network: bool = False
    #: The caller's descriptors the program inherits besides its stdio, at the same
    #: numbers. The plan passes them (in :attr:`LaunchPlan.pass_fds`) without owning
    #: them: the caller closes them once the child started.
    pass_fds: list[int] = []


class LaunchPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What the supervisor actually spawns."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    #: Backend that produced the plan: ``"bwrap"``, ``"sandbox-exec"`` or ``"none"``.
    backend: str
    #: False when the extension runs without isolation (flagged loudly by the host).
    sandboxed: bool
    #: ``(resource, soft, hard)`` triples applied with ``setrlimit`` in the child.
    rlimits: list[tuple[int, int, int]] = []
    #: A cgroup directory the child moves itself into before ``exec``, if any.
    cgroup: str | None = None
    #: Human-readable notes (degraded hardening, missing features).
    notes: list[str] = []
    #: Descriptors the child must inherit (``Popen(pass_fds=...)``), e.g. the seccomp
    #: filter bwrap reads at start-up. Owned by the plan (:meth:`Sandbox.cleanup` closes
    #: them, so a plan is spawned at most once), except the request's own
    #: (:attr:`LaunchRequest.pass_fds`), which stay the caller's.
    pass_fds: list[int] = []
    #: Further cgroup directories the child joins (cgroup v1 keeps memory and pids in
    #: separate hierarchies); :func:`sandbox.spawn`'s child joins them with ``cgroup``.
    extra_cgroups: list[str] = []
    #: Per-run directories :meth:`Sandbox.plan` created (a private tmp on macOS);
    #: :meth:`Sandbox.cleanup` removes them.
    run_dirs: list[str] = []
    #: Protected directories the plan binds, each ``(lock_fd, parent_fd, name,
    #: created)``: a shared ``flock`` held on it while the child may run, and
    #: whether the plan created it empty as a mount point. :meth:`Sandbox.cleanup`
    #: removes one it created if it is still empty and no other plan holds it (see
    #: :func:`sandbox._protected.release_placeholders`), then closes both descriptors.
    placeholders: list[tuple[int, int, str, bool]] = []
    #: Identities of what the plan binds: pass them as the next request's ``pins``
    #: so a restart binds the same files.
    pins: list[Pin] = []
    #: ``(directory, bytes, inodes)``: a tmpfs the child mounts over each directory,
    #: in a user and mount namespace of its own, before it runs bwrap (which binds
    #: them as ``/tmp`` and ``/dev``): bwrap cannot cap a tmpfs's inodes. An entry
    #: of :data:`DEV` bytes and inodes is a read-only ``/dev`` the child builds there
    #: (bwrap's device nodes, links and ``devpts``), in the order listed.
    tmpfs: list[tuple[str, int, int]] = []
    #: The destinations of a network list (canonical entries of ``permissions.network``),
    #: which corral's egress proxy lets the child reach; [] without one.
    egress: list[str] = []
    #: With ``egress``: the port of the proxy's listener, which the child creates on
    #: ``127.0.0.1`` in a network namespace of its own (loopback only) and hands to
    #: the host before ``exec`` (see :func:`sandbox.spawn`); 0 for none.
    egress_port: int = 0


class Sandbox(Protocol):
    """A sandbox backend."""

    @property
    def backend(self) -> str:
        """``"bwrap"``, ``"sandbox-exec"`` or ``"none"``."""
        ...

    def plan(self, request: LaunchRequest) -> LaunchPlan:
        """Turn a request into a plan. Pure apart from creating per-run resources.

        Those are the data directory when missing, the run's cgroups and a private
        tmp (macOS), and the descriptors in ``pass_fds``; :meth:`cleanup` releases
        them. One plan is spawned at most once.

        Raises:
            PlanError: the request cannot be sandboxed as given (e.g. a shim argv[0]).
        """
        ...

    def cleanup(self, plan: LaunchPlan) -> None:
        """Release what :meth:`plan` created; kill leftovers of its cgroup. Idempotent.

        Call it once the process is reaped, and also when spawning the plan failed:
        the plan may hold descriptors (``pass_fds``) and cgroups.
        """
        ...
