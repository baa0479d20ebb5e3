"""A reload never opens the guards: no tool call runs with a partial intercept chain.

The guard (examples/extensions/guard) refuses ``rm -rf`` in ``bash``. A second
extension (``fixtures/slow_stop_ext.py``) holds a reload in progress for its
shutdown grace period and announces, with a notify, the moment the reload has
begun stopping the generation it replaced. A prompt whose model calls ``bash rm
-rf`` in that window must still be refused, and the file it targets must survive;
it does not wait for the reload to end.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio
from helpers.paths import EXAMPLES, REPO
from helpers.rpc_harness import open_rpc, write_script

TIMEOUT = 60
SLOW_STOP = REPO / "tests" / "agent" / "fixtures" / "slow_stop_ext.py"

pytestmark = pytest.mark.usefixtures("no_leaks")


def slow_stop_ext(tmp_path: Path) -> str:
    where = tmp_path / "exts" / "slow-stop"
    where.mkdir(parents=True)
    manifest = {
        "name": "slow-stop",
        "version": "1.0.0",
        "exec": sys.executable,
        "args": [str(SLOW_STOP), "slow-stop"],
        "restart": "never",
    }
    (where / "extension.json").write_text(json.dumps(manifest), encoding="utf-8")
    return str(where)


@pytest.mark.slow
async def test_a_tool_call_during_a_reload_still_meets_the_guard(tmp_path: Path) -> None:
    victim = tmp_path / "work" / "victim"
    victim.mkdir(parents=True)
    (victim / "keep.txt").write_text("precious\n", encoding="utf-8")
    script = write_script(
        tmp_path,
        {"tool_calls": [{"name": "bash", "args": {"command": "rm -rf victim"}, "id": "c1"}]},
        {"text": "done"},
    )
    exts = (str(EXAMPLES / "guard"), slow_stop_ext(tmp_path))
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, exts=exts) as rpc:
            await rpc.send({"id": "r", "type": "ext_reload"})
            # The reload is under way: the new generation is in, the old one was told
            # to stop, and the slow one holds the reload up for its grace period.
            await rpc.until(
                lambda f: f["type"] == "ext_notify" and f["message"] == "stopping slowly"
            )
            await rpc.send({"id": "p", "type": "prompt", "message": "clean up"})
            frames = await rpc.until_done()
            results = [f for f in frames if f["type"] == "tool_result"]
            assert len(results) == 1
            assert results[0]["is_error"], results
            assert "refused" in results[0]["content"][0]["text"]
            assert (victim / "keep.txt").read_text(encoding="utf-8") == "precious\n"
            # The turn did not wait for the old generation to stop.
            assert not [f for f in frames if f["type"] == "response" and f["id"] == "r"]
            reloaded = (await rpc.until(lambda f: f["type"] == "response" and f["id"] == "r"))[-1]
            assert reloaded["data"] == {"stopped": 2, "loaded": 2, "ready": 2, "errors": []}
