"""Manifest models: validation, JSON round-trip, and how a client lays them out on disk."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from sandmem.sandboxes import Dir, File, Manifest, UnixLocalSandboxClient


def test_json_round_trip_keeps_bytes_modes_and_env(tmp_path: Path) -> None:
    manifest = Manifest(
        entries={
            "bin/tool": File(content=b"\x00\xff\xfe binary", mode=0o755),
            "notes/readme.md": File(content="héllo"),
            "empty": Dir(),
        },
        root=tmp_path / "ws",
        env={"FOO": "bar"},
    )
    text = manifest.model_dump_json()
    assert '"content":"AP/+IGJpbmFyeQ=="' in text  # base64 in JSON
    again = Manifest.model_validate_json(text)
    assert again == manifest
    entry = again.entries["notes/readme.md"]
    assert isinstance(entry, File)
    assert entry.content == "héllo".encode()


@pytest.mark.parametrize("path", ["../x", "a/../../x", "a/..", "/etc/passwd", "", ".", "a\x00b"])
def test_entry_paths_must_stay_inside(path: str) -> None:
    with pytest.raises(ValidationError):
        Manifest(entries={path: File(content=b"x")})


def test_entry_paths_are_normalised_and_duplicates_refused() -> None:
    assert list(Manifest(entries={"./a//b.txt": Dir()}).entries) == ["a/b.txt"]
    with pytest.raises(ValidationError, match="given twice"):
        Manifest(entries={"a/b": Dir(), "a/./b": Dir()})


def test_invalid_env_and_mode_are_refused() -> None:
    with pytest.raises(ValidationError):
        Manifest(env={"A=B": "x"})
    with pytest.raises(ValidationError):
        File(content=b"", mode=0o10000)


def test_relative_root_becomes_absolute() -> None:
    root = Manifest(root=Path("some/dir")).root
    assert root is not None
    assert root.is_absolute()


async def test_create_lays_out_entries_in_a_fresh_workspace(tmp_path: Path) -> None:
    client = UnixLocalSandboxClient()
    manifest = Manifest(
        entries={"a/run.sh": File(content=b"#!/bin/sh\n", mode=0o750), "e/m/p/t/y": Dir()}
    )
    session = await client.create(manifest=manifest)
    try:
        assert manifest.root is None  # the caller's manifest is not mutated
        assert session.state.manifest.root == session.root
        assert session.root.name.startswith("sandmem-ws-")
        assert (session.root / "a/run.sh").read_bytes() == b"#!/bin/sh\n"
        assert stat.S_IMODE((session.root / "a/run.sh").stat().st_mode) == 0o750
        assert (session.root / "e/m/p/t/y").is_dir()
        assert not session.is_running
    finally:
        await client.delete(session)
    assert not session.root.exists()


async def test_given_root_is_used_and_other_files_are_kept(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    root.mkdir()
    (root / "keep.txt").write_bytes(b"mine")
    (root / "over.txt").write_bytes(b"old")
    client = UnixLocalSandboxClient()
    manifest = Manifest(entries={"over.txt": File(content=b"new")}, root=root)
    session = await client.create(manifest=manifest)
    assert session.root == root.resolve()
    assert (root / "keep.txt").read_bytes() == b"mine"
    assert (root / "over.txt").read_bytes() == b"new"
    assert not session.state.workspace_owned
    await client.delete(session)
    assert (root / "keep.txt").read_bytes() == b"mine"  # delete never removes a caller's root


async def test_missing_given_root_is_created(tmp_path: Path) -> None:
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=tmp_path / "new" / "ws"))
    assert (tmp_path / "new" / "ws").is_dir()
    await client.delete(session)
