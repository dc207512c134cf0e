"""``RedisScheduler``: what a session's stop uses to defer generation to ``sandmem worker``.

After the stop pushed its segments, ``enqueue`` adds one job for the layout to the Redis queue
(``RedisQueue``; one waiting job per layout) and returns, with no model request. The Redis
calls are bounded by ``connect_timeout_s`` and ``socket_timeout_s``; the whole deferred stop
(pending mark, push, enqueue) by ``stop_timeout_s``, after which the stop returns and the work
waits for the next stop, run start or a worker's sweep (``memory/generation/_stop.py``).
"""

from __future__ import annotations

import time
from typing import Any

from sandmem._errors import UserError
from sandmem.distributed._jobs import JobMessage
from sandmem.distributed._queue import DEFAULT_QUEUE, RedisQueue, redact_url
from sandmem.distributed._s3 import S3MemoryStore
from sandmem.memory._store_seam import GenerationScheduler, MemoryStore


class RedisScheduler(GenerationScheduler):
    """Enqueue generation jobs on the Redis queue ``queue`` at ``broker_url``
    (``redis://[user:password@]host:6379/0``, or ``rediss://`` for TLS)."""

    def __init__(
        self,
        broker_url: str,
        *,
        queue: str = DEFAULT_QUEUE,
        stop_timeout_s: float = 10.0,
        connect_timeout_s: float = 3.0,
        socket_timeout_s: float = 5.0,
        visibility_timeout_s: float | None = None,
    ) -> None:
        # visibility_timeout_s is the workers' setting (``sandmem worker --visibility-timeout``);
        # accepted here for code written for the earlier CeleryScheduler
        del visibility_timeout_s
        self.broker_url = broker_url
        self.queue = queue
        self.stop_timeout_s = stop_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.socket_timeout_s = socket_timeout_s

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact_url(self.broker_url)!r}, queue={self.queue!r})"

    async def enqueue(self, store: MemoryStore, paths: Any) -> None:
        if not isinstance(store, S3MemoryStore):
            raise UserError(
                f"{type(self).__name__} needs the layout's store to be an S3MemoryStore"
            )
        job = JobMessage.model_validate(
            {
                "store": store.spec(),
                "memories_dir": paths.memories_dir,
                "sessions_dir": paths.sessions_dir,
                "enqueued_at": time.time(),
            }
        )
        # a connection per stop: a stop runs on whatever event loop its session has, and a
        # client bound to one loop cannot serve another
        queue = RedisQueue(
            self.broker_url,
            self.queue,
            connect_timeout_s=self.connect_timeout_s,
            socket_timeout_s=self.socket_timeout_s,
        )
        try:
            await queue.enqueue(job.layout_id, job.encode())
        finally:
            await queue.aclose()


#: the earlier name (the queue was Celery's); the same scheduler
CeleryScheduler = RedisScheduler
