"""S3SnapshotSpec on a real S3 server: a stopped session's workspace is archived to the bucket
and restored on another "host" (nothing of the first host's disk left)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from services import S3Server

from sandmem.sandboxes import Manifest, SandboxSessionState, UnixLocalSandboxClient
from sandmem.sandboxes._s3_snapshot import S3SnapshotSpec

_RESUME = """
import asyncio, sys
from sandmem.sandboxes import SandboxSessionState, UnixLocalSandboxClient

async def main():
    state = SandboxSessionState.model_validate_json(sys.stdin.read())
    client = UnixLocalSandboxClient()
    session = await client.resume(state)
    async with session:
        print((session.root / "notes/plan.md").read_text(), end="")
        print("|", (session.root / "memories/MEMORY.md").read_text(), end="")
    await client.delete(session)

asyncio.run(main())
"""


async def test_a_workspace_resumes_on_another_host_from_the_bucket(
    s3_server: S3Server, tmp_path: Path
) -> None:
    spec = S3SnapshotSpec(
        s3_server.bucket,
        f"snaps-{uuid.uuid4().hex[:6]}",
        endpoint_url=s3_server.endpoint_url,
        base_path=tmp_path / "host-a-cache",
    )
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=tmp_path / "host-a"), snapshot=spec)
    async with session:
        await session.write("notes/plan.md", b"ship it")
        await session.write("memories/MEMORY.md", b"- learned on host A")
    text = session.state.model_dump_json()
    state = SandboxSessionState.model_validate_json(text)
    assert isinstance(state.snapshot, S3SnapshotSpec) and state.snapshot.type == "s3"
    # host A's disk is gone: the workspace and the local copy of the archive
    shutil.rmtree(tmp_path / "host-a")
    shutil.rmtree(tmp_path / "host-a-cache")
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", _RESUME],
        input=text,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ship it| - learned on host A"


async def test_delete_removes_the_remote_archive(s3_server: S3Server, tmp_path: Path) -> None:
    import boto3

    prefix = f"snaps-{uuid.uuid4().hex[:6]}"
    spec = S3SnapshotSpec(s3_server.bucket, prefix, endpoint_url=s3_server.endpoint_url)
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(), snapshot=spec)
    async with session:
        await session.write("a.txt", b"a")
    s3 = boto3.session.Session().client("s3", endpoint_url=s3_server.endpoint_url)
    try:
        listed = s3.list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix + "/")
        assert [o["Key"] for o in listed.get("Contents", [])] == [
            f"{prefix}/{session.session_id}.tar"
        ]
        await client.delete(session)
        listed = s3.list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix + "/")
        assert listed.get("Contents", []) == []
    finally:
        s3.close()
