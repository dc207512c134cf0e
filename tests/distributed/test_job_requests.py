"""What a generation job asks of the S3 store, on a real S3-compatible server: one upload per
commit whatever the number of memory files, one download per pack when it reads a version,
one listing of the memories dir for its pending marks, history mirror and first prune. Each
request is CPU on the worker and on the server (figure 9 of BENCHMARKS.md), so the counts are
the contract."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

import pytest
from services import S3Server
from test_store_sessions import _EXTRACTIVE

from sandmem.distributed import S3MemoryStore
from sandmem.memory.generation._job import run_job
from sandmem.memory.layout import MemoryPaths

PATHS = MemoryPaths("memories", "sessions")


def _segment(rollout_id: str) -> bytes:
    line = {
        "updated_at": "2026-12-01T00:00:00.000Z",
        "rollout_id": rollout_id,
        "input": [{"role": "user", "content": f"Run the tests of {rollout_id}."}],
        "generated_items": [{"role": "assistant", "content": f"The tests of {rollout_id} pass."}],
        "final_output": f"The tests of {rollout_id} pass.",
        "terminal_metadata": {"terminal_state": "completed", "has_final_output": True},
    }
    return (json.dumps(line) + "\n").encode()


def _kind(method: str, key: str) -> str:
    """A request as ``method part``: which part of the layout it touched."""
    parts = key.split("/")  # <prefix>/<sessions or memories>/...
    where = "/".join(parts[1:3]) if parts[1:2] == ["memories"] else parts[1]
    return f"{method} {where}"


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    seen: Counter[str] = Counter()
    original = S3MemoryStore._request

    async def counted(
        self: S3MemoryStore, method: str, kwargs: dict[str, Any], read: bool = False
    ) -> Any:
        seen[_kind(method, str(kwargs.get("Key") or kwargs.get("Prefix") or ""))] += 1
        return await original(self, method, kwargs, read)

    monkeypatch.setattr(S3MemoryStore, "_request", counted)
    return seen


async def test_a_job_uploads_one_pack_per_commit_and_reads_one_per_pack(
    s3_server: S3Server, requests: Counter[str]
) -> None:
    store = S3MemoryStore(s3_server.bucket, f"req-{uuid.uuid4().hex[:8]}", s3_server.endpoint_url)
    for index in range(6):
        await store.put_segment("sessions", f"r{index}", _segment(f"r{index}"))
    requests.clear()
    await run_job(store, PATHS, _EXTRACTIVE)
    # phase one's commit, then phase two's: 6 raw memories, 6 summaries, MEMORY.md, ... in two
    assert requests["put_object memories/versions"] == 2
    assert requests["put_object memories/CURRENT"] == 2
    assert requests["get_object sessions"] == 6  # one per pushed segment
    # one listing of the memories dir answers the pending marks, the history mirror and the
    # prune of the second commit (the first has nothing to prune); one of the segments
    listed = {k: n for k, n in requests.items() if k.startswith("list_objects_v2")}
    assert listed == {"list_objects_v2 memories/": 1, "list_objects_v2 sessions": 1}
    current = await store.current("memories")
    assert current is not None and len(current.files) > 12

    await store.put_segment("sessions", "r6", _segment("r6"))
    requests.clear()
    await run_job(store, PATHS, _EXTRACTIVE)
    # the version the job starts from lies in two packs: two downloads, not one per file
    assert requests["get_object memories/versions"] == 2
    assert requests["put_object memories/versions"] == 2
    # both commits prune: the first from the job's one listing, the second lists again
    assert requests["list_objects_v2 memories/versions"] == 1
    assert requests["list_objects_v2 memories/"] == 1
