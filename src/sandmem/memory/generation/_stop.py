"""What happens to a layout's memory when its sandbox session stops — decided here only.

The one stop path, read top to bottom::

    on_stop(manager)
      ├── with a remote store, schedule "inline": push, run the generation job in the store,
      │     pull its result
      ├── with a remote store and a scheduler (deferred), all within its stop_timeout_s:
      │     pending record in the workspace → pending mark in the store → push → enqueue
      │     → the workspace record removed; past the bound or on an error the stop returns,
      │     and says the work waits for the next stop, run start or a worker's sweep
      ├── else, schedule "inline": flush in the workspace
      ├── else, schedule "explicit": nothing (the application calls sandmem.memory.generate)
      └── always, last: the stop-time redaction of every changed memory file

A layout that is only read gets the last step alone (``on_stop_read_only``).

It never raises: a failure is logged, and the session's snapshot and stop go on.
``check_schedule`` refuses, before a run's first model call, a schedule that cannot work
with the layout's store.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from sandmem._errors import UserError
from sandmem.memory import _files
from sandmem.memory._store_seam import MemoryStoreError
from sandmem.memory.generation._job import run_job
from sandmem.memory.store._history_sync import sync_history
from sandmem.memory.store._sync import pull, push_edits, push_segments

if TYPE_CHECKING:
    from sandmem.memory._store_seam import GenerationScheduler, MemoryStore
    from sandmem.memory.config import MemoryGenerateConfig
    from sandmem.memory.generation.manager import MemoryGenerationManager
    from sandmem.memory.layout import MemoryPaths
    from sandmem.redaction import Redactor
    from sandmem.sandboxes._session import SandboxSession

logger = logging.getLogger("sandmem.memory")


def check_schedule(config: MemoryGenerateConfig, store: MemoryStore | None) -> None:
    """Refuse a schedule the layout's store cannot serve (``UserError``)."""
    remote = store is not None and store.remote
    if config.schedule == "explicit" and remote:
        raise UserError(
            'MemoryGenerateConfig(schedule="explicit") generates in this workspace, '
            'but the layout\'s memory lives in a remote store: use "inline" (the '
            "stop generates in the store) or a scheduler (workers do)"
        )
    if config.schedule not in ("inline", "explicit") and not remote:
        raise UserError(
            "MemoryGenerateConfig(schedule=...) defers generation to workers on other "
            "hosts, which cannot see this workspace: give the layout a remote store, "
            "MemoryLayoutConfig(store=S3MemoryStore(...))"
        )


async def on_stop(manager: MemoryGenerationManager) -> None:
    """The session's stop for one layout (see the module docstring)."""
    try:
        if manager.store is not None:
            await _with_store(manager, manager.store)
        elif manager.config.schedule == "inline":
            await _flush(manager)
    finally:  # whatever generation did: no secret stays in a memory file
        try:
            await manager.redaction.run()
        except Exception:
            logger.exception("redacting %s at stop failed", manager.paths.memories_dir)


async def _with_store(manager: MemoryGenerationManager, store: MemoryStore) -> None:
    session, paths, config = manager.session, manager.paths, manager.config
    schedule = config.schedule
    if not isinstance(schedule, str):
        await defer(session, paths, store, schedule)
        return
    try:
        await push_segments(session, paths, store)
        await push_edits(session, paths, store)
        await sync_history(session, paths, store)  # this host's versions, for every host
        if schedule == "inline":  # "explicit" is refused by check_schedule
            report = await run_job(store, paths, config)
            logger.info("memory generated in the store: %s", report)
            await pull(session, paths, store)
    except Exception:
        logger.exception("memory push to %s failed", store.describe())


def _pending_record(paths: MemoryPaths) -> str:
    """The workspace's note that deferred work did not reach the store and the queue."""
    return f"{paths.memories_dir}/.store/pending"


async def defer(
    session: SandboxSession,
    paths: MemoryPaths,
    store: MemoryStore,
    schedule: GenerationScheduler,
) -> bool:
    """Hand the layout's new work to workers, within ``schedule.stop_timeout_s`` (a retryable
    store error is tried again while it lasts): True when it was enqueued. Otherwise the
    workspace keeps a pending record (the next stop or run start tries again) and, if the mark
    reached the store, a worker's sweep enqueues it."""
    record = _pending_record(paths)
    await _files.write(session, record, b"pending\n")

    failed: list[Exception] = []

    async def hand_over() -> None:
        # every step may be repeated: a segment keeps its key, a commit merges, one job per
        # layout; an error "later may work" is tried again while the bound lasts
        marked, wait_s = False, 0.2
        while True:
            try:
                if not marked:
                    await store.mark_pending(paths.memories_dir, paths.sessions_dir)
                    marked = True
                await push_segments(session, paths, store)
                await push_edits(session, paths, store)
                await schedule.enqueue(store, paths)
                return
            except MemoryStoreError as exc:
                if not exc.retryable:
                    raise
                failed.append(exc)
            await asyncio.sleep(wait_s)
            wait_s = min(2 * wait_s, 2.0)

    bound = schedule.stop_timeout_s
    try:
        await asyncio.wait_for(hand_over(), timeout=bound)
    except Exception as exc:
        reason = repr(exc)
        if isinstance(exc, TimeoutError):
            last = f"; last error {failed[-1]!r}" if failed else ""
            reason = f"no answer within {bound:g} s{last}"
        logger.warning(
            "memory of %s was not handed to the workers (%s): it waits for the next stop or "
            "run start of this workspace, or a worker's sweep if its pending mark reached %s",
            paths.memories_dir,
            reason,
            store.describe(),
        )
        return False
    await _files.remove(session, record)
    try:  # this host's versions (its runs' live edits), for every host; best effort
        await asyncio.wait_for(sync_history(session, paths, store), timeout=bound)
    except Exception as exc:
        logger.warning("memory history of %s not synced to the store: %r", paths.memories_dir, exc)
    return True


async def resume_pending(manager: MemoryGenerationManager) -> None:
    """At a run start: hand over the work an earlier stop could not (bounded like a stop)."""
    schedule, store = manager.config.schedule, manager.store
    if store is None or isinstance(schedule, str):
        return
    if await _files.exists(manager.session, _pending_record(manager.paths)):
        await defer(manager.session, manager.paths, store, schedule)


async def _flush(manager: MemoryGenerationManager) -> None:
    try:
        report = await manager.flush()
    except Exception:
        logger.exception("memory generation for %s failed", manager.paths.memories_dir)
        return
    if report.failed or report.phase_two in ("failed", "incomplete") or report.timed_out:
        logger.warning(
            "memory generation for %s incomplete: failed=%s phase_two=%s missing=%s timed_out=%s",
            manager.paths.memories_dir,
            report.failed,
            report.phase_two,
            report.phase_two_missing,
            report.timed_out,
        )


def on_stop_read_only(session: SandboxSession, memories_dir: str, redactor: Redactor) -> None:
    """A layout that is read but not generated: its stop does only the last step, the
    redaction of every changed memory file (registered once per session and directory)."""
    from sandmem.memory.generation._redact_pass import stop_redaction

    stop_redaction(session, memories_dir, redactor)
