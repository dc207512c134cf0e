"""``sandmem mcp --store s3://...``: two memory servers on different "hosts" (one with a
temporary copy, one with its own workspace) sharing one layout in a real S3-compatible
store: a note remembered on host A is generated in the store and found on host B; an edit
made on host B is committed as a new version of the store."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from mcp_client import SANDMEM, stdio_session, text_of
from services import S3Server

NOTE = "Release notes go in docs/changes.md, newest entry first."
SECRET = "sk-proj-" + "R8v" * 16


async def test_two_servers_share_memory_through_the_store(
    s3_server: S3Server, tmp_path: Path
) -> None:
    from sandmem.distributed import S3MemoryStore

    url = f"s3://{s3_server.bucket}/mcp-{uuid.uuid4().hex[:8]}"
    store_args = ["--store", url, "--endpoint-url", s3_server.endpoint_url]
    host_a = [*store_args, "--engine", "extractive", "--allow-generate"]
    async with stdio_session(host_a) as session:
        result = await session.call_tool("memory_remember", {"text": f"{NOTE} key {SECRET}"})
        assert not result.is_error and "pushed to s3://" in text_of(result), text_of(result)
        report = json.loads(text_of(await session.call_tool("memory_generate", {})))
        assert report["processed"] == ["mcp-notes"] and report["complete"], report
        hits = text_of(await session.call_tool("memory_search", {"query": "release notes"}))
        assert "memories/MEMORY.md" in hits

    store = S3MemoryStore.from_url(url, endpoint_url=s3_server.endpoint_url)
    segments = await store.segments("sessions")
    assert list(segments) == ["mcp-notes"]
    assert SECRET.encode() not in b"".join(segments["mcp-notes"])
    current = await store.current("memories")
    assert current is not None

    workspace_b = tmp_path / "host-b"
    workspace_b.mkdir()
    host_b = ["--workspace", str(workspace_b), *store_args]
    async with stdio_session(host_b) as session:
        init = session.initialize_result
        assert init is not None and init.instructions is not None
        assert "docs/changes.md" in init.instructions  # the store's summary, pulled at start
        hits = text_of(await session.call_tool("memory_search", {"query": "release notes"}))
        assert "docs/changes.md" in hits
        first = (workspace_b / "memories" / "MEMORY.md").read_text().splitlines()[0]
        patch = (
            f"*** Begin Patch\n*** Update File: memories/MEMORY.md\n@@\n {first}\n"
            "+- Tag releases with vX.Y.Z.\n*** End Patch\n"
        )
        result = await session.call_tool("memory_update", {"patch": patch})
        assert not result.is_error and "Committed to s3://" in text_of(result), text_of(result)

    newer = await store.current("memories")
    assert newer is not None and newer.version != current.version
    files = await store.read_files("memories", newer, ["MEMORY.md"])
    assert "Tag releases with vX.Y.Z." in files["MEMORY.md"].decode()


def test_forget_is_refused_on_a_store(s3_server: S3Server) -> None:
    argv = [SANDMEM, "mcp", "--store", f"s3://{s3_server.bucket}/x", "--allow-forget"]
    done = subprocess.run(
        [*argv, "--engine", "extractive"],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "memory_forget is not available on a layout in a remote store" in done.stderr
