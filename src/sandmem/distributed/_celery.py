"""Deferred memory generation on a Celery worker pool (Redis as the broker).

``CeleryScheduler`` is what a session's stop uses: after pushing its segments it enqueues one
job for the layout and returns, with no model request. ``worker_app`` builds the Celery app a
``sandmem worker`` process runs: each job takes the layout's lease, runs the same pipeline as
inline generation (``run_job``) and acknowledges the message only when done
(``acks_late``): a worker killed mid-job never acknowledges, the broker redelivers the job
after its visibility timeout, and another worker finishes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from sandmem._errors import UserError
from sandmem._extras import require
from sandmem.distributed._lease import LeaseBusy, LeaseLost, RedisLease
from sandmem.distributed._s3 import S3MemoryStore
from sandmem.memory.store._base import (
    GenerationScheduler,
    MemoryStore,
    MemoryStoreConflict,
    MemoryStoreError,
)

logger = logging.getLogger("sandmem.distributed")

TASK_NAME = "sandmem.generate_memory"
DEFAULT_QUEUE = "sandmem-memory"


def _app(broker_url: str, queue: str, visibility_timeout_s: float) -> Any:
    celery = require("celery")
    app = celery.Celery("sandmem", broker=broker_url)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=queue,
        broker_transport_options={"visibility_timeout": visibility_timeout_s},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_serializer="json",
        accept_content=["json"],
    )
    return app


class CeleryScheduler(GenerationScheduler):
    """Enqueue generation jobs on a Celery queue (``broker_url`` like ``redis://host:6379/0``).
    ``visibility_timeout_s`` is how long an unacknowledged job waits before the broker gives it
    to another worker; keep it above the longest job."""

    def __init__(
        self,
        broker_url: str,
        *,
        queue: str = DEFAULT_QUEUE,
        visibility_timeout_s: float = 3600.0,
    ) -> None:
        self.broker_url = broker_url
        self.queue = queue
        self.visibility_timeout_s = visibility_timeout_s
        self._celery: Any = None

    def __repr__(self) -> str:
        return f"CeleryScheduler({self.broker_url!r}, queue={self.queue!r})"

    async def enqueue(self, store: MemoryStore, paths: Any) -> None:
        if not isinstance(store, S3MemoryStore):
            raise UserError("CeleryScheduler needs the layout's store to be an S3MemoryStore")
        if self._celery is None:
            self._celery = _app(self.broker_url, self.queue, self.visibility_timeout_s)
        job = {
            "store": store.spec(),
            "memories_dir": paths.memories_dir,
            "sessions_dir": paths.sessions_dir,
            "enqueued_at": time.time(),
        }
        await asyncio.to_thread(self._celery.send_task, TASK_NAME, args=[job], queue=self.queue)


def _job_store(root: S3MemoryStore, spec: dict[str, Any]) -> S3MemoryStore:
    """The job's store, which must lie inside the worker's ``--store``."""
    prefix = str(spec.get("prefix") or "").strip("/")
    if spec.get("bucket") != root.bucket or not (
        not root.prefix or prefix == root.prefix or prefix.startswith(root.prefix + "/")
    ):
        raise UserError(f"job for s3://{spec.get('bucket')}/{prefix} is outside {root.describe()}")
    store = root.child("")
    store.prefix = prefix
    return store


async def run_one(
    root: S3MemoryStore,
    job: dict[str, Any],
    config: Any,
    *,
    redis_url: str,
    lease_ttl_s: float,
) -> dict[str, Any]:
    """Execute one job: lease, stage, generate, commit. Returns a short report."""
    from sandmem.memory.generation._job import run_job
    from sandmem.memory.layout import MemoryPaths

    store = _job_store(root, job["store"])
    paths = MemoryPaths(str(job["memories_dir"]), str(job["sessions_dir"]))
    name = f"{store.bucket}/{store.prefix}/{paths.memories_dir}"
    async with RedisLease(redis_url, name, ttl_s=lease_ttl_s, wait_s=lease_ttl_s) as lease:
        logger.info("job for %s: lease token %d", name, lease.token)
        report = await run_job(store, paths, config, lease=lease)
        logger.info("job for %s done: %s", name, report)
    return {
        "processed": list(report.processed),
        "failed": dict(report.failed),
        "phase_two": report.phase_two,
    }


def worker_app(
    broker_url: str,
    root: S3MemoryStore,
    config: Any,
    *,
    queue: str = DEFAULT_QUEUE,
    lease_ttl_s: float = 30.0,
    visibility_timeout_s: float = 3600.0,
) -> Any:
    """The Celery app of a ``sandmem worker`` process."""
    app = _app(broker_url, queue, visibility_timeout_s)
    # one event loop for every job of this process (the solo pool runs them one at a time):
    # the model client, its connections and the S3 client are made once, not per job
    loop = asyncio.Runner()

    @app.task(name=TASK_NAME, bind=True, max_retries=None)  # type: ignore[untyped-decorator]
    def generate_memory(task: Any, job: dict[str, Any]) -> dict[str, Any]:
        try:
            return loop.run(
                run_one(root, job, config, redis_url=broker_url, lease_ttl_s=lease_ttl_s)
            )
        except LeaseBusy as exc:
            raise task.retry(exc=exc, countdown=1) from None
        except (LeaseLost, MemoryStoreConflict) as exc:
            logger.warning("memory job will run again: %s", exc)
            raise task.retry(exc=exc, countdown=1) from None
        except MemoryStoreError as exc:
            if not exc.retryable:
                raise
            raise task.retry(exc=exc, countdown=5) from None

    return app
