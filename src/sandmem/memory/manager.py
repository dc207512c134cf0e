"""The generation manager: one per (sandbox session, layout), owned by the session.

It appends run segments to rollout files, and when the session stops (a pre-stop hook) it
flushes: phase one for every pending rollout with bounded concurrency, then phase two once.
A rollout is pending until its raw memory records its last ``updated_at`` and segment count,
so a failed extraction is retried at the next flush (up to ``max_attempts`` for one version
of the rollout). Everything runs under the layout's cross-process lock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sandmem import tracing
from sandmem._errors import UserError
from sandmem._usage import Usage
from sandmem.memory import _trace, phase_one, phase_two
from sandmem.memory._store import MemoryStore
from sandmem.memory.config import MemoryGenerateConfig
from sandmem.memory.rollouts import segment_line, utc_now
from sandmem.memory.storage import (
    MemoryPaths,
    RolloutFingerprint,
    append_log,
    bound_rollout,
    ensure_layout,
    fingerprint,
    load_state,
    sweep_write_temps,
    write_json,
)
from sandmem.models._base import ModelProvider
from sandmem.redaction import Redactor
from sandmem.sandboxes._paths import no_symlinks
from sandmem.sandboxes._session import SandboxSession

logger = logging.getLogger("sandmem.memory")

LOCK_TIMEOUT_S = 60.0
#: rollout files read at once when looking for pending rollouts
_PENDING_BATCH = 32
#: during phase one the state file is rewritten at most this often (and once at the end)
STATE_WRITE_INTERVAL_S = 1.0


@dataclass
class FlushReport:
    """What one flush did. ``failed`` maps rollout ids to their error; ``pending`` lists the
    rollouts still waiting (failed, not reached before the timeout, or locked out)."""

    processed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)
    phase_two: str = "not_run"  # done | skipped | failed | not_run
    phase_two_error: str | None = None
    phase_one_usage: Usage = field(default_factory=Usage)
    phase_two_usage: Usage = field(default_factory=Usage)
    timed_out: bool = False


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _check_conflicts(paths: MemoryPaths, others: list[MemoryPaths]) -> None:
    if _overlaps(paths.memories_dir, paths.sessions_dir):
        raise UserError(
            f"memories_dir {paths.memories_dir!r} and sessions_dir {paths.sessions_dir!r} "
            "overlap; use separate directories"
        )
    for other in others:
        pairs = [
            (a, b)
            for a in (paths.memories_dir, paths.sessions_dir)
            for b in (other.memories_dir, other.sessions_dir)
        ]
        clash = next(((a, b) for a, b in pairs if _overlaps(a, b)), None)
        if clash is not None:
            raise UserError(
                f"memory layout ({paths.memories_dir}, {paths.sessions_dir}) conflicts with "
                f"layout ({other.memories_dir}, {other.sessions_dir}) in this sandbox session: "
                f"{clash[0]!r} and {clash[1]!r} share or nest directories. Use fully different "
                "directories, or the same layout for agents that should share memory."
            )


def get_manager(
    session: SandboxSession,
    paths: MemoryPaths,
    config: MemoryGenerateConfig,
    store: MemoryStore | None = None,
) -> MemoryGenerationManager:
    """The session's manager for ``paths``, created (and registered as a pre-stop hook) on
    first use. Raises ``UserError`` for layouts that conflict with one already in use."""
    managers: dict[MemoryPaths, MemoryGenerationManager] = session._memory_managers
    existing = managers.get(paths)
    if existing is not None:
        if existing.config.comparable() != config.comparable():
            raise UserError(
                f"layout ({paths.memories_dir}, {paths.sessions_dir}) is already used in this "
                "sandbox session with a different MemoryGenerateConfig; agents sharing a layout "
                "must share its generate config"
            )
        return existing
    _check_conflicts(paths, list(managers))
    manager = MemoryGenerationManager(session, paths, config, store=store)
    managers[paths] = manager
    return manager


class MemoryGenerationManager:
    """Records rollouts and generates memory for one layout of one sandbox session."""

    def __init__(
        self,
        session: SandboxSession,
        paths: MemoryPaths,
        config: MemoryGenerateConfig,
        *,
        store: MemoryStore | None = None,
    ) -> None:
        self.session = session
        self.paths = paths
        self.config = config
        #: a remote store: the stop pushes to it and generates there (or defers to workers)
        self.store = store if store is not None and store.remote else None
        #: called after phase one wrote its artifacts, before phase two (the store job
        #: commits them there, so a job that dies in phase two never extracts them again)
        self.after_phase_one: Callable[[], Awaitable[None]] | None = None
        self.redactor = Redactor(config.redact_patterns)
        self._flush_lock = asyncio.Lock()
        self._state_lock = asyncio.Lock()
        self._state_written_at = 0.0
        self._layout_ready = False
        session.register_pre_stop_hook(self._on_stop)

    async def prepare(self) -> None:
        if not self._layout_ready:
            await ensure_layout(self.session, self.paths)
            self._layout_ready = True

    async def record(self, segment: dict[str, Any]) -> None:
        """Append one run segment (redacted) to its rollout file: append only, under the
        sessions lock so concurrent writers never interleave."""
        with no_symlinks():  # never through a symlink planted under sessions/ or memories/
            await self.prepare()
            line = segment_line(self.redactor.redact_obj(segment))
            lock = f"{self.paths.sessions_dir}/.lock"
            async with self.session.lock(lock, timeout=LOCK_TIMEOUT_S):
                await self.session.append(self.paths.rollout_file(segment["rollout_id"]), line)

    def detach_stop_hook(self) -> None:
        """Do not flush when the session stops (for callers that flush explicitly, such as
        ``sandmem memory generate``)."""
        self.session.unregister_pre_stop_hook(self._on_stop)

    async def _on_stop(self) -> None:
        if self.store is not None:
            from sandmem.memory._store_sync import stop_with_store

            try:
                await stop_with_store(self, self.store)
            except Exception:
                logger.exception("memory push to %s failed", self.store.describe())
            return
        try:
            report = await self.flush()
        except Exception:
            logger.exception("memory generation for %s failed", self.paths.memories_dir)
            return
        if report.failed or report.phase_two == "failed" or report.timed_out:
            logger.warning(
                "memory generation for %s incomplete: failed=%s phase_two=%s timed_out=%s",
                self.paths.memories_dir,
                report.failed,
                report.phase_two,
                report.timed_out,
            )

    async def flush(self, *, retry_failed: bool = False) -> FlushReport:
        """Generate memory now. Never raises for a failed rollout or consolidation (they are
        recorded in the report, ``generation_state.json`` and ``generation_log.jsonl``); stops
        after ``flush_timeout_s`` leaving unfinished rollouts pending."""
        report = FlushReport()
        async with self._flush_lock, tracing.aspan(_trace.FLUSH, _trace.layout(self.paths)) as span:
            try:
                await asyncio.wait_for(
                    self._flush(report, retry_failed), timeout=self.config.flush_timeout_s
                )
            except TimeoutError:
                report.timed_out = True
                logger.warning("memory flush timed out after %ss", self.config.flush_timeout_s)
            _trace.flush_done(span, report)
        return report

    def _provider(self) -> ModelProvider:
        """The provider for string model names: the configured one, else the process's shared
        default provider (its client is reused by every flush and run, not closed here)."""
        if self.config.model_provider is not None:
            return self.config.model_provider
        from sandmem.models._provider import default_provider

        return default_provider()

    async def _flush(self, report: FlushReport, retry_failed: bool) -> None:
        with no_symlinks():  # a symlink under memories/ or sessions/ is never followed
            await self._flush_locked(report, retry_failed, self._provider())

    async def _flush_locked(
        self, report: FlushReport, retry_failed: bool, provider: ModelProvider
    ) -> None:
        async with self.session.lock(self.paths.lock, timeout=LOCK_TIMEOUT_S):
            await self.prepare()
            removed = await sweep_write_temps(self.session, self.paths)
            if removed:
                logger.warning("removed %d temp file(s) left by a killed write", len(removed))
            if await self.session.exists(self.paths.backup_dir):
                logger.warning("restoring memory files after an interrupted consolidation")
                await phase_two.rollback(self.session, self.paths)
            state = await load_state(self.session, self.paths)
            pending = await self._pending(state, retry_failed)
            report.pending = sorted(pending)
            semaphore = asyncio.Semaphore(self.config.phase_one_concurrency)
            await asyncio.gather(
                *(
                    self._extract_one(rid, state, report, semaphore, provider)
                    for rid in sorted(pending)
                )
            )
            if pending:
                await self._save_state(state)
                if self.after_phase_one is not None:
                    await self.after_phase_one()
            async with tracing.aspan(_trace.PHASE_TWO) as span:
                await self._phase_two(state, report, provider)
                _trace.phase_two_done(span, report)

    # ------------------------------------------------------------ phase one

    async def rollout_ids(self) -> list[str]:
        if not await self.session.exists(self.paths.sessions_dir):
            return []
        names = await self.session.listdir(self.paths.sessions_dir)
        return sorted(n[:-6] for n in names if n.endswith(".jsonl") and not n.startswith("."))

    async def _fingerprints(self) -> dict[str, tuple[RolloutFingerprint, str | None]]:
        """Each rollout's fingerprint and its raw memory's text, read in bounded batches
        (rollout files can be large: at most ``_PENDING_BATCH`` are held at once)."""
        found: dict[str, tuple[RolloutFingerprint, str | None]] = {}
        ids = await self.rollout_ids()
        for start in range(0, len(ids), _PENDING_BATCH):
            batch = ids[start : start + _PENDING_BATCH]
            rollouts = await self.session.read_many([self.paths.rollout_file(r) for r in batch])
            raws = await self.session.read_many([self.paths.raw_memory_file(r) for r in batch])
            for rid, data, raw in zip(batch, rollouts.values(), raws.values(), strict=True):
                if data is not None:
                    text = raw.decode("utf-8", "replace") if raw is not None else None
                    found[rid] = (fingerprint(data), text)
        return found

    async def _pending(self, state: dict[str, Any], retry_failed: bool) -> set[str]:
        pending: set[str] = set()
        for rid, (fp, raw) in (await self._fingerprints()).items():
            if phase_one.is_up_to_date(raw, fp):
                continue
            entry = state["rollouts"].get(rid) or {}
            same_version = entry.get("segments") == fp.segments and (
                entry.get("updated_at") == fp.updated_at
            )
            if not same_version:
                entry = {"attempts": 0, "segments": fp.segments, "updated_at": fp.updated_at}
                entry["status"] = "pending"
                state["rollouts"][rid] = entry
            elif entry.get("status") == "skipped":
                continue
            elif entry.get("status") == "failed" and not retry_failed:
                continue
            elif retry_failed:
                entry["attempts"] = 0
            pending.add(rid)
        return pending

    async def _extract_one(
        self,
        rid: str,
        state: dict[str, Any],
        report: FlushReport,
        semaphore: asyncio.Semaphore,
        provider: ModelProvider,
    ) -> None:
        async with semaphore, tracing.aspan(_trace.PHASE_ONE, {_trace.ROLLOUT: rid}) as span:
            started = time.monotonic()
            entry = state["rollouts"].setdefault(rid, {"attempts": 0})
            error: str | None = None
            usage = Usage()
            try:
                data = await self.session.read_bytes(self.paths.rollout_file(rid))
                fp = fingerprint(data)
                data, omitted = bound_rollout(data)
                text = data.decode("utf-8", "replace")
                del data
                artifacts, usage = await phase_one.extract(
                    rid, text, self.config, provider, omitted
                )
                del text
                if artifacts is None:
                    status = "skipped"
                    report.skipped.append(rid)
                else:
                    await phase_one.write_artifacts(
                        self.session, self.paths, rid, fp, artifacts, self.redactor
                    )
                    status = "done"
                    report.processed.append(rid)
                entry.update(segments=fp.segments, updated_at=fp.updated_at)
            except Exception as exc:
                # a model server may echo request content in its error messages
                error = self.redactor.redact(f"{type(exc).__name__}: {exc}")
                entry["attempts"] = int(entry.get("attempts", 0)) + 1
                exhausted = entry["attempts"] >= self.config.max_attempts
                status = "failed" if exhausted else "pending"
                report.failed[rid] = error
            entry.update(status=status, last_error=error, last_attempt_at=utc_now())
            _trace.phase_one_done(span, status, usage, error)
            report.phase_one_usage.add(usage)
            await self._save(
                state,
                {
                    "phase": "one",
                    "rollouts": [rid],
                    "status": status,
                    "error": error,
                    "duration_s": round(time.monotonic() - started, 3),
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                },
                force=False,
            )

    async def _save_state(self, state: dict[str, Any]) -> None:
        async with self._state_lock:
            await write_json(self.session, self.paths.state_json, state)
            self._state_written_at = time.monotonic()

    async def _save(self, state: dict[str, Any], log: dict[str, Any], *, force: bool) -> None:
        """Append a log record, and write the state file when ``force`` or when the last write
        is older than ``STATE_WRITE_INTERVAL_S`` (a flush over many rollouts would otherwise
        rewrite a growing file after each one). The log and the raw memory headers are the
        record of what was done; the state file adds attempts and errors."""
        async with self._state_lock:
            await append_log(self.session, self.paths, {"time": utc_now(), **log})
            now = time.monotonic()
            if force or now - self._state_written_at >= STATE_WRITE_INTERVAL_S:
                await write_json(self.session, self.paths.state_json, state)
                self._state_written_at = now

    # ------------------------------------------------------------ phase two

    async def _phase_two(
        self, state: dict[str, Any], report: FlushReport, provider: ModelProvider
    ) -> None:
        started = time.monotonic()
        plan = await phase_two.plan(
            self.session, self.paths, self.config.max_raw_memories_for_consolidation
        )
        _trace.phase_two_plan(plan)
        if not plan.diff.changed:
            report.phase_two = "skipped"
            return
        ids = [r.rollout_id for r in plan.selected]
        now = utc_now()
        try:
            usage = await phase_two.consolidate(
                self.session, self.paths, self.config, self.redactor, plan, now, provider
            )
        except Exception as exc:  # rolled back already; recorded, never raised
            error = self.redactor.redact(str(exc))
            report.phase_two, report.phase_two_error = "failed", error
            state["phase_two"] = {
                "status": "failed",
                "last_error": error,
                "last_attempt_at": now,
            }
            await self._save(
                state,
                {
                    "phase": "two",
                    "rollouts": ids,
                    "status": "failed",
                    "error": error,
                    "duration_s": round(time.monotonic() - started, 3),
                    "input_tokens": 0,
                    "output_tokens": 0,
                },
                force=True,
            )
            return
        report.phase_two = "done"
        report.phase_two_usage = usage
        state["phase_two"] = {
            "status": "done",
            "last_error": None,
            "last_success_at": now,
            "selection": phase_two.selection_summary(plan),
        }
        await self._save(
            state,
            {
                "phase": "two",
                "rollouts": ids,
                "status": "done",
                "error": None,
                "duration_s": round(time.monotonic() - started, 3),
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
            },
            force=True,
        )
