"""Where things are: the repository, the examples and the test fixtures."""

from __future__ import annotations

from pathlib import Path

#: The repository root.
REPO = Path(__file__).resolve().parents[2]
#: ``tests/``.
TESTS = REPO / "tests"
#: The example extensions.
EXAMPLES = REPO / "examples" / "extensions"
#: The example tool packages (tool hosts).
TOOLHOST_EXAMPLES = REPO / "examples" / "toolhosts"
#: The example RPC clients.
RPC_EXAMPLES = REPO / "examples" / "rpc"
#: The misbehaving-on-demand extension most tests run.
CHAOS = EXAMPLES / "chaos" / "chaos.py"
#: The MCP server of the MCP tests, written with the SDK.
MCP_SERVER = TESTS / "agent" / "fixtures" / "mcp_server.py"
#: The agent tests' probe extension.
PROBE = TESTS / "agent" / "fixtures" / "probe_ext.py"
#: Hostile extension programs of the sandbox tests.
ATTACKS = TESTS / "security" / "attacks"
#: The stand-in host the sandbox tests run (as root or as another user).
HOST_HELPER = TESTS / "sandbox" / "host_helper.py"
#: Tool modules of the tool-host runner tests.
TOOLHOST_FIXTURES = TESTS / "supervisor" / "toolhost_fixtures"
#: Panel extensions (reference shapes in Python and Node, the SDK's, a hostile one).
PANEL_FIXTURES = TESTS / "supervisor" / "panel_fixtures"
#: Extensions written to the seed's reference implementation's shapes (no SDK).
REFSHAPES = TESTS / "supervisor" / "refshapes"
