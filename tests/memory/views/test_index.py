"""The layout index (``<memories_dir>/.index.sqlite``): what ``status``, ``list`` and
``search`` answer from it always equals what the files say — across record, flush, forget
and live edits, after a SIGKILL between a file write and the index update or in the middle
of an update, and with the index deleted, corrupt or replaced by a symlink — and search
ranks exactly as the full scan does."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from memory_doubles import age
from memory_doubles import segment_line as segment

from sandmem import UserError
from sandmem import memory as api
from sandmem.cli import cli
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.views._index import INDEX_NAME, opened_index
from sandmem.memory.views._search import search_memory, searchable_files
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.sandboxes._session import SandboxSession
from sandmem.testing import InMemorySandboxClient

PATHS = MemoryPaths("memories", "sessions")
EXTRACT = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
QUERIES = ["invoice total", "redis cache timeout", "deploy staging", "the", "zzz-none", "Skill"]
TOPICS = [
    ("invoice", "Fix the invoice total rounding bug in billing.py"),
    ("redis", "Raise the redis cache timeout for the session store"),
    ("deploy", "Write deployment notes for the staging cluster"),
    ("navbar", "Make the navbar logo smaller on mobile"),
    ("poetry", "Switch the project from pip to poetry"),
    ("health", "Return 200 from the health check when redis is down"),
]


async def open_session(root: Path) -> SandboxSession:
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
    await session.start()
    return session


async def flush(session: SandboxSession) -> None:
    manager = get_manager(session, PATHS, EXTRACT)
    manager.detach_stop_hook()
    await manager.flush()


async def build(root: Path) -> None:
    session = await open_session(root)
    for number, (rid, task) in enumerate(TOPICS):
        await session.write(PATHS.rollout_file(rid), segment(rid, task, number))
    await session.write(f"{PATHS.skills_dir}/deploy/SKILL.md", "# Skill: deploy\n\nRun make.\n")
    await flush(session)
    await session.aclose()


#: what a distilled-memory hit of the API and of the full scan both hold
HIT_FIELDS = ("path", "line", "score", "snippet", "heading")


async def answers(root: Path) -> dict[str, Any]:
    """What the API says of the workspace (through the index)."""
    status = await api.status(root)
    return {
        "conversations": [c.model_dump() for c in status.conversations],
        "counts": status.counts.model_dump(),
        "dirs": {k: v.model_dump() for k, v in status.dirs.items()},
        "files": {k: v.model_dump() for k, v in status.files.items()},
        "list": [c.model_dump() for c in await api.list_conversations(root)],
        "search": {
            q: [
                h.model_dump(include=set(HIT_FIELDS))
                for h in (await api.search(root, q, transcripts=False)).hits
            ]
            for q in QUERIES
        },
    }


async def check(root: Path, tmp_path: Path) -> None:
    """The index's answers equal a fresh index's over a copy of the files, and its search
    hits equal the full scan's."""
    seen = await answers(root)
    copy = tmp_path / f"copy-{time.monotonic_ns()}"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".index.*"))
    fresh = await answers(copy)
    for part in ("conversations", "dirs", "files"):
        for value in (seen, fresh):  # the copy lives at another path
            value[part] = json.loads(json.dumps(value[part]).replace(str(copy), str(root)))
    assert seen == fresh
    session = await open_session(root)
    files = await searchable_files(session, PATHS)
    await session.aclose()
    for query in QUERIES:
        full = [{k: getattr(h, k) for k in HIT_FIELDS} for h in search_memory(files, query, 10)]
        assert seen["search"][query] == full, query


