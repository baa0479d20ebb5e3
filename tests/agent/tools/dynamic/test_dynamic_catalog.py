"""The dynamic tools' draft checks, rendering, seal and catalog (both stores, one contract)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from agent._tools.dynamic import (
    Catalog,
    CatalogEntry,
    CatalogError,
    DraftRejected,
    EntryRefused,
    JsonCatalog,
    Sealer,
    SqliteCatalog,
    ToolDraft,
    check_compiles,
    check_draft,
    render,
    verify_entry,
)

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


def draft(**kw: object) -> ToolDraft:
    base: dict[str, object] = {
        "name": "add_one",
        "description": "Add one.",
        "parameters": SCHEMA,
        "code": "return args['a'] + 1",
    }
    base.update(kw)
    return msgspec.convert(base, ToolDraft)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "1bad"}, "name"),
        ({"name": "has space"}, "name"),
        ({"name": "x" * 65}, "name"),
        ({"description": "  "}, "description"),
        ({"description": "x" * 2001}, "description"),
        ({"description": "evil\x1b[2J"}, "description"),
        ({"parameters": {"type": "array"}}, "parameters"),
        ({"parameters": {"type": "object", "description": "x" * 20000}}, "parameters"),
        ({"code": "   \n"}, "code"),
        ({"code": "x = 1\x00"}, "code"),
        ({"code": "x" * (64 * 1024 + 1)}, "code"),
    ],
)
def test_bad_drafts_are_refused_naming_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(DraftRejected) as caught:
        check_draft(draft(**change))
    assert caught.value.field == field
    assert f": {field}: " in str(caught.value)


def test_code_is_dedented_and_syntax_errors_name_the_body_line() -> None:
    checked = check_draft(draft(code="    x = 1\n    return x\n\n"))
    assert checked.code == "x = 1\nreturn x"
    bad = check_draft(draft(code="x = 1\nreturn (x"))
    with pytest.raises(DraftRejected, match=r"code: line 2: '\(' was never closed"):
        check_compiles(bad, render(bad))


def test_values_are_rendered_as_literals_never_as_code() -> None:
    sneaky = check_draft(
        draft(
            name="x_",
            description='"""\nimport os; os.system("touch /tmp/pwned")\n"""',
            parameters={"type": "object", "title": "'''\nboom()\n'''"},
        )
    )
    namespace: dict[str, object] = {"__name__": "not_main"}
    sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "supervisor" / "_sdk"))
    try:
        exec(compile(render(sneaky), "t", "exec"), namespace)
    finally:
        sys.path.pop(0)
    assert namespace["DESCRIPTION"] == sneaky.description
    assert namespace["PARAMETERS"] == sneaky.parameters


def entry(
    sealer: Sealer, name: str = "add_one", code: str = "return args['a'] + 1"
) -> CatalogEntry:
    return sealer.entry(check_draft(draft(name=name, code=code)), "2026-01-01T00:00:00+00:00")


@pytest.fixture(params=["sqlite", "json"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Catalog:
    if request.param == "sqlite":
        return SqliteCatalog(tmp_path / "state" / "dynamic-tools.db")
    return JsonCatalog(tmp_path / "state" / "catalog.json")


@pytest.fixture
def sealer(tmp_path: Path) -> Sealer:
    return Sealer(tmp_path / "state")


def test_the_catalog_contract(catalog: Catalog, sealer: Sealer) -> None:
    assert catalog.load() == []
    assert not catalog.remove("nothing")
    a, b = entry(sealer, "a"), entry(sealer, "b")
    catalog.put(a)
    catalog.put(b)
    a2 = entry(sealer, "a", "return 2")
    catalog.put(a2)  # replaces a, keeps its place
    assert catalog.load() == [a2, b]
    assert catalog.remove("a")
    assert catalog.load() == [b]
    catalog.put(a)
    assert catalog.clear() == 2
    assert catalog.load() == []
    assert os.stat(catalog.path).st_mode & 0o077 == 0


def test_a_corrupt_entry_is_refused_by_name_the_others_load(
    catalog: Catalog, sealer: Sealer
) -> None:
    good = entry(sealer, "good")
    catalog.put(entry(sealer, "bad"))
    catalog.put(good)
    if isinstance(catalog, SqliteCatalog):
        with sqlite3.connect(catalog.path) as conn:
            conn.execute(
                "UPDATE tools SET entry = ? WHERE name = 'bad'", (b'{"name": "bad", "code": 3}',)
            )
    else:
        data = json.loads(Path(catalog.path).read_text())
        data["tools"][0] = {"name": "bad", "code": 3}
        Path(catalog.path).write_text(json.dumps(data))
    loaded = catalog.load()
    assert loaded[1] == good
    refused = loaded[0]
    assert isinstance(refused, EntryRefused)
    assert refused.name == "bad"
    assert "corrupt entry" in refused.reason


def test_a_corrupt_file_is_a_clear_error(catalog: Catalog) -> None:
    Path(catalog.path).parent.mkdir(parents=True, exist_ok=True)
    Path(catalog.path).write_bytes(b"\x00garbage" * 100)
    with pytest.raises(CatalogError, match="move it away to start over"):
        catalog.load()


def test_an_edited_entry_is_refused_by_its_seal(catalog: Catalog, sealer: Sealer) -> None:
    catalog.put(entry(sealer))
    loaded = catalog.load()[0]
    assert isinstance(loaded, CatalogEntry)
    verify_entry(loaded, sealer)  # as stored: fine
    edited = msgspec.structs.replace(loaded, code="import os; return os.listdir('/')")
    with pytest.raises(EntryRefused, match="seal does not match: it was changed outside corral"):
        verify_entry(edited, sealer)
    # A catalog carried to another home is worthless there: another key.
    other = Sealer(Path(catalog.path).parent.parent / "elsewhere")
    with pytest.raises(EntryRefused):
        verify_entry(loaded, other)


def test_the_key_must_be_private(tmp_path: Path, sealer: Sealer) -> None:
    sealer.seal({})
    os.chmod(sealer.path, 0o644)
    with pytest.raises(CatalogError, match="mode 600"):
        Sealer(sealer.dir).seal({})


_KEY_USER = """
import sys
from agent._tools.dynamic import CatalogError, Sealer
for line in sys.stdin:  # a fresh home's state directory per round: make and use its key
    try:
        print(Sealer(line.strip()).seal({"a": 1}), flush=True)
    except CatalogError as exc:
        print(f"error: {exc}", flush=True)
