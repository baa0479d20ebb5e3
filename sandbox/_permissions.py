"""What an extension may do, as declared in the ``permissions`` object of its manifest.

Defaults are tight: no network, no extra paths, no environment, a private data
directory, and small limits. Path validation lives in :mod:`sandbox._validate`,
network destinations in :mod:`sandbox._network`.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = ["Limits", "Permissions"]

#: A built-in tool's name, or ``"*"`` for every built-in (present and future).
_BuiltinName = Annotated[str, msgspec.Meta(pattern=r"^(\*|[A-Za-z_][A-Za-z0-9_.-]{0,63})$")]


class Limits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Resource limits applied to the extension and everything it starts."""

    #: Memory in MiB for the whole extension (cgroup where available, else per-process).
    memory_mb: int = 1024
    #: Processes and threads the extension may run at once.
    processes: int = 64
    #: Open file descriptors per process.
    open_files: int = 256
    #: Size in MiB of the private, writable ``/tmp`` (and, separately, ``/dev/shm``).
    tmp_mb: int = 64
    #: Largest file, in MiB, the extension may write anywhere (``RLIMIT_FSIZE``).
    file_mb: int = 1024


class Permissions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An extension's declared permissions (``extension.json`` → ``permissions``)."""

    #: ``False``: no network. ``True``: the host's whole network (TCP/UDP anywhere, unix
    #: sockets), risky. A list of destinations (``"api.github.com"``,
    #: ``"*.githubusercontent.com"``, ``"api.openai.com:443"``, ``"203.0.113.7:8443"``):
    #: TCP to those only, through corral's egress proxy (see :mod:`sandbox._network`).
    network: bool | list[str] = False
    #: Extra paths readable by the extension (absolute, or relative to the extension).
    read_only: list[str] = []
    #: Extra paths readable and writable by the extension.
    read_write: list[str] = []
    #: Names of host environment variables passed through to the extension.
    env: list[str] = []
    #: Risky entries of ``read_only``, ``read_write``, ``env`` and ``network`` the author
    #: asks for anyway, each repeated here exactly as written there (see docs/sandbox.md):
    #: credential stores, writable system trees or dotfiles, the extension's own
    #: directory as writable, loader and interpreter variables, local addresses
    #: (loopback, private, link-local, CGNAT, metadata). Once validated it
    #: holds the resolved paths and names that needed it, for the user to review.
    unsafe: list[str] = []
    #: Give the extension a private writable directory, ``$CORRAL_DATA_DIR``.
    data_dir: bool = True
    #: Built-in agent tools (``read``, ``write``, ``edit``, ``bash``; ``"*"`` for all,
    #: including later ones) whose calls the extension may block or rewrite through
    #: ``tool_call`` interception. Without it such a block or rewrite is ignored and
    #: audited; the extension still observes the call.
    intercept_builtin: list[_BuiltinName] = []
    limits: Limits = Limits()

    @property
    def destinations(self) -> list[str]:
        """The destinations of a ``network`` list ([] for ``True`` and ``False``)."""
        return [] if isinstance(self.network, bool) else list(self.network)
