"""The generation job: memory generated for one layout of a remote store.

The job stages the layout from the store into a workspace held in memory
(``InMemorySandboxSession``: the store is the truth, so nothing of a job is worth a file, an
fsync or a thread hop on the worker's disk), runs the ordinary two-phase pipeline on it
through the ``SandboxSession`` API like any workspace, and commits the result as a new
version (phase-one artifacts first, so a job that dies in phase two never extracts a rollout
version again). A commit that loses the race re-stages from the newer version, keeps its
phase-one artifacts, and runs phase two again: no update is lost, no rollout version
extracted twice.

Every file the pipeline reads back travels with the version, including the dot-file
``.consolidated_MEMORY.md`` (``MEMORY.md`` as the last consolidation left it): with it a
worker's consolidation sees a live edit as an edit, as a local one does. The journal's
backup and the lock stay behind (they only make sense inside one workspace).

The layout's pending marks seen at the start are removed once a job ran with nothing left to
retry, so the sweeper does not enqueue the layout again. ``record_job_failure`` puts a job's
permanent failure into the layout's ``generation_log.jsonl``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from sandmem.memory import _files
from sandmem.memory._store_seam import (
    MemoryStore,
    MemoryStoreConflict,
    MemoryVersion,
    checked_segments,
)
from sandmem.memory.generation.manager import MemoryGenerationManager
from sandmem.memory.layout import PHASE_ONE_DIRS
from sandmem.memory.state import log_line
from sandmem.memory.store._history_sync import MirrorNames, sync_history
from sandmem.memory.store._sync import _COMMIT_ATTEMPTS, Lease, read_current, walk_files
from sandmem.sandboxes._in_memory import InMemorySandboxClient

if TYPE_CHECKING:
    from sandmem.memory.config import MemoryGenerateConfig
    from sandmem.memory.generation.manager import FlushReport
    from sandmem.memory.layout import MemoryPaths
    from sandmem.sandboxes._session import SandboxSession

logger = logging.getLogger("sandmem.memory.store")


async def _stage(
    session: SandboxSession, store: MemoryStore, paths: MemoryPaths
) -> tuple[MemoryVersion | None, dict[str, bytes]]:
    """Write the layout's rollouts and the current version's files into the job's workspace;
    return that version and its files."""
    current, files = await read_current(store, paths.memories_dir)
    for name, data in files.items():
        await _files.write(session, f"{paths.memories_dir}/{name}", data)
    await _files.mkdir(session, paths.sessions_dir, parents=True)
    found = checked_segments(await store.segments(paths.sessions_dir), store.describe())
    for rollout_id, segments in found.items():
        await _files.write(session, paths.rollout_file(rollout_id), b"".join(segments))
    return current, files


async def run_job(
    store: MemoryStore,
    paths: MemoryPaths,
    config: MemoryGenerateConfig,
    *,
    lease: Lease | None = None,
    retry_failed: bool = False,
    seen_marks: list[str] | None = None,
) -> FlushReport:
    """Generate memory for one layout of ``store`` (see the module docstring). The pending
    marks the job saw are added to ``seen_marks`` (a caller that gives up on the job for good
    clears them, so no sweep runs it again for the same work)."""
    inline = config.model_copy(update={"schedule": "inline"})
    carry: dict[str, bytes] = {}
    await store.prefetch(paths.memories_dir)
    marks = await store.pending_marks(paths.memories_dir)
    if seen_marks is not None:
        seen_marks.extend(marks)
    for _ in range(_COMMIT_ATTEMPTS):
        job = _Job(store, paths, lease)
        try:
            report = await job.run(inline, carry, retry_failed)
            if marks and not (report.failed or report.deferred or report.timed_out):
                await store.clear_marks(paths.memories_dir, marks)
            return report
        except MemoryStoreConflict:
            carry.update(job.phase_one_files)
            logger.info("memory of %s moved during the job; running again", store.describe())
    raise MemoryStoreConflict(
        f"memory of {store.describe()} changed under the job {_COMMIT_ATTEMPTS} times; the "
        "job will run again"
    )


class _Job:
    """One attempt: stage, flush (committing phase one before phase two), commit."""

    def __init__(self, store: MemoryStore, paths: MemoryPaths, lease: Lease | None) -> None:
        self.store = store
        self.paths = paths
        self.lease = lease
        self.base: MemoryVersion | None = None
        self.committed: dict[str, bytes] = {}
        #: the phase-one artifacts last seen in the job's workspace (carried into a retry)
        self.phase_one_files: dict[str, bytes] = {}
        self._session: SandboxSession | None = None

    async def _collect(self) -> dict[str, bytes]:
        assert self._session is not None
        files = await walk_files(self._session, self.paths.memories_dir)
        baseline = self.paths.consolidated_memory_md
        data = await _files.read(self._session, baseline)
        if data is not None:
            files[baseline.rsplit("/", 1)[-1]] = data
        self.phase_one_files = {
            name: data for name, data in files.items() if name.startswith(PHASE_ONE_DIRS)
        }
        return files

    async def _commit(self) -> None:
        files = await self._collect()
        if files == self.committed:
            return
        if self.lease is not None:
            await self.lease.check()
        fence = self.lease.token if self.lease is not None else 0
        self.base = await self.store.commit(self.paths.memories_dir, self.base, files, fence=fence)
        self.committed = files

    async def run(
        self,
        config: MemoryGenerateConfig,
        carry: dict[str, bytes],
        retry_failed: bool,
    ) -> FlushReport:
        client = InMemorySandboxClient()
        session = await client.create()
        self._session = session
        try:
            await session.start()
            self.base, self.committed = await _stage(session, self.store, self.paths)
            mirror = MirrorNames()  # the history mirror is listed once a job
            await sync_history(session, self.paths, self.store, full=False, mirror=mirror)
            for name, data in carry.items():
                await _files.write(session, f"{self.paths.memories_dir}/{name}", data)
            manager = MemoryGenerationManager(session, self.paths, config)
            manager.after_phase_one = self._commit
            report = await manager.flush(retry_failed=retry_failed)
            await self._commit()
            await sync_history(session, self.paths, self.store, full=False, mirror=mirror)
            await session.stop()
        finally:
            self._session = None
            await client.delete(session)
        return report


async def record_job_failure(store: MemoryStore, paths: MemoryPaths, error: str) -> bool:
    """Append a failed-job record to the layout's ``generation_log.jsonl`` in the store (a new
    version); False when even that could not be written (the worker's log has it)."""
    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "phase": "job",
        "status": "failed",
        "error": error,
        "retryable": False,
    }
    line = log_line(record)
    name = paths.log_jsonl.rsplit("/", 1)[-1]
    for _ in range(_COMMIT_ATTEMPTS):
        try:
            current, files = await read_current(store, paths.memories_dir)
            files[name] = files.get(name, b"") + line
            await store.commit(
                paths.memories_dir, current, files, fence=current.fence if current else 0
            )
            return True
        except MemoryStoreConflict:
            continue
        except Exception:
            logger.exception("could not record the failed job in %s", store.describe())
            return False
    return False
