"""The sweeper's enqueue (``unless_busy``) on the suite's real Redis: it adds no job for a
layout that has one waiting, running or due for a retry (a job clears the marks it saw: a
second job of the same marks would run the same work twice, and a permanent error would be
written to the layout's log twice), while a stop's enqueue still queues new work behind a
running job."""

from __future__ import annotations

import uuid

from services import RedisServer

from sandmem.distributed._queue import RedisQueue

ONE, OTHER = "5f0c1d2e3a4b6978", "5f0c1d2e3a4b6979"  # layout ids (16 hex digits)


async def test_the_sweeper_adds_no_job_for_a_layout_that_has_one(
    redis_server: RedisServer,
) -> None:
    queue = RedisQueue(redis_server.url, f"sweep-{uuid.uuid4().hex[:8]}")
    try:
        assert await queue.enqueue(ONE, b"a", unless_busy=True)  # nothing there yet
        assert not await queue.enqueue(ONE, b"b", unless_busy=True)  # one waiting
        claimed = await queue.claim()
        assert claimed is not None and claimed[1] == b"a"
        running_id = claimed[0]
        assert not await queue.enqueue(ONE, b"c", unless_busy=True)  # one running
        assert await queue.enqueue(OTHER, b"d", unless_busy=True)  # another layout: not held
        assert await queue.enqueue(ONE, b"e")  # a stop's new work: queued behind it
        waiting = await queue.claim()
        assert waiting is not None and waiting[1] == b"d"
        waiting = await queue.claim()
        assert waiting is not None and waiting[1] == b"e"
        await queue.ack(waiting[0])
        await queue.retry_later(running_id, 600.0, b"a again")
        assert not await queue.enqueue(ONE, b"f", unless_busy=True)  # due for a retry
        await queue.dead_letter(running_id, b"a again", "failed for good")
        assert await queue.enqueue(ONE, b"g", unless_busy=True)  # none left: swept
    finally:
        await queue.client().delete(*queue.keys.values(), queue.dead_key)
        await queue.aclose()
