"""Snapshots: stop archives the workspace; resume restores it, also in a new process."""

from __future__ import annotations

import inspect
import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from sandmem._errors import SandboxError, SandboxStateError
from sandmem.sandboxes import (
    File,
    LocalSnapshotSpec,
    Manifest,
    SandboxSession,
    UnixLocalSandboxClient,
)
from sandmem.sandboxes._hostfs import remove_tree
from sandmem.sandboxes._snapshot import STALE_TEMP_S


def tree(root: str) -> dict[str, Any]:
    """Everything a restore must preserve: type, bytes, mode, mtime, link target."""
    import hashlib
    import os
    import stat

    out: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ["link", os.readlink(path)]
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ["dir", mode, int(st.st_mtime)]
            else:
                with open(path, "rb") as fh:
                    digest = hashlib.sha256(fh.read()).hexdigest()
                out[rel] = ["file", mode, int(st.st_mtime), digest]
    return out


RESUME_SCRIPT = (
    "from __future__ import annotations\n"
    + inspect.getsource(tree)
    + textwrap.dedent(
        """
        import asyncio, json, sys
        from sandmem.sandboxes import UnixLocalSandboxClient

        async def main():
            client = UnixLocalSandboxClient()
            session = await client.resume(sys.stdin.read())
            async with session:
                listing = tree(str(session.root))
                result = await session.exec("cat bin/tool.sh && ./bin/tool.sh")
            print(json.dumps({"root": str(session.root), "tree": listing,
                              "output": result.output, "exit_code": result.exit_code}))

        asyncio.run(main())
        """
    )
)


def _resume_in_new_process(state_json: str, tmp: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", RESUME_SCRIPT],
        input=state_json,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


async def _populate(session: SandboxSession) -> None:
    await session.write("bin/tool.sh", b"#!/bin/sh\necho tool ran\n")
    await session.exec("chmod 750 bin/tool.sh")
    await session.write("data/blob.bin", bytes(range(256)) * 100)
    await session.exec("chmod 600 data/blob.bin && mkdir -p empty/nested && chmod 700 empty")
    await session.exec("mkdir ro && echo frozen > ro/f && chmod 555 ro")
    await session.exec("ln -s ../data/blob.bin bin/blob && ln -s data datalink")
    await session.exec(f"ln -s {session.root}/data/blob.bin abs_inner")
    await session.exec("ln -s /etc/passwd outside && ln -s ../../x escaping")
    result = await session.exec("ls -R > listing.txt && touch -d 2020-01-02 data/blob.bin")
    assert result.exit_code == 0, result.output


async def test_resume_in_a_new_process_restores_byte_for_byte(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec, tmp_path: Path
) -> None:
    session = await client.create(
        manifest=Manifest(entries={"seed.txt": File(content=b"seed")}), snapshot=snapshot_spec
    )
    async with session:
        await _populate(session)
    expected = tree(str(session.root))
    state_json = session.state.model_dump_json()

    # the original workspace is gone: only the snapshot can bring the files back
    remove_tree(session.root)
    report = _resume_in_new_process(state_json, tmp_path)
    assert report["root"] == str(session.root)  # restored where the workspace was
    assert report["exit_code"] == 0
    assert report["output"].endswith("tool ran\n")
    # outside-pointing links are dropped; absolute inner links become relative
    expected.pop("outside")
    expected.pop("escaping")
    assert expected.pop("abs_inner") == ["link", f"{session.root}/data/blob.bin"]
    restored = report["tree"]
    assert restored.pop("abs_inner") == ["link", "data/blob.bin"]
    assert restored == expected


async def _stopped_session(
    client: UnixLocalSandboxClient, spec: LocalSnapshotSpec, content: bytes = b"v1"
) -> SandboxSession:
    session = await client.create(snapshot=spec)
    async with session:
        await session.write("f.txt", content)
    return session


async def test_snapshot_is_written_atomically_and_overwritten_on_next_stop(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec
) -> None:
    session = await _stopped_session(client, snapshot_spec)
    path = snapshot_spec.path_for(session.session_id)
    assert sorted(p.name for p in snapshot_spec.base_path.iterdir()) == [path.name]
    async with session:  # a stopped session can be started again
        await session.write("f.txt", b"v2")
    assert sorted(p.name for p in snapshot_spec.base_path.iterdir()) == [path.name]
    resumed = await client.resume(session.state)
    assert await resumed.read_bytes("f.txt") == b"v2"
    assert resumed.session_id == session.session_id
    assert resumed.root == session.root
    assert resumed.state.manifest.root == resumed.root
    await client.delete(resumed)
    assert not path.exists()
    assert not resumed.root.exists()


async def test_a_killed_stops_temp_archive_is_removed_by_the_next_snapshot_once_stale(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec
) -> None:
    session = await _stopped_session(client, snapshot_spec)
    base = snapshot_spec.base_path
    stale = base / f".{session.session_id}.k1ll3d_x.tmp"
    fresh = base / f".{session.session_id}.wr1t1ng_.tmp"  # another stop still writing
    other = base / ".other-session.k1ll3d_x.tmp"
    for path in (stale, fresh, other):
        path.write_bytes(b"half a tar")
    old = time.time() - STALE_TEMP_S - 60
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    async with session:
        await session.write("f.txt", b"v2")
    assert not stale.exists()
    assert fresh.exists() and other.exists()


def _write_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes]], fmt: str = "1") -> None:
    headers = {"sandmem.snapshot_format": fmt}
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, pax_headers=headers) as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info


