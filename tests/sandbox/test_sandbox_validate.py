"""``validate_permissions``: paths resolved, forbidden paths refused with the field named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox import (
    Limits,
    PathKind,
    Permissions,
    PermissionsError,
    check_permissions,
    validate_permissions,
)


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    home = tmp_path / "home" / "alice"
    corral = home / ".local" / "state" / "corral"
    ext = corral / "extensions" / "demo"
    for d in (home / "notes", home / "project", ext / "assets", corral / "data" / "demo"):
        d.mkdir(parents=True)
    (home / "link-to-notes").symlink_to(home / "notes")
    return {"home": home, "corral": corral, "ext": ext, "tmp": tmp_path}


def _check(layout: dict[str, Path], **fields: object) -> Permissions:
    return validate_permissions(
        Permissions(**fields),  # type: ignore[arg-type]
        str(layout["ext"]),
        home=str(layout["home"]),
        corral_home=str(layout["corral"]),
    )


def test_defaults_are_tight() -> None:
    perms = Permissions()
    assert perms.network is False
    assert perms.read_only == []
    assert perms.read_write == []
    assert perms.env == []
    assert perms.data_dir is True
    assert perms.limits == Limits(memory_mb=1024, processes=64, open_files=256, tmp_mb=64)


def test_paths_become_absolute_and_real(layout: dict[str, Path]) -> None:
    perms = _check(
        layout,
        read_only=["assets", "~/project/../project"],
        read_write=[str(layout["home"] / "link-to-notes")],
    )
    assert perms.read_only == [str(layout["ext"] / "assets"), str(layout["home"] / "project")]
    # Symlinks are resolved once, here: the path bound is the one the user reviewed.
    assert perms.read_write == [str(layout["home"] / "notes")]


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/", "whole disk"),
        ("/proc", "inside /proc"),
        ("/proc/self/environ", "inside /proc"),
        ("/sys/kernel", "inside /sys"),
        ("/dev/null", "inside /dev"),
        ("~", "home directory itself"),
        ("~/.local/state/corral", "corral's home"),
        ("~/.local/state/corral/data/demo", "corral's home"),
        ("~/.local", "corral's home"),
        ("../../../../../..", "contains your home"),
        ("does-not-exist", "does not exist"),
        ("", "must not be empty"),
        ("~bob/x", "only ~"),
    ],
)
def test_forbidden_paths_are_refused(layout: dict[str, Path], path: str, why: str) -> None:
    with pytest.raises(PermissionsError) as info:
        _check(layout, read_only=["assets", path])
    assert info.value.field == "permissions.read_only[1]"
    assert why in info.value.message


def test_read_write_is_checked_too(layout: dict[str, Path]) -> None:
    with pytest.raises(PermissionsError) as info:
        _check(layout, read_write=["/"])
    assert info.value.field == "permissions.read_write[0]"
    assert str(info.value).startswith("permissions.read_write[0]: ")


def test_same_path_cannot_be_both(layout: dict[str, Path]) -> None:
    with pytest.raises(PermissionsError, match="also listed in read_only"):
        _check(layout, read_only=["assets"], read_write=["./assets"])


@pytest.mark.parametrize(("name", "why"), [("1BAD", "not a valid"), ("A-B", "not a valid"),
                                          ("CORRAL_EXT_NAME", "set by corral")])  # fmt: skip
def test_env_names_are_checked(layout: dict[str, Path], name: str, why: str) -> None:
    with pytest.raises(PermissionsError) as info:
        _check(layout, env=["GITHUB_TOKEN", name])
    assert info.value.field == "permissions.env[1]"
    assert why in info.value.message


@pytest.mark.parametrize("field", ["memory_mb", "processes", "open_files", "tmp_mb", "file_mb"])
def test_limits_are_bounded(layout: dict[str, Path], field: str) -> None:
    with pytest.raises(PermissionsError) as info:
        _check(layout, limits=Limits(**{field: 0}))
    assert info.value.field == f"permissions.limits.{field}"


def test_unknown_corral_home_is_not_an_error(layout: dict[str, Path]) -> None:
    perms = validate_permissions(
        Permissions(read_only=["~/project"]), str(layout["ext"]), home=str(layout["home"]),
        corral_home="",
    )  # fmt: skip
    assert perms.read_only == [str(layout["home"] / "project")]
    assert os.path.isabs(perms.read_only[0])


def test_validation_pins_what_it_checked(layout: dict[str, Path]) -> None:
    checked = check_permissions(
        Permissions(read_only=["assets", "~/link-to-notes"]),
        str(layout["ext"]),
        home=str(layout["home"]),
        corral_home=str(layout["corral"]),
    )
    ext, assets, notes = checked.pins
    assert ext.path == str(layout["ext"])
    for pin, path in ((ext, layout["ext"]), (assets, layout["ext"] / "assets"),
                      (notes, layout["home"] / "notes")):  # fmt: skip
        st = os.stat(path)
        assert (pin.real, pin.dev, pin.ino, pin.kind) == (str(path), st.st_dev, st.st_ino,
                                                          PathKind.DIR)  # fmt: skip
    assert notes.declared == "~/link-to-notes"


@pytest.mark.parametrize("grants", [{}, {"read_write": ["~/notes"]}])
def test_the_extension_directory_is_pinned_by_its_real_path(
    layout: dict[str, Path], grants: dict[str, list[str]]
) -> None:
    # Without a writable grant its ancestors are not needed and one openat2 pins it;
    # with one, the walk records them: the same pin either way.
    (layout["tmp"] / "link").symlink_to(layout["ext"].parent)
    named = layout["tmp"] / "link" / "demo"
    checked = check_permissions(
        Permissions(**grants),  # type: ignore[arg-type]
        str(named),
        home=str(layout["home"]),
        corral_home=str(layout["corral"]),
    )
    st = os.stat(layout["ext"])
    pin = checked.pins[0]
    assert (pin.path, pin.real) == (str(named), os.path.realpath(named))
    assert (pin.dev, pin.ino, pin.kind) == (st.st_dev, st.st_ino, PathKind.DIR)


@pytest.mark.parametrize("grants", [{}, {"read_write": ["~/notes"]}])
def test_a_missing_extension_directory_is_refused(
    layout: dict[str, Path], grants: dict[str, list[str]]
) -> None:
    with pytest.raises(PermissionsError) as info:
        check_permissions(
            Permissions(**grants),  # type: ignore[arg-type]
            str(layout["tmp"] / "gone"),
            home=str(layout["home"]),
            corral_home=str(layout["corral"]),
        )
    assert info.value.message.startswith(f"the extension's directory {layout['tmp'] / 'gone'}")


def test_a_writable_parent_of_the_extension_directory_still_counts(tmp_path: Path) -> None:
    # With a writable grant the walk records the extension directory's ancestors: a
    # writable parent makes the directory writable, and a link planted in it is refused.
    ext = tmp_path / "work" / "demo"
    ext.mkdir(parents=True)
    (tmp_path / "notes").mkdir()
    (ext / "notes").symlink_to(tmp_path / "notes")
    parent = str(tmp_path / "work")
    with pytest.raises(PermissionsError) as info:
        validate_permissions(
            Permissions(read_write=[parent], unsafe=[parent], read_only=["notes"]),
            str(ext),
            home=str(tmp_path / "home"),
            corral_home="",
        )
    assert info.value.field == "permissions.read_only[0]"
    assert "which the extension can write" in info.value.message


@pytest.mark.parametrize(
    ("fields", "culprit"),
    [
        ({"read_write": ["~/notes"], "read_only": ["~/notes/inner"]}, "read_only[0]"),
        ({"read_write": ["~/notes", "~/notes/inner"]}, "read_write[1]"),
        # Its own directory made writable (acknowledged): nothing may sit inside it.
        ({"read_write": ["."], "unsafe": ["."], "read_only": ["assets"]}, "read_only[0]"),
    ],
)
def test_grants_inside_a_writable_directory_are_refused(
    layout: dict[str, Path], fields: dict[str, list[str]], culprit: str
) -> None:
    (layout["home"] / "notes" / "inner").mkdir()
    with pytest.raises(PermissionsError) as info:
        _check(layout, **fields)
    assert info.value.field == f"permissions.{culprit}"
    assert "which the extension can write" in info.value.message
