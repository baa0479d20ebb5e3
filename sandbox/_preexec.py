"""What a child does between ``fork`` and ``exec``: limits, cgroup, parent-death signal.

No ``preexec_fn`` runs in the host: the guardian (:mod:`sandbox._guardian`) forks
every child, and the child prepares itself from an *order*, plain data built here
from the plan (:func:`child_order`): its descriptors, a new session, and, for a
prepared launch, ``PR_SET_PDEATHSIG=SIGKILL`` (it dies with the guardian, which
itself ends everything when the host dies), child subreaper, the plan's cgroups,
its rlimits and its inode-capped tmpfs (see :mod:`sandbox._bwrap`). The child's
side is ``_guardian_child.py`` (run by the guardian program, ``_guardian_main.py``).
"""

from __future__ import annotations

import resource
from typing import Any

from ._permissions import Limits
from ._plan import LaunchPlan

__all__ = ["SETUP_FAILED_EXIT", "child_order", "rlimits_for"]

#: Exit status of a child whose preparation failed (e.g. the private /tmp could not
#: be mounted); it said why on its stderr. Kept equal to ``_guardian_child``'s.
SETUP_FAILED_EXIT = 125

_MIB = 1024 * 1024


def rlimits_for(limits: Limits, *, memory: bool, processes: bool) -> list[tuple[int, int, int]]:
    """The ``setrlimit`` triples for an extension's limits.

    Args:
        limits: the declared limits.
        memory: also limit memory per process with ``RLIMIT_DATA`` (when no memory
            cgroup does it for the whole extension). ``RLIMIT_AS`` is never used: V8
            reserves far more address space than it touches and would not start.
        processes: also set ``RLIMIT_NPROC``. Only safe where the count is per
            sandbox (inside a user namespace); otherwise it counts all of the user's
            processes.
    """
    out = [
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_FSIZE, limits.file_mb * _MIB, limits.file_mb * _MIB),
        # Core dumps write the process's memory to disk: a way around both the
        # disk limit and (for a crash in the host's libraries) confidentiality.
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if memory:
        out.append((resource.RLIMIT_DATA, limits.memory_mb * _MIB, limits.memory_mb * _MIB))
    if processes:
        out.append((resource.RLIMIT_NPROC, limits.processes, limits.processes))
    return out


def child_order(plan: LaunchPlan, targets: list[int], *, prepare: bool = True) -> dict[str, Any]:
    """The order the guardian's child carries out for ``plan`` before ``exec``.

    Args:
        plan: what to run.
        targets: the descriptor numbers the sent descriptors get in the child, in
            the order they are sent (stdin, stdout, stderr, then ``plan.pass_fds``).
        prepare: apply the plan's preparation (death with the guardian, subreaper,
            cgroups, rlimits, tmpfs); False starts ``plan.argv`` as a plain process
            in a new session (a caller that confines nothing, like an unsandboxed
            shell).
    """
    order: dict[str, Any] = {
        "argv": list(plan.argv),
        "env": dict(plan.env),
        "cwd": plan.cwd,
        "targets": targets,
    }
    if prepare:
        order["prepare"] = True
        order["cgroups"] = [d for d in [plan.cgroup, *plan.extra_cgroups] if d]
        order["rlimits"] = [tuple(r) for r in plan.rlimits]
        order["tmpfs"] = [tuple(t) for t in plan.tmpfs]
    return order