def _found(root: Path, name: str) -> bool:
    return any(root.rglob(name))


def _workspaces(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("sandmem-ws-"))


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "missing", "format"])
async def test_missing_or_corrupt_snapshot_is_a_state_error(
    client: UnixLocalSandboxClient,
    snapshot_spec: LocalSnapshotSpec,
    damage: str,
    _workspaces_in_tmp_path: Path,
) -> None:
    session = await _stopped_session(client, snapshot_spec, content=os.urandom(300_000))
    path = snapshot_spec.path_for(session.session_id)
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"this is not a tar archive" * 100)
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "missing":
        path.unlink()
    else:
        _write_tar(path, [(_member("f.txt"), b"x")], fmt="99")
    before = _workspaces(_workspaces_in_tmp_path)
    with pytest.raises(SandboxStateError, match="cannot be restored") as info:
        await client.resume(session.state.model_dump_json())
    assert info.value.operation == "resume"
    assert _workspaces(_workspaces_in_tmp_path) == before  # the half restore was removed


async def test_tampered_member_escaping_the_workspace_is_refused(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec, tmp_path: Path
) -> None:
    session = await _stopped_session(client, snapshot_spec)
    path = snapshot_spec.path_for(session.session_id)
    for name in ["../evil.txt", "/tmp/evil.txt", "a/../../evil.txt"]:
        _write_tar(path, [(_member("ok.txt"), b"ok"), (_member(name), b"evil")])
        with pytest.raises(SandboxStateError, match="outside the workspace"):
            await client.resume(session.state)
    assert not _found(tmp_path, "evil.txt")


async def test_escaping_links_and_special_members_are_skipped(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec
) -> None:
    session = await _stopped_session(client, snapshot_spec)
    path = snapshot_spec.path_for(session.session_id)
    _write_tar(
        path,
        [
            (_member("d", tarfile.DIRTYPE), b""),
            (_member("d/ok.txt"), b"ok"),
            (_member("d/inner", tarfile.SYMTYPE, "ok.txt"), b""),
            (_member("abs", tarfile.SYMTYPE, "/etc/passwd"), b""),
            (_member("d/up", tarfile.SYMTYPE, "../../etc"), b""),
            (_member("hard", tarfile.LNKTYPE, "d/ok.txt"), b""),
            (_member("fifo", tarfile.FIFOTYPE), b""),
        ],
    )
    resumed = await client.resume(session.state)
    assert await resumed.listdir() == ["d"]
    assert await resumed.listdir("d") == ["inner", "ok.txt"]
    assert await resumed.read_bytes("d/inner") == b"ok"
    await client.delete(resumed)


