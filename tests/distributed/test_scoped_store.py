"""Named scopes in a memory store (``[scopes.named.<name>] store = "s3://..."``), served by one
``sandmem mcp`` process to the ``mcp`` SDK's client, against a real S3-compatible server: a
read-only store is read (search labelled, files, resources, the summary in the instructions)
from a private copy and never written; a read-write store takes notes and edits as
``--store`` does; a store that cannot be reached is one clear error naming its scope while
the other scopes are served."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession, stdio_client, types
from mcp_client import CLIENT, server_params, text_of
from services import S3Server, free_port

TEAM_MEMORY = b"# Memory\n\n## Deploys\n- deploys go through the release train on Tuesdays\n"
TEAM_SUMMARY = b"The team ships through the release train; freeze on Fridays.\n"
OPS_MEMORY = b"# Memory\n\n## Incidents\n- incident reviews happen on Thursdays\n"


def _store(s3: S3Server, url: str) -> Any:
    from sandmem.distributed import S3MemoryStore

    return S3MemoryStore.from_url(url, endpoint_url=s3.endpoint_url)


@asynccontextmanager
async def _session(home: Path, project: Path) -> AsyncIterator[ClientSession]:
    args = ["--allow-forget", "--engine", "extractive"]
    params = server_params(args, env={"SANDMEM_HOME": str(home)})
    params.cwd = str(project.parent)

    async def roots(ctx: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=project.as_uri(), name="p")])

    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, client_info=CLIENT, list_roots_callback=roots) as session,
    ):
        await session.initialize()
        yield session


async def _call(session: ClientSession, name: str, args: dict[str, Any]) -> tuple[bool, str]:
    result = await session.call_tool(name, args)
    return bool(result.is_error), text_of(result)


def _patch(line: str) -> str:
    return (
        f"*** Begin Patch\n*** Update File: MEMORY.md\n@@\n ## Incidents\n+{line}\n*** End Patch\n"
    )


async def test_named_scopes_in_a_store_read_only_read_write_and_unreachable(
    s3_server: S3Server, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    team_url = f"s3://{s3_server.bucket}/team-{run}"
    ops_url = f"s3://{s3_server.bucket}/ops-{run}"
    team, ops = _store(s3_server, team_url), _store(s3_server, ops_url)
    first = await team.commit(
        "memories", None, {"MEMORY.md": TEAM_MEMORY, "memory_summary.md": TEAM_SUMMARY}
    )
    await ops.commit("memories", None, {"MEMORY.md": OPS_MEMORY})
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[scopes.named.team]\nstore = "{team_url}"\nendpoint_url = "{s3_server.endpoint_url}"\n'
        f'[scopes.named.ops]\nstore = "{ops_url}"\nendpoint_url = "{s3_server.endpoint_url}"\n'
        'mode = "read-write"\n'
        f'[scopes.named.gone]\nstore = "s3://{s3_server.bucket}/gone"\nendpoint_url = "{dead}"\n'
    )
    project = tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    (project / "memories").mkdir()
    (project / "memories" / "MEMORY.md").write_text("# Memory\n\n- deploys: the shop uses fly\n")

    async with _session(home, project) as session:
        # search: every scope's hits labelled; the unreachable store named, the rest served
        errored, hits = await _call(session, "memory_search", {"query": "deploys"})
        assert not errored, hits
        lines = hits.splitlines()
        assert any(line.startswith("[project] ") and "fly" in line for line in lines)
        assert any(line.startswith("[team] memories/MEMORY.md:") for line in lines)
        [gone] = [line for line in lines if line.startswith("[gone] ")]
        assert "scope 'gone'" in gone and "cannot be read now" in gone and dead in gone
        errored, text = await _call(session, "memory_search", {"query": "incident reviews"})
        assert any(line.startswith("[ops] ") for line in text.splitlines()), text

        # reading: a file, a resource, the summary in the instructions made for the roots
        errored, text = await _call(session, "memory_read", {"path": "team:MEMORY.md"})
        assert not errored and text.startswith("[team] ") and "Tuesdays" in text
        read = await session.read_resource("memory://team/memory_summary.md")
        assert "freeze on Fridays" in read.contents[0].text  # type: ignore[union-attr]
        uris = {str(r.uri) for r in (await session.list_resources()).resources}
        assert {"memory://team/MEMORY.md", "memory://ops/MEMORY.md"} <= uris
        assert not any(uri.startswith("memory://gone/") for uri in uris)
        instructions = (await session.read_resource("memory://instructions.md")).contents[0]
        assert f"[team] named memory (read-only, {team_url})" in instructions.text  # type: ignore[union-attr]
        assert "freeze on Fridays" in instructions.text  # type: ignore[union-attr]
        errored, status = await _call(session, "memory_status", {})
        assert not errored and "## [gone] unavailable" in status and "## [team]" in status
        with pytest.raises(Exception, match="scope 'gone'"):
            await session.read_resource("memory://gone/MEMORY.md")

        # the read-only store is never written, whatever the tool
        for name, args in (
            ("memory_remember", {"text": "team fact", "scope": "team"}),
            ("memory_update", {"patch": _patch("- x"), "scope": "team"}),
            ("memory_remember", {"text": "team fact", "scope": "team", "kind": "preference"}),
        ):
            errored, text = await _call(session, name, args)
            assert errored and "read-only" in text and "nothing" in text, text
        errored, text = await _call(session, "memory_remember", {"text": "x", "scope": "gone"})
        assert errored and "scope 'gone'" in text and "nothing was written" in text, text

        # the read-write store takes a note (a segment) and an edit (a new version)
        errored, text = await _call(
            session, "memory_remember", {"text": "pager rota lives in ops/rota.md", "scope": "ops"}
        )
        assert not errored and text.startswith("[ops] ") and f"pushed to {ops_url}" in text, text
        errored, text = await _call(
            session,
            "memory_update",
            {"patch": _patch("- postmortems within two days"), "scope": "ops"},
        )
        assert not errored and "Committed to s3://" in text, text

        errored, text = await _call(
            session, "memory_forget", {"rollout_id": "mcp-notes", "scope": "ops"}
        )
        assert errored and "not available on scope 'ops'" in text, text

        # another host changes the read-only store: the next read after the pull interval sees it
        await team.commit(
            "memories", first, {"MEMORY.md": TEAM_MEMORY + b"- canary first, then everyone\n"}
        )
        import anyio

        await anyio.sleep(2.2)  # _store.PULL_INTERVAL_S
        errored, hits = await _call(session, "memory_search", {"query": "canary", "scope": "team"})
        assert not errored and "[team] " in hits and "canary" in hits, hits

    # nothing of the server reached the read-only store; the read-write one has both writes
    assert await team.segments("sessions") == {}
    assert await team.history_names("memories") == []  # nor its history mirror
    current = await team.current("memories")
    assert current is not None
    files = await team.read_files("memories", current, ["MEMORY.md"])
    assert b"canary" in files["MEMORY.md"] and b"team fact" not in files["MEMORY.md"]
    assert list(await ops.segments("sessions")) == ["mcp-notes"]
    newest = await ops.current("memories")
    assert newest is not None
    files = await ops.read_files("memories", newest, ["MEMORY.md"])
    assert b"postmortems within two days" in files["MEMORY.md"]
    # the copies are sandmem's own, under the home's cache; the project was not touched
    copies = home / "cache" / "stores"
    assert len([p for p in copies.iterdir() if (p / "memories").is_dir()]) == 3  # one a store
    assert not (project / "sessions").exists()


async def test_a_pull_through_a_read_only_store_changes_nothing_there(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """A pull keeps the store's history mirror on its way (uploads the copy's own versions,
    prunes): through ``ReadOnlyStore`` it leaves the store as it was; every write of memory
    is refused."""
    from sandmem.memory import _files
    from sandmem.memory._store_seam import MemoryStoreError
    from sandmem.memory.config import MemoryLayoutConfig
    from sandmem.memory.history import Attribution
    from sandmem.memory.journal import notice
    from sandmem.memory.layout import MemoryPaths, ensure_layout
    from sandmem.memory.store import ReadOnlyStore, pull
    from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

    paths = MemoryPaths.of(MemoryLayoutConfig())

    async def copy_with_a_version_of_its_own(root: Path) -> Any:
        session = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
        async with session:
            await ensure_layout(session, paths)
            await _files.write(session, "memories/MEMORY.md", b"# Memory\n- local only\n")
            async with _files.lock(session, paths.lock, timeout=5):
                await notice(session, paths, Attribution("hand_edit", note="local"))
        return await UnixLocalSandboxClient().create(manifest=Manifest(root=root))

    for name, read_only in (("control", False), ("team", True)):
        store = _store(s3_server, f"s3://{s3_server.bucket}/{name}-{uuid.uuid4().hex[:8]}")
        (tmp_path / name).mkdir()
        await store.commit("memories", None, {"MEMORY.md": TEAM_MEMORY})
        session = await copy_with_a_version_of_its_own(tmp_path / name)
        async with session:  # the copy's live edit is kept; its history is synced first
            await pull(session, paths, ReadOnlyStore(store) if read_only else store)
        mirrored = await store.history_names("memories")
        if read_only:
            assert mirrored == []  # the copy's own version was not uploaded
        else:
            assert any(n.startswith("versions/") for n in mirrored)  # what a writer's pull does

    ro = ReadOnlyStore(store)
    current = await store.current("memories")
    for attempt in (
        ro.commit("memories", current, {"MEMORY.md": b"x"}),
        ro.put_segment("sessions", "r1", b"{}\n"),
        ro.mark_pending("memories", "sessions"),
        ro.clear_marks("memories", ["m"]),
    ):
        with pytest.raises(MemoryStoreError, match="attached read-only"):
            await attempt
    assert await store.current("memories") == current and await store.segments("sessions") == {}
    assert ro.describe() == store.describe()
