"""S3MemoryStore on a real S3-compatible server: segments in order, versions switched by one
conditional write, conflicts detected (never overwritten), fencing, pruning."""

from __future__ import annotations

import uuid

import pytest
from services import S3Server

from sandmem.distributed import S3MemoryStore
from sandmem.memory.store._base import MemoryStoreConflict


def _store(s3: S3Server) -> S3MemoryStore:
    return S3MemoryStore(s3.bucket, f"t-{uuid.uuid4().hex[:8]}", endpoint_url=s3.endpoint_url)


async def test_segments_come_back_per_rollout_in_sequence_order(s3_server: S3Server) -> None:
    store = _store(s3_server)
    for index in range(5):
        await store.put_segment("sessions", "alpha", f'{{"n": {index}}}\n'.encode())
    await store.put_segment("sessions", "beta", b'{"n": 9}\n')
    segments = await store.segments("sessions")
    assert segments["alpha"] == [f'{{"n": {i}}}\n'.encode() for i in range(5)]
    assert segments["beta"] == [b'{"n": 9}\n']


async def test_a_commit_on_a_stale_base_is_refused_and_changes_nothing(
    s3_server: S3Server,
) -> None:
    store = _store(s3_server)
    assert await store.current("memories") is None
    first = await store.commit("memories", None, {"MEMORY.md": b"one\n"})
    with pytest.raises(MemoryStoreConflict):
        await store.commit("memories", None, {"MEMORY.md": b"rival\n"})  # If-None-Match: *
    second = await store.commit("memories", first, {"MEMORY.md": b"two\n"})
    with pytest.raises(MemoryStoreConflict):
        await store.commit("memories", first, {"MEMORY.md": b"late\n"})  # If-Match: first
    current = await store.current("memories")
    assert current is not None and current.version == second.version
    assert await store.read_files("memories", current, ["MEMORY.md"]) == {"MEMORY.md": b"two\n"}


async def test_a_version_under_a_newer_fence_refuses_an_older_writer(s3_server: S3Server) -> None:
    store = _store(s3_server)
    newer = await store.commit("memories", None, {"MEMORY.md": b"new\n"}, fence=7)
    with pytest.raises(MemoryStoreConflict, match="newer lease"):
        await store.commit("memories", newer, {"MEMORY.md": b"zombie\n"}, fence=3)


async def test_old_versions_are_pruned_but_the_replaced_one_is_kept(s3_server: S3Server) -> None:
    store = _store(s3_server)
    versions = [await store.commit("memories", None, {"a.md": b"0"})]
    for index in range(1, 4):
        versions.append(await store.commit("memories", versions[-1], {"a.md": str(index).encode()}))
    keys = await store._list(store._key("memories", "versions"))
    kept = {key.split("/versions/", 1)[1].split("/", 1)[0] for key in keys}
    assert kept == {versions[-1].version, versions[-2].version}


async def test_a_reader_on_a_pruned_version_reads_the_newer_one(s3_server: S3Server) -> None:
    from sandmem.memory.store._sync import read_current

    store = _store(s3_server)
    first = await store.commit("memories", None, {"MEMORY.md": b"1"})
    second = await store.commit("memories", first, {"MEMORY.md": b"2"})
    await store.commit("memories", second, {"MEMORY.md": b"3"})  # prunes the first
    with pytest.raises(FileNotFoundError):
        await store.read_files("memories", first, ["MEMORY.md"])
    current, files = await read_current(store, "memories")
    assert current is not None and files == {"MEMORY.md": b"3"}


async def test_an_oversized_object_is_skipped_never_read_whole(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25, class 4: an object larger than ``MAX_OBJECT_BYTES`` (a segment, a memory
    file, a pending mark) is skipped and reported; the others are read."""
    from sandmem.distributed import _s3

    store = _store(s3_server)
    await store.put_segment("sessions", "small", b'{"n": 1}\n')
    await store.put_segment("sessions", "huge", b'{"n": 2}\n' + b" " * 200)
    version = await store.commit("memories", None, {"MEMORY.md": b"ok", "big.md": b"x" * 300})
    monkeypatch.setattr(_s3, "MAX_OBJECT_BYTES", 100)
    assert await store.segments("sessions") == {"small": [b'{"n": 1}\n']}
    files = await store.read_files("memories", version, ["MEMORY.md", "big.md"])
    assert files == {"MEMORY.md": b"ok"}