async def test_snapshot_failure_is_raised_after_the_session_stopped(
    client: UnixLocalSandboxClient, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_bytes(b"")
    session = await client.create(snapshot=LocalSnapshotSpec(blocker / "snaps"))
    await session.start()
    with pytest.raises(SandboxError, match="snapshot") as info:
        await session.stop()
    assert info.value.operation == "snapshot"
    assert not session.is_running
    await client.delete(session)


async def test_snapshot_directory_inside_the_workspace_is_left_out(
    client: UnixLocalSandboxClient, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    spec = LocalSnapshotSpec(root / ".snapshots")
    session = await client.create(manifest=Manifest(root=root), snapshot=spec)
    async with session:
        await session.write("a.txt", b"a")
    async with session:  # the second snapshot must not contain the first
        pass
    resumed = await client.resume(session.state)
    assert await resumed.listdir() == ["a.txt"]
    await client.delete(resumed)


def _escapes(root: Path) -> list[str]:
    """Every entry under ``root`` whose real location (all symlinks followed) is outside."""
    real_root = os.path.realpath(root)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            real = os.path.realpath(os.path.join(dirpath, name))
            if real != real_root and not real.startswith(real_root + "/"):
                found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return found


@pytest.mark.parametrize(
    "links",
    [
        # finding 3: c is placed through the link a/b, pointing one level above it
        [("a/b", ".."), ("a/b/c", "..")],
        # '..' after a link climbs from the link's target (as the kernel does)
        [("a/b", ".."), ("c", "a/b/..")],
        # a link whose meaning changes once a later link is placed
        [("c", "a/b/.."), ("a/b", "..")],
        [("x", "."), ("x/y", ".."), ("x/y/z", "../..")],
    ],
    ids=["link-through-link", "dotdot-after-link", "later-link", "chain"],
)
async def test_restored_links_never_resolve_outside(
    client: UnixLocalSandboxClient,
    snapshot_spec: LocalSnapshotSpec,
    links: list[tuple[str, str]],
) -> None:
    session = await _stopped_session(client, snapshot_spec)
    path = snapshot_spec.path_for(session.session_id)
    members = [(_member("a", tarfile.DIRTYPE), b""), (_member("f.txt"), b"ok")]
    members += [(_member(name, tarfile.SYMTYPE, target), b"") for name, target in links]
    _write_tar(path, members)
    resumed = await client.resume(session.state)
    assert _escapes(resumed.root) == []
    assert await resumed.read_bytes("f.txt") == b"ok"
    await client.delete(resumed)


async def test_a_member_below_a_restored_link_is_never_placed_through_it(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec, tmp_path: Path
) -> None:
    session = await _stopped_session(client, snapshot_spec)
    path = snapshot_spec.path_for(session.session_id)
    members = [
        (_member("a", tarfile.DIRTYPE), b""),
        (_member("a/b", tarfile.SYMTYPE, ".."), b""),
        (_member("a/b/c", tarfile.SYMTYPE, ".."), b""),
        (_member("a/b/c/evil.txt"), b"evil"),
    ]
    _write_tar(path, members)
    resumed = await client.resume(session.state)
    assert _escapes(resumed.root) == []
    assert not _found(tmp_path / "snapshots", "evil.txt")
    assert not (resumed.root.parent / "evil.txt").exists()
    await client.delete(resumed)


async def test_restore_drops_setuid_and_setgid_bits(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec
) -> None:
    session = await _stopped_session(client, snapshot_spec)
    path = snapshot_spec.path_for(session.session_id)
    suid = _member("suid")
    suid.mode = 0o4755
    sgid_dir = _member("d", tarfile.DIRTYPE)
    sgid_dir.mode = 0o2775
    _write_tar(path, [(sgid_dir, b""), (suid, b"#!/bin/sh\n")])
    resumed = await client.resume(session.state)
    assert os.stat(resumed.root / "suid").st_mode & 0o7777 == 0o755
    assert os.stat(resumed.root / "d").st_mode & 0o7777 == 0o775
    await client.delete(resumed)
