"""The supervisor's toolbox: what corral's own agent builds on, beside the kernel.

:mod:`supervisor` is what an embedder needs: :func:`~supervisor.open_supervisor`,
its client, its configuration, events, outcomes, manifests, trust and errors. This
module holds the plumbing the agent (and any other builder of tools) reuses from
the supervisor instead of writing it again, as ``trio.lowlevel`` does for trio:

* **lines**: :class:`LineReader` and :class:`LineWriter`, the NDJSON reader and
  writer every pipe of corral speaks (the RPC server's stdin and stdout too);
* **children**: :class:`ChildProcess`, :func:`open_child` and :func:`signal_group`,
  the one way corral starts a planned process and signals its group;
* **egress**: :class:`Egress`, the proxy that serves a child's network list;
* **digests**: :func:`digest_tree` and :func:`file_sha256`, what a trust pin hashes;
* **relays**: :class:`Relay` and :func:`mcp_server_spec`, a stdio MCP server
  supervised like an extension and relayed to its client;
* **places**: :data:`SDK_DIR` (corral's SDK and tool-host runners),
  :func:`choice_file` and :func:`ui_file` (per-identity state files).

Everything here is public and typed like the main facade; it changes when the
agent's needs change, so an embedder should prefer :mod:`supervisor`.
"""

from __future__ import annotations

from ._config import choice_file, ui_file
from ._digest import DigestLimits, TreeDigest, digest_tree, file_sha256
from ._egress import Egress
from ._lines import LineReader, LineWriter, Oversize
from ._manifest import mcp_server_spec
from ._process import ChildProcess, open_child
from ._reap import signal_group
from ._relay import Relay, RelayedProcess
from ._spawn import SDK_DIR

__all__ = [
    "SDK_DIR",
    "ChildProcess",
    "DigestLimits",
    "Egress",
    "LineReader",
    "LineWriter",
    "Oversize",
    "Relay",
    "RelayedProcess",
    "TreeDigest",
    "choice_file",
    "digest_tree",
    "file_sha256",
    "mcp_server_spec",
    "open_child",
    "signal_group",
    "ui_file",
]
