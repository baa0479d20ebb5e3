"""``corral batch --ray`` on a real two-node Ray cluster, in a private network namespace.

The cluster (a head and a worker node, one CPU each) runs inside network and pid
namespaces of its own (``helpers/raykit.py``): loopback only.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from helpers.agentkit import chaos
from helpers.batchkit import echo_script, read_results, write_tasks
from helpers.raykit import run_cluster

pytest.importorskip("ray", reason="the Ray backend's tests need the 'ray' extra")


def node_of(result: dict[str, object]) -> str:
    return str(result["node"]).rsplit(":", 1)[0]


@pytest.mark.slow  # starts two Ray nodes (about 15 s), then a batch of one-second sessions
def test_a_batch_spreads_over_both_nodes_and_survives_losing_the_worker(tmp_path: Path) -> None:
    ext = chaos(tmp_path / "exts")
    ids = [f"t{i}" for i in range(16)]
    write_tasks(
        tmp_path / "tasks.jsonl",
        [
            {
                "id": i,
                "prompt": "go",
                "extensions": [ext],
                "script": echo_script(i, delay=1.0),
                "workspace": {"task.txt": i},
            }
            for i in ids
        ],
    )
    out = tmp_path / "results.jsonl"
    report = run_cluster(
        tmp_path,
        tmp_path / "tasks.jsonl",
        out,
        kill_after=2,
        batch_args=["--jobs", "4", "--transcripts", str(tmp_path / "tr")],
    )
    assert report["exit"] == 0, report["stderr"]
    assert report["killed_at"] is not None, "the worker node was never killed"
    results = read_results(out)
    assert Counter(r["id"] for r in results) == Counter(ids)  # each id once
    assert {r["status"] for r in results} == {"done"}, [r["error"] for r in results]
    assert all(r["answer"] == f"answer {r['id']}" for r in results)
    # Both nodes ran sessions; the worker's pids are those the harness killed.
    nodes = Counter(node_of(r) for r in results)
    assert len(nodes) == 2, nodes
    worker = {
        node_of(r)
        for r in results
        if int(str(r["node"]).rsplit(":", 1)[1]) in report["worker_pids"]
    }
    assert len(worker) == 1
    # Sessions in flight on the lost node ran again, on the head.
    retried = [r for r in results if r["attempts"] > 1]
    assert retried
    assert all(node_of(r) not in worker for r in retried)
    # Each result's transcript was written by the driver, complete.
    for r in results:
        lines = Path(r["transcript"]).read_text().splitlines()
        assert json.loads(lines[0])["name"] == r["id"]
    assert report["left"] == [], "processes outlived the cluster"
