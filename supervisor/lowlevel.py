"""The supervisor's toolbox: what corral's own agent builds on, beside the kernel.

:mod:`supervisor` is what an embedder needs: :func:`~supervisor.open_supervisor`,
its client, its configuration, events, outcomes, manifests, trust and errors. This
module holds the plumbing the agent (and any other builder of tools) reuses from
the supervisor instead of writing it again, as ``trio.lowlevel`` does for trio:

* **lines**: :class:`LineReader` and :class:`LineWriter`, the NDJSON reader and
  writer every pipe of corral speaks (the RPC server's stdin and stdout too);
* **children**: :func:`open_child`, the one way corral runs a child for as long
  as one block (plan, spawn, serve its egress proxy, :class:`StopLadder`, reap,
  release), its :class:`Child`, :func:`describe_exit` (how any child ended, in
  words) and :func:`signal_group`;
* **egress**: :class:`Egress`, the proxy that serves a child's network list;
* **digests**: :func:`digest_tree` and :func:`file_sha256`, what a trust pin hashes;
* **relays**: :class:`Relay` and :func:`mcp_server_spec`, a stdio MCP server
  supervised like an extension and relayed to its client;
* **places**: :data:`SDK_DIR` (corral's SDK and tool-host runners),
  :func:`choice_file` and :func:`ui_file` (per-identity state files);
* **terminal-safe text**: :func:`visible`, :func:`visible_lines` and
  :class:`StreamSanitizer`, foreign text made safe to show on a terminal;
* **state files**: :class:`StateFile`, a locked, atomically replaced file of
  corral's own (trust stores, catalogs, sessions), refusing a link at its path;
* **small files**: :func:`read_small_file`, a file someone else may control (a
  manifest, a project's configuration) read without blocking on a FIFO or reading
  past :data:`SMALL_FILE_MAX`; anything but a regular file is :class:`FileRefused`.

Everything here is public and typed like the main facade; it changes when the
agent's needs change, so an embedder should prefer :mod:`supervisor`.
"""

from __future__ import annotations

from ._child import Child, StopLadder, open_child
from ._config import choice_file, ui_file
from ._digest import DigestLimits, TreeDigest, digest_tree, file_sha256
from ._egress import Egress
from ._lines import LineReader, LineWriter, Oversize
from ._manifest import mcp_server_spec
from ._reap import signal_group
from ._relay import Relay, RelayedProcess
from ._restart import describe_exit
from ._safe_text import StreamSanitizer, visible, visible_lines
from ._smallfile import SMALL_FILE_MAX, FileRefused, read_small_file
from ._spawn import SDK_DIR
from ._statefile import StateFile, StateFileRefused

__all__ = [
    "SDK_DIR",
    "SMALL_FILE_MAX",
    "Child",
    "DigestLimits",
    "Egress",
    "FileRefused",
    "LineReader",
    "LineWriter",
    "Oversize",
    "Relay",
    "RelayedProcess",
    "StateFile",
    "StateFileRefused",
    "StopLadder",
    "StreamSanitizer",
    "TreeDigest",
    "choice_file",
    "describe_exit",
    "digest_tree",
    "file_sha256",
    "mcp_server_spec",
    "open_child",
    "read_small_file",
    "signal_group",
    "ui_file",
    "visible",
    "visible_lines",
]