async def test_search_equals_the_full_scan(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    await build(root)
    age(root)
    await check(root, tmp_path)
    hits = await api.search(root, "invoice total")
    assert hits.hits and "invoice" in hits.hits[0].snippet.lower()


async def test_the_index_follows_record_flush_forget_and_live_edits(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    await build(root)
    age(root)
    await check(root, tmp_path)
    session = await open_session(root)
    manager = get_manager(session, PATHS, EXTRACT)
    manager.detach_stop_hook()
    # record: a new segment of one conversation, and a new conversation
    await manager.record(json.loads(segment("redis", "Now also tune redis eviction", 30)))
    await manager.record(json.loads(segment("tokens", "Rotate the API tokens weekly", 31)))
    await check(root, tmp_path)
    statuses = {c.rollout_id: c.status for c in await api.list_conversations(root)}
    assert statuses["redis"] == statuses["tokens"] == "pending"
    # flush
    await manager.flush()
    await check(root, tmp_path)
    assert {c.status for c in await api.list_conversations(root)} == {"done"}
    age(root)
    # live edits of MEMORY.md and a skill, a rollout summary deleted by hand
    await session.write(PATHS.memory_md, "# Edited\n\nThe invoice total is kept in cents.\n")
    await session.write(f"{PATHS.skills_dir}/deploy/SKILL.md", "# Skill: deploy\n\nRun tox.\n")
    summary = sorted((root / PATHS.summaries_dir).iterdir())[0]
    summary.unlink()
    await check(root, tmp_path)
    assert (await api.search(root, "cents")).hits[0].path == PATHS.memory_md
    # forget
    await session.aclose()
    await api.forget(root, "navbar", engine="extractive")
    await check(root, tmp_path)
    assert "navbar" not in {c.rollout_id for c in await api.list_conversations(root)}


async def test_unchanged_files_are_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ws"
    await build(root)
    age(root)
    await api.reindex(root)  # builds the index
    session = await open_session(root)
    reads: Counter[str] = Counter()
    read_many = session.read_many

    async def counting(paths: Any) -> dict[str, bytes | None]:
        reads.update(paths)
        return await read_many(paths)

    monkeypatch.setattr(session, "read_many", counting)
    await api.status(session)
    found = await api.search(session, "invoice")
    layout_reads = [p for p in reads if p.startswith((PATHS.sessions_dir, PATHS.raw_dir))]
    summary_reads = [p for p in reads if p.startswith(PATHS.summaries_dir)]
    # search reads only the files its hits name (each hit is checked against its file)
    assert found.hits
    assert set(layout_reads + summary_reads) <= {h.path for h in found.hits}
    # one append: only that rollout is read again
    await session.append(PATHS.rollout_file("poetry"), segment("poetry", "And pin it", 40))
    reads.clear()
    await api.list_conversations(session)
    assert [p for p in reads if p.startswith(PATHS.sessions_dir)] == [PATHS.rollout_file("poetry")]
    await session.aclose()


@pytest.mark.parametrize("damage", ["deleted", "garbage", "truncated", "dirty", "symlink"])
async def test_a_damaged_index_is_rebuilt(tmp_path: Path, damage: str) -> None:
    root = tmp_path / "ws"
    await build(root)
    age(root)
    before = await answers(root)
    index = root / PATHS.memories_dir / INDEX_NAME
    if damage == "deleted":
        index.unlink()
    elif damage == "garbage":
        index.write_bytes(os.urandom(5000))
    elif damage == "truncated":
        index.write_bytes(index.read_bytes()[: index.stat().st_size // 3])
    elif damage == "dirty":  # as a process killed mid-update leaves it
        import sqlite3

        conn = sqlite3.connect(index)
        conn.execute("UPDATE meta SET value = 1 WHERE key = 'dirty'")
        conn.execute("DELETE FROM conversations WHERE rid = 'invoice'")
        conn.commit()
        conn.close()
    else:
        outside = tmp_path / "outside.txt"
        outside.write_bytes(b"not yours")
        index.unlink()
        index.symlink_to(outside)
    assert await answers(root) == before
    if damage == "symlink":  # moved aside (never followed) like any link planted in a layout
        assert (tmp_path / "outside.txt").read_bytes() == b"not yours"
        assert not index.is_symlink()
        assert [p.is_symlink() for p in index.parent.glob(f"{INDEX_NAME}.moved-*")] == [True]


_KILLED = """
import asyncio, json, os, signal, sys
from pathlib import Path
from sandmem import UserError
from sandmem import memory as api
from sandmem.memory.views import _index
root, mode = Path(sys.argv[1]), sys.argv[2]

async def main():
    if mode == "after-write":
        await api.status(root)  # the index is current ...
        rollout = root / "sessions" / "deploy.jsonl"
        with open(rollout, "a") as f:  # ... then files change and the process dies
            f.write(sys.argv[3])
        (root / "memories" / "MEMORY.md").write_text("# Killed\\n\\nquokka notes\\n")
        os.kill(os.getpid(), signal.SIGKILL)
    else:  # killed in the middle of an index update
        (root / "memories" / "MEMORY.md").write_text("# Killed\\n\\nquokka notes\\n")
        async def die(self):
            os.kill(os.getpid(), signal.SIGKILL)
        _index.LayoutIndex.save = die
        await api.search(root, "quokka")

asyncio.run(main())
"""


@pytest.mark.parametrize("mode", ["after-write", "mid-update"])
async def test_sigkill_never_leaves_the_index_wrong(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "ws"
    await build(root)
    age(root)
    await api.search(root, "invoice")
    line = segment("deploy", "Also document the rollback", 50)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        textwrap.dedent(_KILLED),
        str(root),
        mode,
        line,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == -signal.SIGKILL, stderr.decode()
    await check(root, tmp_path)
    assert (await api.search(root, "quokka")).hits[0].path == PATHS.memory_md
    if mode == "after-write":
        deploy = [c for c in await api.list_conversations(root) if c.rollout_id == "deploy"]
        assert deploy[0].segments == 2 and deploy[0].status == "pending"


async def test_list_pages_and_reindex(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    await build(root)
    everything = [c.rollout_id for c in await api.list_conversations(root)]
    assert len(everything) == len(TOPICS)
    page = await api.list_conversations(root, limit=2, offset=1)
    assert [c.rollout_id for c in page] == everything[1:3]
    assert await api.list_conversations(root, offset=5) == (await api.list_conversations(root))[5:]
    with pytest.raises(UserError):
        await api.list_conversations(root, limit=-1)
    report = await api.reindex(root)
    assert (report.conversations, report.files) == (len(TOPICS), len(TOPICS) + 2)
    assert report.bytes == (root / report.path).stat().st_size


def test_the_cli_pages_and_reindexes(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    asyncio.run(build(root))
    everything = [c.rollout_id for c in api.list_conversations_sync(root)]
    runner = CliRunner()
    listed = runner.invoke(
        cli, ["memory", "list", "-w", str(root), "--limit", "2", "--offset", "1"]
    )
    assert listed.exit_code == 0, listed.output
    assert [line.split()[0] for line in listed.output.splitlines() if not line.startswith(" ")] == (
        everything[1:3]
    )
    rebuilt = runner.invoke(cli, ["memory", "reindex", "-w", str(root), "--json"])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert json.loads(rebuilt.output)["conversations"] == len(TOPICS)


async def test_a_backend_without_host_files_keeps_the_index_through_the_session() -> None:
    client = InMemorySandboxClient(exec_handler=lambda argv, workdir, env: "")
    session = await client.create(manifest=Manifest())
    async with session:
        for number, (rid, task) in enumerate(TOPICS[:3]):
            await session.write(PATHS.rollout_file(rid), segment(rid, task, number))
        await flush(session)
        hits = await api.search(session, "invoice total", transcripts=False)
        assert await session.exists(f"{PATHS.memories_dir}/{INDEX_NAME}")
        files = await searchable_files(session, PATHS)
        assert [h.model_dump(include=set(HIT_FIELDS)) for h in hits.hits] == [
            {k: getattr(h, k) for k in HIT_FIELDS}
            for h in search_memory(files, "invoice total", 10)
        ]
        both = await api.search(session, "invoice total")
        assert {h.tier for h in both.hits} == {"memory", "transcript"}
        async with opened_index(session, PATHS) as index:
            assert index.file is None
            assert {c.rollout_id for c in index.conversations()} == {r for r, _ in TOPICS[:3]}


async def test_the_viewer_pages_a_large_layout(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    await build(root)
    newest = [c.rollout_id for c in await api.list_conversations(root)]
    whole = await api.view_html(root)  # 6 conversations: one page, as before
    assert "Page 1 of" not in whole
    pages = [await api.view_html(root, page=n, page_size=2) for n in (1, 2, 3)]
    for number, page in enumerate(pages, start=1):
        assert f"Page {number} of 3 (6 conversations" in page
        table = page.split('id="conversations-table"', 1)[1].split("</table>", 1)[0]
        shown = [rid for rid in newest if f">{rid}<" in table]
        assert shown == newest[(number - 1) * 2 : number * 2]
    assert len(pages[0]) < len(whole)
    with pytest.raises(UserError):
        await api.view_html(root, page=0)
