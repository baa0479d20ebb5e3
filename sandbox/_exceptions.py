"""The sandbox package's exceptions.

::

    SandboxError                  anything the sandbox package refuses or cannot do
    ├── SandboxUnavailable        ``--sandbox required`` and no backend works here
    ├── PermissionsError          a manifest's ``permissions`` object is invalid
    └── PlanError                 this request cannot be sandboxed as given
        └── GrantChanged          a path is no longer what was validated (quarantine it)

Each carries the data a caller needs to say what went wrong and what to do
about it, not just a message.
"""

from __future__ import annotations

__all__ = ["GrantChanged", "PermissionsError", "PlanError", "SandboxError", "SandboxUnavailable"]


class SandboxError(Exception):
    """Base class of every error raised by :mod:`sandbox`."""


class SandboxUnavailable(SandboxError):
    """No sandbox backend works on this machine, and the caller required one.

    Attributes:
        backend: the backend that was expected to work (``"bwrap"`` on Linux).
        cause: what is wrong, e.g. ``"unprivileged user namespaces are disabled"``.
        fix: what the user can do about it.
    """

    def __init__(self, backend: str, cause: str, fix: str) -> None:
        self.backend = backend
        self.cause = cause
        self.fix = fix
        super().__init__(f"cannot sandbox with {backend}: {cause}. Fix: {fix}")


class PermissionsError(SandboxError):
    """A field of the ``permissions`` object is invalid.

    Attributes:
        field: dotted path of the culprit, e.g. ``"permissions.read_only[1]"``.
        message: what is wrong with it.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class PlanError(SandboxError):
    """A launch request cannot be turned into a sandboxed plan.

    For example ``argv[0]`` is a version-manager shim (a script that needs the
    whole version manager) rather than the real interpreter.

    Attributes:
        name: the extension's name.
        reason: what is wrong and how to fix it.
    """

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"extension {name!r}: {reason}")


class GrantChanged(PlanError):
    """A path to bind is no longer the file that was validated (or first bound).

    Someone replaced it, or a directory on the way, since: the extension itself
    (through a writable grant, between a crash and its restart) or another
    program. The supervisor quarantines the extension rather than bind it.

    Attributes:
        name: the extension's name.
        path: the path as the sandbox would see it.
        found: what is there now, e.g. ``"a symlink at /a/b"``.
    """

    def __init__(self, name: str, path: str, found: str) -> None:
        self.path = path
        self.found = found
        super().__init__(
            name,
            f"{path} changed since it was validated ({found}); not binding it. Check it, "
            "then reload the extensions to validate their permissions again",
        )
