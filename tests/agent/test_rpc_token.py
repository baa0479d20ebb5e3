"""The seed's token variable: ``ZOTCORE_RPC_TOKEN`` is an alias of ``CORRAL_RPC_TOKEN``.

An embedder written for the seed sets only ``ZOTCORE_RPC_TOKEN``; it must get an
authenticated server, never an open one. Real ``corral rpc`` processes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from helpers.rpc_harness import open_rpc, rpc_env, write_script

TIMEOUT = 40


def env_with(tmp_path: Path, **tokens: str) -> dict[str, str]:
    return rpc_env(tmp_path / "home", **tokens)


async def test_seed_token_alone_still_requires_hello(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "unused"})
    env = env_with(tmp_path, ZOTCORE_RPC_TOKEN="seed-s3cret")
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, env=env) as rpc:
            await rpc.send({"id": 1, "type": "prompt", "message": "hi"}, {"id": 2, "type": "ping"})
            frames = await rpc.read_all()
            assert len(frames) == 1, frames
            assert frames[0]["success"] is False
            assert "authentication failed" in frames[0]["error"]
            assert "seed-s3cret" not in rpc.raw[0].decode()
            assert await rpc.wait() == 1


async def test_seed_token_alone_opens_with_its_hello(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        {"tool_calls": [{"name": "bash", "args": {"command": "env"}, "id": "c1"}]},
        {"text": "done"},
    )
    env = env_with(tmp_path, ZOTCORE_RPC_TOKEN="seed-s3cret")
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, env=env) as rpc:
            assert (await rpc.call("hello", token="seed-s3cret"))["success"] is True
            await rpc.send({"id": "p", "type": "prompt", "message": "show env"})
            frames = await rpc.until_done()
            result = next(f for f in frames if f["type"] == "tool_result")
            shown = result["content"][0]["text"]
            assert "PATH=" in shown  # the command ran and printed its environment
            assert "seed-s3cret" not in shown
            assert "RPC_TOKEN" not in shown


@pytest.mark.parametrize("same", [True, False], ids=["same", "different"])
async def test_both_variables(tmp_path: Path, same: bool) -> None:
    script = write_script(tmp_path, {"text": "unused"})
    env = env_with(
        tmp_path, CORRAL_RPC_TOKEN="ours", ZOTCORE_RPC_TOKEN="ours" if same else "theirs"
    )
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, env=env) as rpc:
            if same:
                assert (await rpc.call("hello", token="ours"))["success"] is True
                await rpc.close_stdin()
                await rpc.read_all()
                assert await rpc.wait() == 0
            else:
                assert await rpc.read_all() == []
                assert await rpc.wait() == 1
                assert "CORRAL_RPC_TOKEN and ZOTCORE_RPC_TOKEN are both set" in rpc.stderr
                assert "theirs" not in rpc.stderr


async def test_empty_seed_token_is_a_usage_error(tmp_path: Path) -> None:
    script = write_script(tmp_path, {"text": "unused"})
    env = env_with(tmp_path, ZOTCORE_RPC_TOKEN="")
    with trio.fail_after(TIMEOUT):
        async with open_rpc(tmp_path, script, env=env) as rpc:
            assert await rpc.read_all() == []
            assert await rpc.wait() == 1
            assert "ZOTCORE_RPC_TOKEN is set but empty" in rpc.stderr
