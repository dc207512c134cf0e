"""``Worker``: the ``sandmem worker`` process — up to ``concurrency`` jobs at once on one event
loop, a sweeper, and the retry policy.

Each job takes its layout's lease (``RedisLease``: the lease serialises one layout, so jobs of
different layouts run side by side), runs the same pipeline as inline generation
(``memory.generation._job.run_job``) and is acknowledged only when done. While it runs, the
worker pushes its deadline on every third of the visibility timeout; a worker that dies or
freezes stops doing so and the queue's tick hands the job to another worker.

What happens to a job that raises::

    LeaseBusy                  another worker has the layout: again in 1 s (not an attempt)
    LeaseLost, a conflict      again in 1 s, counted as an attempt
    retryable (network, timeouts, 5xx, throttling, broker errors)
                               again after base * 2**attempt seconds (capped, with jitter),
                               up to max_attempts; then failed for good
    permanent (other 4xx, a job outside --store, a bad job)
                               failed once: logged, written to the layout's
                               generation_log.jsonl, moved to the dead-letter list

A queue entry that is not a job (``parse_job``) is logged and moved to the dead-letter list;
the worker goes on. The **sweeper** (one worker per interval, at start and every
``sweep_interval_s``) lists the pending marks under ``--store`` and enqueues each layout
whose oldest mark is older than the interval and that has no job waiting, running or due for
a retry: work whose enqueue was lost (a broker down at the stop, a broker restarted empty)
runs without waiting for another stop, and a job's own marks are not run twice.

**Stopping** (``stop`` set: SIGTERM, the first Ctrl-C) takes no new job and is bounded: the
running jobs get ``stop_grace_s`` (default 10 s) to finish and be acknowledged; any still
running then is cancelled and its message put back on the queue at once, not counted as an
attempt (another worker runs it from the start: jobs are idempotent; its layout's lease, if a
cancelled release did not reach Redis, expires after its TTL). The chores (tick, heartbeat,
sweep) are cancelled and not waited for past ``_SETTLE_S`` (a store or broker call in a thread
cannot be interrupted; it is abandoned), nor is anything waited for behind such a thread. A
message that cannot be put back (the broker away) is redelivered by the queue's tick once its
visibility timeout passes, as when a worker dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from typing import Any

from sandmem._errors import UserError
from sandmem.distributed._jobs import JobMessage, PoisonMessage, StoreSpec, mark_job, parse_job
from sandmem.distributed._lease import LeaseBusy, LeaseLost, RedisLease, lease_client
from sandmem.distributed._queue import RedisQueue
from sandmem.distributed._s3 import S3MemoryStore
from sandmem.memory._store_seam import MemoryStoreConflict, MemoryStoreError
from sandmem.redaction import redact

logger = logging.getLogger("sandmem.distributed")

#: how long a stopping worker waits for its cancelled jobs to put their messages back and for
#: its cancelled chores, each (a store or broker call in a thread cannot be interrupted)
_SETTLE_S = 2.0


def job_store(root: S3MemoryStore, job: JobMessage) -> S3MemoryStore:
    """The job's store, which must lie inside the worker's ``--store`` (else ``UserError``)."""
    prefix = job.store.prefix.strip("/")
    inside = not root.prefix or prefix == root.prefix or prefix.startswith(root.prefix + "/")
    if job.store.bucket != root.bucket or not inside:
        raise UserError(f"job for s3://{job.store.bucket}/{prefix} is outside {root.describe()}")
    store = root.child("")
    store.prefix = prefix
    return store


def is_retryable(exc: BaseException) -> bool:
    """The retry rule for a job's error (see the module docstring)."""
    if isinstance(exc, MemoryStoreError):
        return exc.retryable
    if isinstance(exc, UserError | ValueError | TypeError | KeyError):
        return False
    return True  # network and broker errors, timeouts, a pruned version read mid-job


