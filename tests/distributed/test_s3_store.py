"""S3MemoryStore on a real S3-compatible server: segments in order, versions switched by one
conditional write, conflicts detected (never overwritten), fencing, pruning."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from services import S3Server

from sandmem.distributed import S3MemoryStore
from sandmem.distributed._s3 import _PACKS_MAX
from sandmem.memory._store_seam import MemoryStoreConflict


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


async def _uploads(store: S3MemoryStore) -> set[str]:
    root = store._key("memories", "versions")
    return {key[len(root) + 1 :] for key in await store._list(root)}


async def test_old_versions_are_pruned_but_the_replaced_one_is_kept(s3_server: S3Server) -> None:
    store = _store(s3_server)
    versions = [await store.commit("memories", None, {"a.md": b"0"})]
    for index in range(1, 4):
        versions.append(await store.commit("memories", versions[-1], {"a.md": str(index).encode()}))
    assert await _uploads(store) == {f"{v.version}.pack" for v in versions[-2:]}


async def test_a_commit_uploads_one_pack_of_what_changed_and_pruning_keeps_what_is_reused(
    s3_server: S3Server,
) -> None:
    store = _store(s3_server)
    first = await store.commit("memories", None, {"keep.md": b"same", "a.md": b"0"})
    versions = [first]
    for index in range(1, 4):
        files = {"keep.md": b"same", "a.md": str(index).encode()}
        versions.append(await store.commit("memories", versions[-1], files))
    last = versions[-1]
    # keep.md was uploaded once, in the first version's pack; every later one names it
    assert last.home("keep.md") == first.version and last.home("a.md") == last.version
    assert await _uploads(store) == {
        f"{first.version}.pack",
        f"{versions[-2].version}.pack",  # the replaced version's own: a reader may be on it
        f"{last.version}.pack",
    }
    current = await store.current("memories")
    assert current == last
    files = await store.read_files("memories", current, ["keep.md", "a.md"])
    assert files == {"keep.md": b"same", "a.md": b"3"}
    # a file dropped from the layout is pruned with the last version that uses it
    dropped = await store.commit("memories", last, {"a.md": b"3"})
    final = await store.commit("memories", dropped, {"a.md": b"4"})
    assert await _uploads(store) == {f"{last.version}.pack", f"{final.version}.pack"}


async def test_a_fresh_commit_reuses_no_upload_so_the_next_one_prunes_them_all(
    s3_server: S3Server,
) -> None:
    store = _store(s3_server)
    old = await store.commit("memories", None, {"keep.md": b"secret", "a.md": b"0"})
    fresh = await store.commit("memories", old, {"keep.md": b"secret", "a.md": b"0"}, fresh=True)
    assert fresh.homes == {}  # everything in its own pack
    last = await store.commit("memories", fresh, {"keep.md": b"secret", "a.md": b"1"})
    assert await _uploads(store) == {f"{fresh.version}.pack", f"{last.version}.pack"}


async def test_a_version_spread_over_too_many_packs_is_packed_again(s3_server: S3Server) -> None:
    store = _store(s3_server)
    files = {f"f{n}.md": b"0" for n in range(12)}
    version = await store.commit("memories", None, files)
    homes = []
    for n in range(12):  # each commit changes one more file: one more pack to read
        files = {**files, f"f{n}.md": b"1"}
        version = await store.commit("memories", version, files)
        homes.append(len({version.home(p) for p in version.files}))
    assert max(homes) == _PACKS_MAX and homes[-1] < _PACKS_MAX
    assert await store.read_files("memories", version, sorted(files)) == files


async def test_a_version_of_one_object_per_file_still_reads_and_moves_into_packs(
    s3_server: S3Server,
) -> None:
    from sandmem.memory._store_seam import MemoryVersion, sha256

    store = _store(s3_server)  # as versions were written before packs
    files = {"MEMORY.md": b"old\n", "skills/a/SKILL.md": b"skill\n"}
    for path, data in files.items():
        await store._put(store._key("memories", "versions", "0001-a", path), data)
    old = MemoryVersion("0001-a", {p: sha256(d) for p, d in files.items()})
    await store._put(store._key("memories", "CURRENT"), old.to_json())
    current = await store.current("memories")
    assert (
        current is not None and await store.read_files("memories", current, sorted(files)) == files
    )
    moved = await store.commit("memories", current, files)
    assert moved.homes == {} and set(moved.spans) == set(files)  # all in its own pack
    await store.commit("memories", moved, {**files, "MEMORY.md": b"new\n"})
    assert await _uploads(store) == {
        f"{moved.version}.pack",
        f"{(await store.current('memories')).version}.pack",
    }


async def test_a_file_that_does_not_match_its_digest_is_skipped(s3_server: S3Server) -> None:
    store = _store(s3_server)
    first = await store.commit("memories", None, {"MEMORY.md": b"good\n"})
    version = await store.commit("memories", first, {"MEMORY.md": b"good\n", "b.md": b"b\n"})
    await store._put(store._pack_key("memories", first.version), b"evil\n")
    files = await store.read_files("memories", version, ["MEMORY.md", "b.md"])
    assert files == {"b.md": b"b\n"}  # the tampered bytes are never used


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
    """Issue 25, class 4: an object larger than ``MAX_OBJECT_BYTES`` (a segment, a pack of
    memory files, a pending mark) is skipped and reported; the others are read."""
    from sandmem.distributed import _botocore

    store = _store(s3_server)
    await store.put_segment("sessions", "small", b'{"n": 1}\n')
    await store.put_segment("sessions", "huge", b'{"n": 2}\n' + b" " * 200)
    first = await store.commit("memories", None, {"MEMORY.md": b"ok"})
    # big.md alone in the second pack (MEMORY.md stays in the first)
    version = await store.commit("memories", first, {"MEMORY.md": b"ok", "big.md": b"x" * 300})
    monkeypatch.setattr(_botocore, "MAX_OBJECT_BYTES", 100)
    assert await store.segments("sessions") == {"small": [b'{"n": 1}\n']}
    files = await store.read_files("memories", version, ["MEMORY.md", "big.md"])
    assert files == {"MEMORY.md": b"ok"}


class _Replaying:
    """The store's client where every upload reaches the server twice and only the second
    answer comes back: what botocore's retry does when the first answer is lost (a read
    timeout), and what a connection's held request delivered late does. The server is real,
    so its conditional writes refuse the second delivery exactly as they would in service."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def put_object(self, **kwargs: Any) -> Any:
        self._client.put_object(**kwargs)  # applied; its answer is lost
        try:
            return self._client.put_object(**kwargs)
        except Exception:
            self.refused += 1
            raise


