"""Directory digests, the trust store and identities, on real files (no processes)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

import supervisor._digest as digest_mod
from sandbox import Limits, Permissions
from supervisor import (
    DirectoryUnhashable,
    ExtensionSpec,
    TrustError,
    TrustState,
    TrustStore,
    TrustStoreError,
    data_dir,
    describe_permissions,
    identity_of,
    load_manifest,
    log_file,
    quarantine_file,
)
from supervisor.lowlevel import DigestLimits, digest_tree, file_sha256


def make_ext(root: Path, name: str = "demo", **manifest: object) -> Path:
    d = root / name
    (d / "lib").mkdir(parents=True)
    (d / "main.py").write_text("print('hi')\n")
    (d / "lib" / "util.py").write_text("X = 1\n")
    data = {"name": name, "exec": "./main.py", **manifest}
    (d / "extension.json").write_text(json.dumps(data))
    return d


def spec_of(d: Path, home: Path, source: str = "project") -> ExtensionSpec:
    return load_manifest(d, source, home=str(home))  # type: ignore[arg-type]


# --- digests ---------------------------------------------------------------------------


def test_digest_is_deterministic_and_independent_of_location(tmp_path: Path) -> None:
    a = make_ext(tmp_path / "a")
    b = tmp_path / "b" / "demo"
    b.mkdir(parents=True)
    # Same content, created in another order, somewhere else.
    (b / "extension.json").write_bytes((a / "extension.json").read_bytes())
    (b / "lib").mkdir()
    (b / "lib" / "util.py").write_text("X = 1\n")
    (b / "main.py").write_text("print('hi')\n")
    first, second = digest_tree(str(a)), digest_tree(str(b))
    assert first.digest == second.digest == digest_tree(str(a)).digest
    assert (first.files, first.bytes) == (3, second.bytes)
    paths = [e.path for e in first.entries]
    assert paths == ["", "extension.json", "lib", "lib/util.py", "main.py"]


def _content(d: Path) -> None:
    (d / "main.py").write_text("print('hj')\n")  # same size


def _mode(d: Path) -> None:
    (d / "main.py").chmod(0o755)


def _added(d: Path) -> None:
    (d / "lib" / "new.py").write_text("")


def _added_dir(d: Path) -> None:
    (d / "empty").mkdir()


def _removed(d: Path) -> None:
    (d / "lib" / "util.py").unlink()


def _renamed(d: Path) -> None:
    (d / "lib" / "util.py").rename(d / "lib" / "util2.py")


def _symlink_swap(d: Path) -> None:
    # A file replaced by a link to a file with the very same content.
    twin = d.parent / "twin.py"
    twin.write_text("X = 1\n")
    (d / "lib" / "util.py").unlink()
    (d / "lib" / "util.py").symlink_to(twin)


def _dir_to_link(d: Path) -> None:
    outside = d.parent / "lib-elsewhere"
    (d / "lib").rename(outside)
    (d / "lib").symlink_to(outside)


@pytest.mark.parametrize(
    "change",
    [_content, _mode, _added, _added_dir, _removed, _renamed, _symlink_swap, _dir_to_link],
)
def test_any_change_changes_the_digest(tmp_path: Path, change: Callable[[Path], None]) -> None:
    d = make_ext(tmp_path)
    before = digest_tree(str(d)).digest
    change(d)
    assert digest_tree(str(d)).digest != before


def test_links_out_are_followed_links_in_are_not(tmp_path: Path) -> None:
    d = make_ext(tmp_path)
    helper = tmp_path / "helper.py"
    helper.write_text("one")
    (d / "inner").symlink_to("lib/util.py")
    (d / "out").symlink_to(helper)
    (d / "up").symlink_to("../helper.py")
    tree = digest_tree(str(d))
    assert sorted(tree.outside_links) == [f"out -> {helper}", "up -> ../helper.py"]
    out = tree.entry("out")
    assert out is not None
    assert out.kind.value == "l"
    targets = [e for e in tree.entries if e.kind.value == "t"]
    assert [(e.path, e.payload) for e in targets] == [
        ("out", f"file:{file_sha256(b'one')}"),
        ("up", f"file:{file_sha256(b'one')}"),
    ]
    assert tree.entry("inner") is not None  # inside: its target is in the walk anyway
    helper.write_text("two, and longer")  # what a link out points to is content
    assert digest_tree(str(d)).digest != tree.digest


def test_fifos_and_sockets_are_recorded_not_opened(tmp_path: Path) -> None:
    d = make_ext(tmp_path)
    os.mkfifo(d / "pipe")  # opening it for reading would block forever
    tree = digest_tree(str(d))
    entry = tree.entry("pipe")
    assert entry is not None
    assert entry.kind.value == "o"


@pytest.mark.parametrize(
    ("limits", "words"),
    [
        (DigestLimits(max_entries=4), "more than 4 entries"),
        (DigestLimits(max_bytes=10), "more than 10 bytes of files"),
        (DigestLimits(max_depth=1), "nested deeper than 1"),
    ],
)
def test_a_directory_past_a_bound_is_refused(
    tmp_path: Path, limits: DigestLimits, words: str
) -> None:
    d = make_ext(tmp_path)
    (d / "lib" / "deeper").mkdir()
    (d / "lib" / "deeper" / "x").write_text("y" * 20)
    with pytest.raises(DirectoryUnhashable) as info:
        digest_tree(str(d), limits)
    assert words in info.value.reason
    assert info.value.path == str(d)


def test_an_unreadable_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DirectoryUnhashable, match="cannot open"):
        digest_tree(str(tmp_path / "missing"))


def test_cached_file_digests_notice_a_hidden_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Remember every file at once (no "racy" wait), then rewrite a file with the
    # same size and put its mtime back: ctime still tells.
    monkeypatch.setattr(digest_mod, "_RACY_NS", -(10**18))
    d = make_ext(tmp_path)
    main = d / "main.py"
    before = digest_tree(str(d))
    st = main.stat()
    assert (st.st_dev, st.st_ino) in digest_mod._cache
    main.write_text("print('hj')\n")
    os.utime(main, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert main.stat().st_mtime_ns == st.st_mtime_ns
    assert digest_tree(str(d)).digest != before.digest


def test_an_exec_outside_the_directory_is_pinned_by_content(tmp_path: Path) -> None:
    tool = tmp_path / "tools" / "run.py"
    tool.parent.mkdir()
    tool.write_text("print(1)\n")
    d = make_ext(tmp_path, exec="../tools/run.py")
    store = TrustStore(tmp_path / "home")
    spec = spec_of(d, tmp_path)
    before = store.digest(spec)
    assert before.entry(str(tool)) is not None
    tool.write_text("print(2)\n")
    assert store.digest(spec).digest != before.digest


# --- the store ---------------------------------------------------------------------------


def test_pin_then_verify_then_change(tmp_path: Path) -> None:
    home = tmp_path / "home"
    d = make_ext(tmp_path)
    store = TrustStore(home)
    spec = spec_of(d, home)
    first = store.verify(spec)
    assert first.state is TrustState.NEW
    assert "corral ext trust" in first.problem
    assert first.tree is not None
    store.pin(spec, first.tree)
    assert store.verify(spec).state is TrustState.TRUSTED
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.dir.stat().st_mode) == 0o700

    _added(d)
    changed = store.verify(spec)
    assert changed.state is TrustState.CHANGED
    assert "changed since it was trusted" in changed.problem
    assert store.unpin(spec.identity)
    assert not store.unpin(spec.identity)
    assert store.verify(spec).state is TrustState.NEW


def test_extensions_named_with_ext_are_trusted_for_the_run(tmp_path: Path) -> None:
    d = make_ext(tmp_path)
    verdict = TrustStore(tmp_path / "home").verify(spec_of(d, tmp_path, source="cli"))
    assert verdict.ok
    assert verdict.state is TrustState.IMPLICIT


def test_permissions_that_resolve_differently_ask_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    current = tmp_path / "current"
    current.symlink_to(tmp_path / "a")
    d = make_ext(tmp_path, permissions={"read_only": [str(current)]})
    store = TrustStore(home)
    spec = spec_of(d, home)
    store.pin(spec, store.digest(spec))
    current.unlink()
    current.symlink_to(tmp_path / "b")  # same manifest bytes, another grant
    verdict = store.verify(spec_of(d, home))
    assert verdict.state is TrustState.PERMISSIONS_CHANGED
    assert f"ro:{tmp_path / 'b'}" in verdict.problem
    assert f"ro:{tmp_path / 'a'}" in verdict.problem


def test_a_manifest_swapped_after_parsing_is_not_trusted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    d = make_ext(tmp_path)
    store = TrustStore(home)
    good = spec_of(d, home)
    store.pin(good, store.digest(good))
    manifest = d / "extension.json"
    original = manifest.read_bytes()
    manifest.write_text(json.dumps({"name": "demo", "exec": "./main.py", "args": ["--evil"]}))
    evil = spec_of(d, home)
    manifest.write_bytes(original)  # the pinned bytes are back when the digest is taken
    verdict = store.verify(evil)
    assert verdict.state is TrustState.CHANGED
    assert "while it was being checked" in verdict.problem
    tree = store.digest(good)
    with pytest.raises(TrustError, match="changed while"):
        store.pin(evil, tree)


def test_a_too_large_directory_cannot_be_trusted(tmp_path: Path) -> None:
    d = make_ext(tmp_path)
    store = TrustStore(tmp_path / "home", DigestLimits(max_entries=2))
    verdict = store.verify(spec_of(d, tmp_path))
    assert verdict.state is TrustState.UNHASHABLE
    assert not verdict.ok
    assert "more than 2 entries" in verdict.problem
    assert "corral ext trust" not in verdict.problem


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        (lambda p: p.write_text("{not json"), "corrupt"),
        (lambda p: p.write_text('{"version": 1, "pins": {"x": {"name": 3}}}'), "corrupt"),
        (lambda p: (p.write_text("{}"), p.chmod(0o666)), "others may write it"),
        (lambda p: p.mkdir(), "not a regular file"),
    ],
)
def test_an_unusable_store_is_refused_with_its_path(
    tmp_path: Path, setup: Callable[[Path], object], words: str
) -> None:
    store = TrustStore(tmp_path / "home")
    store.dir.mkdir(parents=True)
    setup(store.path)
    with pytest.raises(TrustStoreError) as info:
        store.pins()
    assert words in str(info.value)
    assert str(store.path) in str(info.value)
    # The supervisor's question never raises: it answers "no" with the reason.
    problem = store.problem(spec_of(make_ext(tmp_path), tmp_path))
    assert problem is not None
    assert words in problem


# --- identity and state ------------------------------------------------------------------


def test_identity_is_name_and_real_directory(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "x", tmp_path / "b" / "x"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    (tmp_path / "link").symlink_to(a)
    assert identity_of("x", str(a)) != identity_of("x", str(b))
    assert identity_of("x", str(a)) != identity_of("X", str(a))
    assert identity_of("x", str(a)) == identity_of("x", str(tmp_path / "link"))
    ident = identity_of("x", str(a))
    assert ident.startswith("x-")
    assert data_dir("/h", ident) == Path("/h/data") / ident
    assert log_file("/h", ident) == Path(f"/h/logs/ext-{ident}.log")
    assert quarantine_file("/h", ident) == Path(f"/h/state/quarantine/{ident}.txt")


def test_legacy_state_moves_only_to_an_installed_extension(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "data" / "demo").mkdir(parents=True)
    (home / "data" / "demo" / "token").write_text("t")
    (home / "logs").mkdir()
    (home / "logs" / "ext-demo.log").write_text("old log\n")
    store = TrustStore(home)
    local = spec_of(make_ext(tmp_path / "proj" / ".corral" / "extensions"), home, "project")
    store.pin(local, store.digest(local))  # a project-local one takes nothing
    assert (home / "data" / "demo" / "token").exists()
    assert not data_dir(home, local.identity).exists()
    installed = spec_of(make_ext(home / "extensions"), home, "global")
    store.pin(installed, store.digest(installed))
    assert (data_dir(home, installed.identity) / "token").read_text() == "t"
    assert log_file(home, installed.identity).read_text() == "old log\n"
    assert not (home / "data" / "demo").exists()


def test_permissions_read_as_one_line() -> None:
    perms = Permissions(
        network=True,
        read_only=["/data"],
        read_write=[str(Path.home() / "proj")],
        env=["API_KEY"],
        data_dir=False,
        limits=Limits(memory_mb=512),
    )
    assert describe_permissions(perms) == (
        "net:ANYWHERE (risky), ro:/data, rw:~/proj, env:API_KEY, no data dir, mem 512M"
    )
    assert describe_permissions(Permissions()) == "defaults"
    listed = Permissions(network=["api.github.com", "127.0.0.1:8080"], unsafe=["127.0.0.1:8080"])
    assert describe_permissions(listed) == (
        "net:api.github.com, net:127.0.0.1:8080, unsafe:127.0.0.1:8080"
    )
    # A field corral adds later shows up by its shape.
    assert describe_permissions({"intercept_builtins": ["bash"], "strict": True, "level": 2}) == (
        "intercept_builtins:bash, strict, level=2"
    )