"""


def test_sessions_starting_at_once_agree_on_one_key(tmp_path: Path) -> None:
    # The key is made under a lock and renamed into place whole: a second session
    # starting at the same moment never reads half a key, nor makes another one.
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _KEY_USER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        for round_ in range(30):
            state = tmp_path / f"home{round_}" / "state"
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write(f"{state}\n")
                proc.stdin.flush()
            seals = {proc.stdout.readline().strip() for proc in procs if proc.stdout}
            assert len(seals) == 1, seals
            assert seals.pop().startswith("hmac-sha256:")
            assert (state / "dynamic-tools.key").stat().st_size == 32
            assert sorted(p.name for p in state.iterdir()) == [
                "dynamic-tools.key",
                "dynamic-tools.key.lock",
            ]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()


_WRITER = """
import sys, msgspec
from agent._tools.dynamic import CatalogEntry, open_catalog
catalog = open_catalog(sys.argv[1])
big = "x" * 200_000
n = 0
print("ready", flush=True)
while True:
    n += 1
    catalog.put(CatalogEntry(name=f"t{n % 50}", description="d", parameters={"type": "object"},
                             code=f"return {n}  # {big}", created="c", seal="s"))
"""


@pytest.mark.slow
@pytest.mark.parametrize("suffix", ["db", "json"])
def test_a_crash_mid_write_leaves_a_whole_catalog(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"catalog.{suffix}"
    for _ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        # Let it write for a while, then kill it wherever it is.
        try:
            proc.wait(timeout=0.7)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        loaded = (SqliteCatalog(path) if suffix == "db" else JsonCatalog(path)).load()
        assert loaded, "nothing was written"
        assert all(isinstance(e, CatalogEntry) for e in loaded), loaded
        assert len({e.name for e in loaded if isinstance(e, CatalogEntry)}) == len(loaded)


def test_a_tools_network_is_checked_sealed_and_kept(catalog: Catalog, sealer: Sealer) -> None:
    checked = check_draft(draft(network=["API.GitHub.com", "*.example.org:8443"]))
    assert checked.network == ["api.github.com", "*.example.org:8443"]
    for bad in (["127.0.0.1:80"], ["192.168.1.1"], ["http://x.example"], ["localhost"]):
        with pytest.raises(DraftRejected) as caught:
            check_draft(draft(network=bad))
        assert caught.value.field == "network[0]"
    stored = sealer.entry(checked, "2026-01-01T00:00:00+00:00")
    catalog.put(stored)
    (loaded,) = catalog.load()
    assert isinstance(loaded, CatalogEntry)
    assert verify_entry(loaded, sealer)[0].network == checked.network
    # The seal covers it: a tool cannot gain a destination on disk.
    widened = msgspec.structs.replace(loaded, network=[*loaded.network, "evil.example"])
    with pytest.raises(EntryRefused, match="seal does not match"):
        verify_entry(widened, sealer)
    # A tool without network seals and stores as before the field existed.
    plain = sealer.entry(check_draft(draft()), "2026-01-01T00:00:00+00:00")
    assert "network" not in plain.content()
    assert b"network" not in msgspec.json.encode(plain)
