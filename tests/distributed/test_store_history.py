"""Memory history with a remote store: versions made by generation jobs (the code
``sandmem worker`` runs) and by other hosts show in ``memory log`` on any host; a pulled
version is not mistaken for a live edit; redact-history rewrites the store's mirror too."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from click.testing import CliRunner
from conftest import S3Server
from test_store_sessions import _EXTRACTIVE, _host_run

from sandmem import memory as api
from sandmem.cli import cli
from sandmem.distributed import S3MemoryStore
from sandmem.memory import MemoryLayoutConfig
from sandmem.memory.generation._job import run_job
from sandmem.memory.layout import MemoryPaths


def _store(s3: S3Server) -> S3MemoryStore:
    return S3MemoryStore(s3.bucket, f"hist-{uuid.uuid4().hex[:8]}", endpoint_url=s3.endpoint_url)


async def test_versions_made_by_jobs_and_other_hosts_show_on_every_host(
    s3_server: S3Server, tmp_path: Path
) -> None:
    store = _store(s3_server)
    layout = MemoryLayoutConfig(store=store)
    await _host_run(tmp_path / "host-a", store, "host-a-r1", "echo built > out.txt")
    names = await store.history_names("memories")
    versions = [n for n in names if n.startswith("versions/")]
    assert len(versions) == 1 and versions[0].startswith("versions/00000001-")
    await _host_run(tmp_path / "host-b", store, "host-b-r1", "echo again > out.txt")

    # a worker's job, on a conversation no host has seen
    line = (tmp_path / "host-a/sessions/host-a-r1.jsonl").read_text().splitlines()[0]
    segment = json.loads(line) | {"rollout_id": "worker-r1"}
    await store.put_segment("sessions", "worker-r1", (json.dumps(segment) + "\n").encode())
    await run_job(store, MemoryPaths("memories", "sessions"), _EXTRACTIVE)

    for host in ("host-a", "host-b"):
        found = await api.log(tmp_path / host, layout=layout)
        assert [(v.version, v.kind) for v in found] == [
            (3, "consolidation"),
            (2, "consolidation"),
            (1, "consolidation"),
        ], host
        assert [v.rollouts_added for v in found] == [["worker-r1"], ["host-b-r1"], ["host-a-r1"]]
    text = (await api.diff(tmp_path / "host-a", 2, 3, layout=layout)).diff
    assert "+" in text and "worker-r1" in text


def _cli(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


async def test_memory_log_with_store_shows_a_workers_version_on_any_host(
    s3_server: S3Server, tmp_path: Path
) -> None:
    store = _store(s3_server)
    await _host_run(tmp_path / "host-a", store, "host-a-r1", "echo built > out.txt")
    line = (tmp_path / "host-a/sessions/host-a-r1.jsonl").read_text().splitlines()[0]
    segment = json.loads(line) | {"rollout_id": "worker-r1"}
    await store.put_segment("sessions", "worker-r1", (json.dumps(segment) + "\n").encode())
    await run_job(store, MemoryPaths("memories", "sessions"), _EXTRACTIVE)
    host = str(tmp_path / "host-a")
    alone = await asyncio.to_thread(_cli, "memory", "log", "-w", host)
    assert len(alone.splitlines()) == 1  # this host has not pulled since the worker's job
    url = f"s3://{store.bucket}/{store.prefix}"
    where = ("-w", host, "--store", url, "--endpoint-url", s3_server.endpoint_url)
    synced = (await asyncio.to_thread(_cli, "memory", "log", *where)).splitlines()
    assert len(synced) == 2 and "+worker-r1" in synced[0] and synced[0].lstrip().startswith("2 ")
    shown = await asyncio.to_thread(_cli, "memory", "diff", *where)
    assert "worker-r1" in shown


async def test_redact_history_rewrites_the_store_mirror(
    s3_server: S3Server, tmp_path: Path
) -> None:
    store = _store(s3_server)
    layout = MemoryLayoutConfig(store=store)
    await _host_run(tmp_path / "host-a", store, "host-a-r1", "echo PELICAN-4471 > out.txt")
    result = await api.redact_history(tmp_path / "host-a", r"PELICAN-\d+", layout=layout)
    assert result.versions == [1]
    names = await store.history_names("memories")
    stored = await store.read_history("memories", names)
    assert stored and not [n for n, data in stored.items() if b"PELICAN-4471" in data]
    # every object of the layout's memory in the store: the versions hosts pull, the history
    keys = await store._list(store._key("memories"))
    held = [k for k in keys if b"PELICAN-4471" in (await store._get(k))[0]]
    assert keys and held == []
    # the host's next run pulls nothing back and its stop pushes nothing old
    await _host_run(tmp_path / "host-a", store, "host-a-r2", "echo done > out.txt")
    for path in (tmp_path / "host-a" / "memories").rglob("*"):
        assert not path.is_file() or b"PELICAN-4471" not in path.read_bytes(), path
    keys = await store._list(store._key("memories"))
    assert not [k for k in keys if b"PELICAN-4471" in (await store._get(k))[0]]


async def test_redact_history_renames_a_file_named_after_the_secret_in_the_store(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """The task's words name the rollout summary ("run-build-..."): with the secret "build",
    the store's current version, the host's merge bases and the workspace all use the new
    name, and the next run pulls no old name back."""
    store = _store(s3_server)
    layout = MemoryLayoutConfig(store=store)
    await _host_run(tmp_path / "host-a", store, "host-a-r1", "echo built > out.txt")
    current = await store.current("memories")
    assert current is not None and any("build" in n for n in current.files)
    result = await api.redact_history(tmp_path / "host-a", r"(?i)build", layout=layout)
    assert result.renamed and not [n for n in result.renamed if "build" in n.lower()]
    current = await store.current("memories")
    assert current is not None
    renamed = {n for n in result.renamed if not n.startswith(".store/base/")}
    assert renamed and {f".store/base/{n}" for n in renamed} <= set(result.renamed)
    assert renamed <= set(current.files)
    assert not [n for n in current.files if "build" in n.lower()]
    await _host_run(tmp_path / "host-a", store, "host-a-r2", "echo done > out.txt")
    on_disk = [str(p) for p in (tmp_path / "host-a/memories").rglob("*")]
    assert renamed <= {p.split("/memories/", 1)[1] for p in on_disk}
    # (the new run's own task says "build" again: only the redacted conversation is checked)
    old = [p for p in on_disk if "r1_" in p and "build" in p.split("/memories/", 1)[1].lower()]
    assert old == []