class Worker:
    """Runs jobs from ``queue`` for layouts under ``root`` with the memory ``config``."""

    def __init__(
        self,
        queue: RedisQueue,
        root: S3MemoryStore,
        config: Any,
        *,
        concurrency: int = 1,
        lease_ttl_s: float = 30.0,
        sweep_interval_s: float = 300.0,
        max_attempts: int = 8,
        retry_base_s: float = 2.0,
        retry_cap_s: float = 300.0,
        stop_grace_s: float = 10.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.queue = queue
        self.root = root
        self.config = config
        self.concurrency = concurrency
        self.lease_ttl_s = lease_ttl_s
        self.sweep_interval_s = sweep_interval_s
        self.max_attempts = max_attempts
        self.retry_base_s = retry_base_s
        self.retry_cap_s = retry_cap_s
        #: how long a stop lets running jobs finish before they are put back on the queue
        self.stop_grace_s = stop_grace_s
        #: message ids of the jobs running in this process (their deadlines are renewed)
        self.running: set[str] = set()
        #: jobs settled (acknowledged, retried or failed), and jobs a stop put back
        self.done = 0
        self.put_back = 0
        self._warm = False
        #: one pooled synchronous Redis client for every lease this worker takes
        self._leases: Any = None

    # -- start ------------------------------------------------------------------------------

    async def warm(self) -> None:
        """Import the pipeline, make the model and S3 clients and open connections before the
        first job, so it costs what every later one does."""
        if self._warm:
            return
        import sandmem.memory.generation._job
        import sandmem.memory.generation.manager
        import sandmem.memory.generation.phase_one
        import sandmem.memory.generation.phase_two  # noqa: F401

        await self.queue.client().ping()
        await asyncio.to_thread(self._lease_client().ping)
        try:
            await self.root.warm()
        except MemoryStoreError as exc:  # jobs will say so too; the worker still serves
            logger.warning("memory store %s: %s", self.root.describe(), exc)
        from sandmem.models._provider import OpenAIProvider, default_provider

        for name in (self.config.phase_one_model, self.config.phase_two_model):
            if isinstance(name, str) and name != "extractive":
                provider = self.config.model_provider or default_provider()
                provider.get_model(name)
                if isinstance(provider, OpenAIProvider):
                    await provider.client()
        self._warm = True

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Take and run jobs until ``stop`` is set (forever without one)."""
        stop = stop or asyncio.Event()
        await self.warm()
        slots = asyncio.Semaphore(self.concurrency)
        jobs: set[asyncio.Task[None]] = set()
        chores = [
            asyncio.create_task(self._every(self.queue.tick_interval_s, self.queue.tick)),
            asyncio.create_task(self._every(self.queue.visibility_timeout_s / 3, self._beat)),
            asyncio.create_task(self._every(self.sweep_interval_s, self.sweep, first=0.0)),
        ]
        idle = 0.05
        claimed_by: dict[asyncio.Task[None], tuple[str, bytes]] = {}
        try:
            while not stop.is_set():
                if not await _acquire(slots, stop):
                    break
                try:
                    claimed = await self.queue.claim()
                except Exception as exc:  # the broker is away: wait, then try again
                    slots.release()
                    logger.warning("cannot take a job from %r: %s", self.queue, exc)
                    await _wait(stop, 1.0)
                    continue
                if claimed is None:
                    slots.release()
                    await _wait(stop, idle)
                    idle = min(0.5, idle * 2)
                    continue
                idle = 0.05
                task = asyncio.create_task(self._handle(*claimed))
                jobs.add(task)
                claimed_by[task] = claimed
                task.add_done_callback(jobs.discard)
                task.add_done_callback(lambda t: claimed_by.pop(t, None))
                task.add_done_callback(lambda _t: slots.release())
        finally:
            for chore in chores:
                chore.cancel()
            await self._wind_down(jobs, claimed_by)
            await asyncio.wait(chores, timeout=_SETTLE_S)
            if self._leases is not None:
                leases, self._leases = self._leases, None
                with contextlib.suppress(Exception):
                    leases.close()  # closes sockets; never queued behind an abandoned thread

    async def _wind_down(
        self, jobs: set[asyncio.Task[None]], claimed_by: dict[asyncio.Task[None], tuple[str, bytes]]
    ) -> None:
        """Let the running jobs finish within ``stop_grace_s``; cancel the rest and put their
        messages back on the queue (within ``_SETTLE_S``)."""
        if jobs:
            await asyncio.wait(set(jobs), timeout=self.stop_grace_s)
        late = {task: claimed_by[task] for task in jobs if task in claimed_by}
        if not late:
            return
        for task in late:
            task.cancel()
        await asyncio.wait(late, timeout=_SETTLE_S)

        async def put_back(message_id: str, raw: bytes) -> None:
            try:
                await self.queue.retry_later(message_id, 0.0, raw)
                self.put_back += 1
                logger.warning("job %s put back on the queue: the worker is stopping", message_id)
            except Exception as exc:  # the tick redelivers it after the visibility timeout
                logger.warning("job %s not put back (%s): redelivered later", message_id, exc)

        returns = [asyncio.create_task(put_back(*claimed)) for claimed in late.values()]
        _, pending = await asyncio.wait(returns, timeout=_SETTLE_S)
        for task in pending:
            task.cancel()

    async def _every(self, interval_s: float, fn: Any, first: float | None = None) -> None:
        await asyncio.sleep(interval_s if first is None else first)
        while True:
            try:
                await fn()
            except Exception as exc:
                logger.warning("worker chore %s failed: %s", getattr(fn, "__name__", fn), exc)
            await asyncio.sleep(interval_s)

    def _lease_client(self) -> Any:
        if self._leases is None:
            self._leases = lease_client(self.queue.url)
        return self._leases

    async def _beat(self) -> None:
        await self.queue.heartbeat(sorted(self.running))

    # -- one job ----------------------------------------------------------------------------

    async def _handle(self, message_id: str, raw: bytes) -> None:
        self.running.add(message_id)
        try:
            await self._handle_inner(message_id, raw)
            self.done += 1
        except Exception:  # a broker error while settling: the tick redelivers the message
            logger.exception("could not settle job %s", message_id)
            self.done += 1
        finally:  # cancelled by a stop: put back on the queue by ``_wind_down``
            self.running.discard(message_id)

    async def _handle_inner(self, message_id: str, raw: bytes) -> None:
        try:
            job = parse_job(raw)
            store = job_store(self.root, job)
        except UserError as exc:
            kind = "poison message" if isinstance(exc, PoisonMessage) else "refused job"
            reason = redact(str(exc))
            logger.error("%s %s moved to the dead-letter list: %s", kind, message_id, reason)
            await self.queue.dead_letter(message_id, raw, reason)
            return
        marks: list[str] = []  # the layout's pending marks the job saw
        try:
            await self._run_one(store, job, marks)
        except LeaseBusy:
            await self.queue.retry_later(message_id, 1.0, raw)
        except (LeaseLost, MemoryStoreConflict) as exc:
            await self._retry_or_fail(message_id, job, store, exc, delay_s=1.0)
        except Exception as exc:
            if is_retryable(exc):
                await self._retry_or_fail(message_id, job, store, exc)
            else:
                await self._fail(message_id, job, store, exc, marks=marks)
        else:
            await self.queue.ack(message_id)

    async def _run_one(self, store: S3MemoryStore, job: JobMessage, marks: list[str]) -> None:
        from sandmem.memory.generation._job import run_job
        from sandmem.memory.layout import MemoryPaths

        paths = MemoryPaths(job.memories_dir, job.sessions_dir)
        ttl = self.lease_ttl_s
        lease = RedisLease(
            self.queue.url, job.layout, ttl_s=ttl, wait_s=0.0, client=self._lease_client()
        )
        async with lease:
            logger.info("job for %s: lease token %d", job.layout, lease.token)
            report = await run_job(store, paths, self.config, lease=lease, seen_marks=marks)
            logger.info("job for %s done: %s", job.layout, report)

    async def _retry_or_fail(
        self,
        message_id: str,
        job: JobMessage,
        store: S3MemoryStore,
        exc: BaseException,
        delay_s: float | None = None,
    ) -> None:
        attempt = job.attempt + 1
        if attempt >= self.max_attempts:
            await self._fail(message_id, job, store, exc, f"after {attempt} attempts: ")
            return
        if delay_s is None:
            delay_s = min(self.retry_cap_s, self.retry_base_s * 2**job.attempt)
            delay_s *= random.uniform(0.8, 1.2)
        logger.warning(
            "job for %s will run again in %.1f s (attempt %d of %d): %s",
            job.layout,
            delay_s,
            attempt,
            self.max_attempts,
            exc,
        )
        retry = job.model_copy(update={"attempt": attempt})
        await self.queue.retry_later(message_id, delay_s, retry.encode())

    async def _fail(
        self,
        message_id: str,
        job: JobMessage,
        store: S3MemoryStore,
        exc: BaseException,
        how: str = "",
        marks: list[str] | None = None,
    ) -> None:
        """Fail the job for good: logged, written to the layout's log, dead-lettered. With
        ``marks`` (a permanent error) the pending marks it saw are cleared, so no sweep runs
        the same work again; without (retries ran out) they stay, and a later sweep tries the
        layout again once its interval has passed."""
        from sandmem.memory.generation._job import record_job_failure
        from sandmem.memory.layout import MemoryPaths

        # a model server's error text may echo a key: redacted before it is logged or kept
        error = redact(f"{how}{type(exc).__name__}: {exc}")
        logger.error("job for %s failed for good, %s", job.layout, error)
        paths = MemoryPaths(job.memories_dir, job.sessions_dir)
        with contextlib.suppress(Exception):
            await record_job_failure(store, paths, error)
        if marks:
            with contextlib.suppress(Exception):
                await store.clear_marks(paths.memories_dir, marks)
        await self.queue.dead_letter(message_id, job.encode(), error)

    # -- the sweeper ------------------------------------------------------------------------

    async def sweep(self) -> int:
        """Enqueue every layout under ``--store`` whose oldest pending mark is older than the
        sweep interval and that has no job queued, running or delayed; return how many were
        enqueued (0 when another worker swept)."""
        if not await self.queue.take_sweep(self.sweep_interval_s):
            return 0
        spec = StoreSpec.model_validate(self.root.spec())
        oldest: dict[str, tuple[float, JobMessage]] = {}
        for key, age, body in await self.root.find_pending():
            try:
                job = mark_job(spec, body)
                job_store(self.root, job)
            except UserError as exc:
                logger.warning("pending mark %s ignored: %s", key, exc)
                continue
            if age > oldest.get(job.layout_id, (-1.0, job))[0]:
                oldest[job.layout_id] = (age, job)
        enqueued = 0
        for age, job in oldest.values():
            if age >= self.sweep_interval_s and await self.queue.enqueue(
                job.layout_id, job.encode(), unless_busy=True
            ):
                logger.info("sweeper: enqueued %s (pending for %.0f s)", job.layout, age)
                enqueued += 1
        return enqueued


async def _acquire(slots: asyncio.Semaphore, stop: asyncio.Event) -> bool:
    """Take a job slot, or give up when ``stop`` is set first (False)."""
    if stop.is_set():
        return False
    take = asyncio.ensure_future(slots.acquire())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({take, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not take.done():
        take.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await take
    if take.done() and not take.cancelled():
        if stop.is_set():
            slots.release()
            return False
        return True
    return False


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
