"""``corral ext install <git URL>``: no prompt, a timeout, git's whole error, the source.

The servers are local: an HTTP server that wants credentials, and a TCP listener that
never answers.
"""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent._cli.main import main


@pytest.fixture(autouse=True)
def _git() -> None:
    if shutil.which("git") is None:
        pytest.fail("git is needed for these tests")


def install(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["ext", "install", *args], catch_exceptions=False)
    return result.exit_code, result.output


class _WantsPassword(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="corral-test"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def password_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _WantsPassword)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/repo.git"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_a_url_that_wants_a_password_fails_instead_of_prompting(
    home: Path, password_server: str
) -> None:
    code, out = install(password_server)
    assert code == 1
    assert f"cannot clone {password_server}" in out
    assert "terminal prompts disabled" in out


def test_a_clone_that_hangs_times_out(home: Path) -> None:
    with socket.socket() as listener:  # accepts (in the backlog), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/slow.git"
        code, out = install("--timeout", "1", url)
    assert code == 1
    assert f"cannot clone {url}: git did not finish within 1 s" in out


def test_gits_whole_error_and_the_users_source(home: Path, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/nope.git"
    code, out = install(url)
    assert code == 1
    assert f"cannot clone {url} (git exit 128):" in out
    assert "does not appear to be a git repository" in out
    assert "Could not read from remote repository" in out  # a later line than the first
    assert ".install-" not in out


def test_a_bad_manifest_in_a_clone_names_the_url(home: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "extension.json").write_text(json.dumps({"name": "x", "exec": 42}))
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-qm", "x"], check=True)
    code, out = install(f"file://{repo}")
    assert code == 1
    assert out.startswith(f"Error: not installed: file://{repo}")
    assert ".install-" not in out
