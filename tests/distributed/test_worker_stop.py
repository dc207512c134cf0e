"""A stopping worker is bounded (issue 39: every long-running command stops on the first
Ctrl-C): running jobs get ``stop_grace_s`` to finish; one still running then is cancelled and
its message put back on the queue at once, so another worker runs it; a job that finishes in
time is acknowledged as usual. Against the suite's real Redis and S3 servers."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from services import RedisServer, S3Server

from sandmem.distributed._jobs import JobMessage
from sandmem.distributed._queue import RedisQueue
from sandmem.distributed._s3 import S3MemoryStore
from sandmem.distributed._worker import Worker
from sandmem.memory import MemoryGenerateConfig

#: a guard against a hang, far above the bound under test (never a timing assertion)
HANG_GUARD_S = 60.0


class _Scripted(Worker):
    """A worker whose job body is ``job_s`` seconds of waiting (``None``: forever)."""

    job_s: float | None = None
    started: asyncio.Event

    async def _run_one(self, store: S3MemoryStore, job: JobMessage, marks: list[str]) -> None:
        self.started.set()
        await asyncio.sleep(3600 if self.job_s is None else self.job_s)


async def _setup(
    redis_server: RedisServer, s3_server: S3Server, job_s: float | None, grace_s: float
) -> tuple[_Scripted, RedisQueue, bytes]:
    name = f"stop-{uuid.uuid4().hex[:8]}"
    queue = RedisQueue(redis_server.url, name, visibility_timeout_s=600.0)
    root = S3MemoryStore.from_url(
        f"s3://{s3_server.bucket}/{name}", endpoint_url=s3_server.endpoint_url
    )
    config = MemoryGenerateConfig(phase_one_model="extractive", phase_two_model="extractive")
    worker = _Scripted(queue, root, config, concurrency=1, stop_grace_s=grace_s)
    worker.job_s = job_s
    worker.started = asyncio.Event()
    body = json.dumps(
        {
            "store": {"bucket": s3_server.bucket, "prefix": name},
            "memories_dir": "m",
            "sessions_dir": "s",
        }
    ).encode()
    assert await queue.enqueue("layout-1", body)
    return worker, queue, body


async def _stop_while_running(worker: _Scripted) -> None:
    stop = asyncio.Event()
    run = asyncio.create_task(worker.run(stop))
    started = worker.started
    await asyncio.wait_for(started.wait(), HANG_GUARD_S)
    stop.set()
    await asyncio.wait_for(run, HANG_GUARD_S)


async def _next(queue: RedisQueue) -> Any:
    fresh = RedisQueue(queue.url, queue.name)
    try:
        await fresh.tick()  # what every worker's tick does: due retries become ready
        return await fresh.claim()
    finally:
        await fresh.aclose()


@pytest.mark.parametrize("job_s", [None, 30.0], ids=["never-ends", "outlasts-grace"])
async def test_a_job_past_the_grace_goes_back_on_the_queue(
    redis_server: RedisServer, s3_server: S3Server, job_s: float | None
) -> None:
    worker, queue, body = await _setup(redis_server, s3_server, job_s, grace_s=0.2)
    await _stop_while_running(worker)
    assert worker.put_back == 1 and worker.done == 0 and not worker.running
    claimed = await _next(queue)  # due now, not after the 600 s visibility timeout
    assert claimed is not None and claimed[1] == body
    await queue.aclose()


async def test_a_job_within_the_grace_finishes_and_is_acknowledged(
    redis_server: RedisServer, s3_server: S3Server
) -> None:
    worker, queue, _ = await _setup(redis_server, s3_server, 0.3, grace_s=HANG_GUARD_S)
    await _stop_while_running(worker)
    assert worker.done == 1 and worker.put_back == 0
    assert await _next(queue) is None
    await queue.aclose()