async def _replaying(store: S3MemoryStore) -> _Replaying:
    await store.warm()
    client = _Replaying(store._shared["client"])
    store._shared["client"] = client
    return client


async def test_a_conditional_write_refused_only_by_its_own_replay_succeeded(
    s3_server: S3Server,
) -> None:
    """The pending mark, a segment, the first version and the next: each is refused on its
    second delivery (its key already holds it), and each counts as written, once."""
    store = _store(s3_server)
    client = await _replaying(store)
    await store.mark_pending("memories", "sessions")
    await store.put_segment("sessions", "alpha", b'{"n": 1}\n')
    first = await store.commit("memories", None, {"MEMORY.md": b"one\n"})
    second = await store.commit("memories", first, {"MEMORY.md": b"two\n"})
    assert client.refused == 4  # every conditional write met its own replay
    assert len(await store.pending_marks("memories")) == 1
    assert await store.segments("sessions") == {"alpha": [b'{"n": 1}\n']}
    current = await store.current("memories")
    assert current is not None and current.version == second.version
    assert current.etag == second.etag  # the next commit's If-Match holds
    # the pack the replayed switch names was kept, not removed as a loser's upload
    assert await store.read_files("memories", current, ["MEMORY.md"]) == {"MEMORY.md": b"two\n"}
    third = await store.commit("memories", second, {"MEMORY.md": b"three\n"})
    assert (await store.current("memories")).version == third.version  # type: ignore[union-attr]


async def test_a_rivals_version_is_still_a_conflict_when_requests_are_replayed(
    s3_server: S3Server,
) -> None:
    """A refusal where the key holds other bytes is a rival's write: a conflict, as before."""
    store = _store(s3_server)
    first = await store.commit("memories", None, {"MEMORY.md": b"one\n"})
    rival = await store.commit("memories", first, {"MEMORY.md": b"rival\n"})
    await _replaying(store)
    with pytest.raises(MemoryStoreConflict):
        await store.commit("memories", first, {"MEMORY.md": b"late\n"})  # If-Match: first
    with pytest.raises(MemoryStoreConflict):
        await store.commit("memories", None, {"MEMORY.md": b"late\n"})  # If-None-Match: *
    await store.put_segment("sessions", "alpha", b'{"n": 1}\n', sequence="1-a")
    with pytest.raises(MemoryStoreConflict):  # the same key, other bytes
        await store.put_segment("sessions", "alpha", b'{"n": 2}\n', sequence="1-a")
    current = await store.current("memories")
    assert current is not None and current.version == rival.version
    assert await store.read_files("memories", current, ["MEMORY.md"]) == {"MEMORY.md": b"rival\n"}
    assert await store.segments("sessions") == {"alpha": [b'{"n": 1}\n']}
