"""Name squatting: an extension named like an installed one never reaches its state.

The installed ``dup`` keeps a secret in its data directory, has a log and a
quarantine record. A squatter (``attacks/squat.py``) named like it, trusted by the
user or named with ``--ext``, runs with its own, fresh state, and the installed
one's data, log and quarantine stay as they were. The real ``corral`` command, as
root and as an unprivileged user, under bwrap.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.trust_harness import RUN, Site

SECRET = "installed one's api token"


def _installed(site: Site) -> Path:
    source = site.extension(site.base / "downloads", "dup")
    assert site.corral("ext", "install", str(source)).returncode == 0
    installed = site.corral_home / "extensions" / "dup"
    data = site.data(installed)
    data.mkdir(parents=True)
    (data / "api-token").write_text(SECRET)
    site.log(installed).parent.mkdir(parents=True, exist_ok=True)
    site.log(installed).write_text("[corral] the installed one's own log\n")
    site.quarantine(installed).parent.mkdir(parents=True, exist_ok=True)
    site.quarantine(installed).write_text("crashed 5 times (the installed one)\n")
    site.give()
    return installed


def _state(site: Site, installed: Path) -> tuple[list[str], str, str]:
    data = sorted(p.name for p in site.data(installed).iterdir())
    return data, site.log(installed).read_text(), site.quarantine(installed).read_text()


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["same-name", "other-case", "--ext"])
def test_a_squatter_runs_with_its_own_fresh_state(site: Site, variant: str) -> None:
    installed = _installed(site)
    before = _state(site, installed)
    victims = [str(site.data(installed) / "api-token"), str(site.log(installed))]
    args = list(RUN)
    if variant == "--ext":
        squatter = site.extension(site.base / "elsewhere", "dup", *victims)
        args += ["--ext", str(squatter)]
    else:
        name = "dup" if variant == "same-name" else "Dup"
        squatter = site.extension(site.local, name, *victims)
        trusted = site.corral("ext", "trust", "-y", str(squatter))
        assert trusted.returncode == 0, trusted.stderr
        if variant == "same-name":
            assert "shadows" in trusted.stdout  # the user is told, at trust time
    ran = site.corral(*args, "hi")
    assert ran.returncode == 0, ran.stderr

    report = site.report(squatter)
    assert report is not None, ran.stderr  # it ran: the installed one's quarantine is not its
    assert report["listing"] == []  # fresh: nothing of the installed one's data
    assert report["data_dir"].lower() != str(site.data(installed)).lower()
    assert all(v.startswith("denied") for v in report["read"].values()), report
    assert SECRET not in json.dumps(report)
    assert "squat:" in site.log(squatter).read_text()
    assert site.log(squatter) != site.log(installed)
    assert not site.quarantine(squatter).exists()
    # The installed one: untouched, and not started: shadowed by a squatter of the
    # same name, or (another name) held by its own quarantine.
    assert _state(site, installed) == before
    assert site.report(installed) is None
    assert ("shadowed by" in ran.stderr) == (variant != "other-case")


@pytest.mark.slow
def test_managing_the_squatter_leaves_the_installed_one_alone(site: Site) -> None:
    installed = _installed(site)
    before = _state(site, installed)
    squatter = site.extension(site.local, "dup")
    assert site.corral("ext", "trust", "-y", "dup").returncode == 0  # by name: the winner
    assert site.corral(*RUN, "hi").returncode == 0
    # In the project, "dup" is the squatter: its quarantine is lifted, its log shown.
    site.quarantine(squatter).write_text("crashed (the squatter)\n")
    site.give()
    enabled = site.corral("ext", "enable", "dup")
    assert "quarantine lifted" in enabled.stdout, enabled.stderr
    assert not site.quarantine(squatter).exists()
    logs = site.corral("ext", "logs", "dup")
    assert "squat:" in logs.stdout
    assert "the installed one's own log" not in logs.stdout
    assert site.corral("ext", "untrust", "dup").returncode == 0
    assert _state(site, installed) == before
    # Elsewhere, "dup" is the installed one, still pinned (enable keeps a pin).
    listed = site.corral("ext", "list", "--json", cwd=site.home)
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (row["source"], row["trust"], row["state"]) == ("global", "trusted", "quarantined")
    state = [site.data(installed), site.log(installed), site.quarantine(installed)]
    removed = site.corral("ext", "remove", "-y", "--purge", "dup", cwd=site.home)
    assert removed.returncode == 0, removed.stderr
    assert [p for p in state if p.exists()] == []
    assert site.data(squatter).exists()  # the squatter's state is its own
