"""What comes back from a memory store or a broker is untrusted (issue 25, class 4): names are
checked where the data enters (``MemoryVersion``, ``checked_segments``, ``parse_job``); one bad
object is skipped and reported, never written outside the layout, never blocks it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sandmem import Manifest, UnixLocalSandboxClient
from sandmem._errors import UserError
from sandmem.distributed import S3MemoryStore
from sandmem.distributed._jobs import PoisonMessage, parse_job
from sandmem.distributed._worker import job_store
from sandmem.memory._store_seam import (
    MalformedStoreObject,
    MemoryStore,
    MemoryStoreError,
    MemoryVersion,
    safe_name,
    sha256,
)
from sandmem.memory.generation._job import _stage
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.store._sync import pull

HOSTILE = [
    "../evil.md",
    "../../../../tmp/evil.md",
    "/etc/evil.md",
    "skills/../../evil.md",
    "skills//x.md",
    "./MEMORY.md",
    ".store/base/MEMORY.md",
    ".store",
    ".lock",
    "a\\..\\b.md",
    "nul\0.md",
    "",
    "x" * 2000,
    # round 4: names a terminal or a reader would show other than they are, names no
    # filesystem takes
    "skills/\x1b[31mred.md",
    "skills/a\nb.md",
    "skills/\u202egnp.md",
    "skills/zero\u200bwidth.md",
    "skills/" + "a" * 256 + ".md",
    "rollout_summaries/\x7f.md",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_file_name_is_skipped_where_a_version_enters(name: str) -> None:
    assert not safe_name(name)
    version = MemoryVersion("v1", {"MEMORY.md": "h", name: "h"})
    assert version.files == {"MEMORY.md": "h"} and version.skipped == (name,)
    raw = version.to_json()  # what a bucket would hold (the hostile name is not written back)
    assert name not in MemoryVersion.from_json(raw, "e").files


@pytest.mark.parametrize(
    "place",
    [{"homes": {"a.md": home}} for home in ["../v", "v/../../x", "", "a b", "/v"]]
    + [
        {"spans": {"a.md": span}}
        for span in [[-1, 2], [0], [0, 1, 2], ["0", 1], [0.5, 1], [True, 1], "x"]
    ],
)
def test_a_file_whose_place_is_not_valid_is_skipped(place: dict[str, object]) -> None:
    record = {"version": "v2", "files": {"MEMORY.md": "h", "a.md": "h"}, **place}
    version = MemoryVersion.from_json(json.dumps(record).encode(), "e")
    assert version.files == {"MEMORY.md": "h"} and version.skipped == ("a.md",)
    assert version.home("MEMORY.md") == "v2"


@pytest.mark.parametrize("version", ["../v", "v/../../x", "", "a b", "/v"])
def test_a_hostile_version_id_is_refused(version: str) -> None:
    with pytest.raises(MemoryStoreError, match="invalid id"):
        MemoryVersion(version, {})


def _found(root: Path, pattern: str) -> list[Path]:
    return sorted(root.rglob(pattern))


@dataclass
class HostileStore(MemoryStore):
    """A store whose current version and segments name files outside the layout."""

    files: dict[str, bytes] = field(default_factory=dict)
    segs: dict[str, list[bytes]] = field(default_factory=dict)
    #: the raw CURRENT object, when it is to be parsed as a store's would be
    raw_current: bytes | None = None

    async def put_segment(self, sessions_dir: str, rollout_id: str, data: bytes) -> str:
        raise NotImplementedError

    async def segments(self, sessions_dir: str) -> dict[str, list[bytes]]:
        return self.segs

    async def current(self, memories_dir: str) -> MemoryVersion | None:
        if self.raw_current is not None:
            return MemoryVersion.from_json(self.raw_current, "etag")
        return MemoryVersion("v1", {name: sha256(data) for name, data in self.files.items()})

    async def read_files(
        self, memories_dir: str, version: MemoryVersion, paths: list[str]
    ) -> dict[str, bytes]:
        return {path: self.files[path] for path in paths}

    async def commit(
        self, memories_dir: str, base: MemoryVersion | None, files: dict[str, bytes], *, fence=0
    ) -> MemoryVersion:
        raise NotImplementedError


async def test_pull_skips_the_hostile_names_and_the_layout_still_starts(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store = HostileStore(
        files={"MEMORY.md": b"## ok\n", "memory_summary.md": b"sum\n"}
        | {name: b"evil" for name in HOSTILE if name and "\0" not in name and len(name) < 100}
    )
    client = UnixLocalSandboxClient()
    ws = outside / "ws"
    session = await client.create(manifest=Manifest(root=ws))
    async with session:
        assert await pull(session, MemoryPaths("memories", "sessions"), store)
    assert (ws / "memories/MEMORY.md").read_bytes() == b"## ok\n"
    assert _found(tmp_path, "*evil*") == []
    await client.delete(session)


def test_names_that_need_a_file_and_a_directory_at_once_are_skipped() -> None:
    version = MemoryVersion(
        "v1", {"MEMORY.md": "h", "skills/a": "h", "skills/a/b.md": "h", "skills/c/d/e": "h"}
    )
    assert sorted(version.files) == ["MEMORY.md", "skills/a/b.md", "skills/c/d/e"]
    assert version.skipped == ("skills/a",)


async def test_one_file_that_cannot_be_written_is_skipped_and_the_pull_goes_on(
    tmp_path: Path,
) -> None:
    """Before the fix the first name the workspace could not take failed the whole pull,
    and with it every run start of the layout."""
    store = HostileStore(
        files={
            "MEMORY.md": b"## ok\n",
            "skills/a": b"x",
            "skills/a/b.md": b"y",
            "skills/taken/SKILL.md": b"z",
            "rollout_summaries/r_x.md": b"r",
        }
    )
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=tmp_path / "ws"))
    (tmp_path / "ws/memories/skills/taken/SKILL.md").mkdir(parents=True)  # in the way
    async with session:
        assert await pull(session, MemoryPaths("memories", "sessions"), store)
    memories = tmp_path / "ws/memories"
    assert (memories / "MEMORY.md").read_bytes() == b"## ok\n"
    assert (memories / "skills/a/b.md").read_bytes() == b"y"
    assert (memories / "rollout_summaries/r_x.md").read_bytes() == b"r"
    assert (memories / "skills/taken/SKILL.md").is_dir()
    await client.delete(session)


MALFORMED_CURRENT = [
    b"{not json",
    b"[1, 2]",
    b'{"version": "v1", "files": {}, "fence": "abc"}',
    b'{"version": "v1", "files": {}, "fence": 1e400}',
    b'{"version": "v1", "files": {}, "updated_at": "x"}',
    b'{"version": "v1", "files": {}, "updated_at": NaN}',
    b'{"version": "v1", "files": [["MEMORY.md", "h"]]}',
    b'{"version": "v1", "files": {"MEMORY.md": 7}}',
    b'{"version": "../v", "files": {}}',
    b'{"version": "v1", "files": {}, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b"\xff\xfe",
]


@pytest.mark.parametrize("raw", MALFORMED_CURRENT, ids=range(len(MALFORMED_CURRENT)))
async def test_a_malformed_current_object_is_reported_and_the_run_goes_on(
    raw: bytes, tmp_path: Path
) -> None:
    """Before the fix these raised JSONDecodeError, ValueError, OverflowError or
    RecursionError out of every run start of the layout."""
    with pytest.raises(MalformedStoreObject):
        MemoryVersion.from_json(raw, "etag")
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=tmp_path / "ws"))
    async with session:
        assert not await pull(
            session, MemoryPaths("memories", "sessions"), HostileStore(raw_current=raw)
        )
    await client.delete(session)


async def test_segments_of_hostile_rollout_ids_are_skipped_when_a_job_stages(
    tmp_path: Path,
) -> None:
    store = HostileStore(
        files={"MEMORY.md": b"x\n"},
        segs={
            "good": [b'{"a": 1}\n'],
            "../../escape": [b"x\n"],
            "a/b": [b"x\n"],
            ".hidden": [b"x\n"],
            "": [b"x\n"],
        },
    )
    client = UnixLocalSandboxClient()
    ws = tmp_path / "job" / "ws"
    session = await client.create(manifest=Manifest(root=ws))
    async with session:
        await _stage(session, store, MemoryPaths("memories", "sessions"))
    assert [p.name for p in _found(ws / "sessions", "*")] == ["good.jsonl"]
    assert _found(tmp_path, "escape*") == []
    await client.delete(session)


ROOT = S3MemoryStore("bucket", "team")


@pytest.mark.parametrize(
    "job",
    [
        {"store": {"bucket": "bucket", "prefix": "team/../other"}},
        {"store": {"bucket": "bucket", "prefix": "team/./x"}},
        {"store": {"bucket": "bucket", "prefix": "team//x"}},
        {"store": "team"},
        {"memories_dir": "../memories"},
        {"memories_dir": "/abs"},
        {"sessions_dir": "memories/sessions"},
        {"sessions_dir": "memories"},
        {"memories_dir": 7},
        # round 4: wrong types, values out of range, names no directory may have
        {"attempt": -1},
        {"attempt": 10**30},
        {"attempt": "many"},
        {"enqueued_at": "nan"},
        {"enqueued_at": float("inf")},
        {"enqueued_at": -5},
        {"memories_dir": "mem\0x"},
        {"memories_dir": "mem\x1b[2J"},
        {"memories_dir": "m" * 5000},
        {"sessions_dir": "s/" + "x" * 300},
        {"store": {"bucket": "bucket", "prefix": "team/a\x1b"}},
        {"store": {"bucket": "bucket", "prefix": "team/" + "p/" * 600}},
        {"store": {"bucket": "bucket"}, "memories_dir": None},
    ],
)
def test_a_job_message_names_only_valid_layouts(job: dict[str, object]) -> None:
    base = {"store": {"bucket": "bucket", "prefix": "team/a"}, "memories_dir": "memories"}
    message = base | {"sessions_dir": "sessions"} | job
    with pytest.raises(PoisonMessage):
        parse_job(json.dumps(message))


@pytest.mark.parametrize(
    "store", [{"bucket": "bucket", "prefix": "teamx"}, {"bucket": "other", "prefix": "team"}]
)
def test_a_job_outside_the_workers_prefix_is_refused(store: dict[str, str]) -> None:
    job = parse_job(json.dumps({"store": store, "memories_dir": "m", "sessions_dir": "s"}))
    with pytest.raises(UserError, match="outside"):
        job_store(ROOT, job)


def test_a_valid_job_message_is_accepted() -> None:
    raw = {
        "store": {"bucket": "bucket", "prefix": "team/a", "endpoint_url": "http://evil:9000"},
        "memories_dir": "mem",
        "sessions_dir": "ses",
    }
    job = parse_job(json.dumps(raw))
    assert job_store(ROOT, job).prefix == "team/a"
    assert job_store(ROOT, job).endpoint_url == ROOT.endpoint_url  # never the message's
    assert (job.memories_dir, job.sessions_dir) == ("mem", "ses")


@dataclass
class _Queue:
    dead: list[tuple[str, bytes, str]] = field(default_factory=list)

    async def dead_letter(self, message_id: str, body: bytes, reason: str) -> None:
        self.dead.append((message_id, body, reason))


@dataclass
class _CommittingStore(HostileStore):
    committed: dict[str, bytes] = field(default_factory=dict)

    async def current(self, memories_dir: str) -> MemoryVersion | None:
        return None

    async def commit(
        self, memories_dir: str, base: MemoryVersion | None, files: dict[str, bytes], *, fence=0
    ) -> MemoryVersion:
        self.committed = dict(files)
        return MemoryVersion("v2", {name: sha256(data) for name, data in files.items()})


async def test_a_failed_jobs_error_text_is_redacted_wherever_it_is_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A model server's error text may echo a key: the job's failure record in the store's
    ``generation_log.jsonl``, the dead-letter entry and the worker's log hold it redacted
    (before the fix all three held it as the server sent it)."""
    from sandmem.distributed._worker import Worker

    key = "sk-proj-" + "Ab3" * 20
    queue, store = _Queue(), _CommittingStore()
    worker = Worker(queue, ROOT, config=None)  # type: ignore[arg-type]
    job = parse_job(
        json.dumps(
            {
                "store": {"bucket": "bucket", "prefix": "team"},
                "memories_dir": "memories",
                "sessions_dir": "sessions",
            }
        )
    )
    error = RuntimeError(f"401 Unauthorized: Incorrect API key provided: {key}")
    await worker._fail("m-1", job, store, error, "after 8 attempts: ")  # type: ignore[arg-type]
    log = store.committed["generation_log.jsonl"].decode()
    assert "[REDACTED:openai-key]" in log and key not in log
    assert key not in queue.dead[0][2] and "[REDACTED:openai-key]" in queue.dead[0][2]
    assert key not in caplog.text
