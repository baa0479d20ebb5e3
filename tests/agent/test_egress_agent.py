"""Network lists in an agent session: refusals in the audit log, the bash setting.

A real session (:func:`agent._host.open_agent`) with a sandboxed extension that
asks its proxy, while it starts, for a destination it was not granted: the
refusal is in ``$CORRAL_HOME/audit.jsonl`` once the session is open (the
supervisor hands every reported refusal to the session's audit log, start-up
included), and ``corral audit`` shows it. The ``bash`` tool's setting is checked
when the session opens, naming the setting at fault.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio
from click.testing import CliRunner
from helpers.agentkit import options

from agent import AgentError
from agent._audit import EgressAuditRecord, audit_path, read_audit
from agent._cli.main import main
from agent._host import open_agent
from sandbox import select_sandbox

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bwrap backend")

#: Asks for a destination outside its list before it says hello.
EXTENSION = """\
import json, sys, urllib.error, urllib.request
try:
    urllib.request.urlopen("http://evil.example:8080/", timeout=10)
except urllib.error.HTTPError as exc:
    sys.stderr.write(f"refused: {exc.code}\\n")
print(json.dumps({"type": "hello", "name": "netty"}), flush=True)
print(json.dumps({"type": "ready"}), flush=True)
for line in sys.stdin:
    if json.loads(line).get("type") == "shutdown":
        break
"""


async def test_a_refusal_at_start_up_is_in_the_audit_log(tmp_path: Path) -> None:
    if select_sandbox("auto").backend != "bwrap":
        pytest.skip("no bwrap backend here")
    ext = tmp_path / "exts" / "netty"
    ext.mkdir(parents=True)
    (ext / "ext.py").write_text(EXTENSION)
    manifest = {"name": "netty", "exec": "./ext.py", "language": "python"}
    manifest["permissions"] = {"network": ["api.example.com"]}
    (ext / "extension.json").write_text(json.dumps(manifest))
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    opts = options(home, work, ext_paths=[str(ext)], sandbox="required")
    with trio.fail_after(60):
        async with open_agent(opts) as host:
            (info,) = await host.extensions()
            assert info.stats.egress_refused == 1
    records, _ = read_audit(audit_path(home))
    (record,) = [r for r in records if isinstance(r, EgressAuditRecord)]
    assert record.extension == "netty"
    assert record.destination == "evil.example:8080"
    assert record.reason == "not in permissions.network in netty's extension.json"
    assert record.cwd == str(work)


async def test_the_bash_setting_is_checked_when_the_session_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    opts = options(tmp_path / "home", work, bash_network=["pypi.org", "http://x.example/"])
    with pytest.raises(AgentError, match=r"--bash-network / CORRAL_BASH_NETWORK\[1\]: .*not a URL"):
        async with open_agent(opts):
            pass
    monkeypatch.setenv("CORRAL_BASH_NETWORK", "pypi.org, 127.0.0.1:8080")
    opts = options(tmp_path / "home", work, bash_network=["*.pythonhosted.org"])
    async with open_agent(opts) as host:
        assert host.bash is not None
        # The user's own setting may name a local address: no unsafe ceremony.
        wanted = "only TCP to pypi.org, 127.0.0.1:8080, *.pythonhosted.org"
        assert wanted in host.bash.spec.description


def test_the_cli_refuses_a_malformed_bash_destination(tmp_path: Path) -> None:
    out = CliRunner().invoke(
        main,
        ["run", "--cwd", str(tmp_path), "--bash-network", "exa mple.com", "hi"],
        env={"CORRAL_HOME": str(tmp_path / "home")},
    )
    assert out.exit_code != 0
    assert "--bash-network / CORRAL_BASH_NETWORK[0]: 'exa mple.com' is not a host name" in (
        out.output
    )
