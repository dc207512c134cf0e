"""The generation manager: one per (sandbox session, layout), owned by the session.

It owns the layout's lifetime in the session: ``prepare`` (the layout ensured), ``record``
(a run segment appended, ``memory.recording``), ``flush``, and the stop hook ``_attach``
registers. A flush runs under the layout's cross-process lock, within ``flush_timeout_s``,
as named steps: the settled check (``_settled``: nothing changed since a flush that did
nothing, so nothing to do), tidying what a killed process left (write temps, an interrupted
commit, ``memory.journal``; an edit made outside any run versioned), loading the state
(``memory.state``), the reconcile (``_scan``: which rollouts are due), phase one for every due
rollout (``phase_one.run``), phase two once (``phase_two.run``), and certifying a flush that
did nothing. Every step records through the flush's record (``_record``).

A rollout is pending until its raw memory records its last ``updated_at`` and segment count.
A failure the environment caused (the model server down or slow) only postpones a rollout; a
failure the rollout caused counts toward ``max_attempts`` for one version of the rollout. One
bad file (an unreadable rollout or raw memory, a corrupt state or selection file) is reported
and left out; the rest proceeds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sandmem import tracing
from sandmem.memory import _files, journal
from sandmem.memory import state as gen_state
from sandmem.memory._files import LOCK_TIMEOUT_S  # the layout lock's one default (re-exported)
from sandmem.memory._store_seam import MemoryStore
from sandmem.memory.config import MemoryGenerateConfig
from sandmem.memory.generation import _scan, _settled, _trace, phase_one, phase_two
from sandmem.memory.generation._gate import Gate
from sandmem.memory.generation._record import (
    FlushRecord,
    FlushReport,
    StateWrites,
    record_timeout,
)
from sandmem.memory.generation._redact_pass import MemoryRedactionPass
from sandmem.memory.history import Attribution
from sandmem.memory.layout import MemoryPaths, sweep_write_temps
from sandmem.memory.recording import RolloutRecorder
from sandmem.memory.state import GenerationState
from sandmem.models._base import ModelProvider
from sandmem.redaction import Redactor
from sandmem.sandboxes._session import SandboxSession

__all__ = ["LOCK_TIMEOUT_S", "FlushReport", "MemoryGenerationManager"]

logger = logging.getLogger("sandmem.memory")


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
        #: appends run segments (``memory.recording``; callers without a manager use it too)
        self.recorder = RolloutRecorder(session, paths, self.redactor)
        #: the stop-time redaction of this layout's memory files
        self.redaction = MemoryRedactionPass(session, paths.memories_dir, self.redactor)
        self._flush_lock = asyncio.Lock()
        #: the state file's throttled writes, across flushes
        self._writes = StateWrites()
        #: the request gate of the last phase one (its ``limit`` and ``rejections``)
        self.last_gate: Gate | None = None
        #: the pre-stop hook ``get_manager`` registered (``memory.generation._stop``)
        self.stop_hook: Callable[[], Awaitable[None]] | None = None

    async def prepare(self) -> None:
        """Ensure the layout, every time: an agent may have planted a link in it since the
        last call (it is moved aside, never followed)."""
        await self.recorder.prepare()

    async def record(self, segment: dict[str, Any], *, lock_timeout: float | None = None) -> None:
        """Append one run segment (redacted) to its rollout file (``RolloutRecorder.record``)."""
        await self.recorder.record(segment, lock_timeout=lock_timeout)

    def detach_stop_hook(self) -> None:
        """Do not flush when the session stops (for callers that flush explicitly, such as
        ``sandmem memory generate``)."""
        if self.stop_hook is not None:
            self.session.unregister_pre_stop_hook(self.stop_hook)
            self.stop_hook = None

    async def flush(self, *, retry_failed: bool = False, wait_backoff: bool = True) -> FlushReport:
        """Generate memory now. Never raises for a failed rollout or consolidation (they are
        recorded in the report, ``generation_state.json`` and ``generation_log.jsonl``); stops
        after ``flush_timeout_s`` leaving unfinished rollouts pending (an environment failure:
        no attempt is used), and a consolidation it cut short is replaced by the extractive
        fallback (``phase_two.after_timeout``). ``retry_failed`` also retries rollouts that used up
        ``max_attempts``; ``wait_backoff=False`` retries environment failures before their
        retry time (an explicit ``sandmem memory generate`` does)."""
        async with self._flush_lock, tracing.aspan(_trace.FLUSH, _trace.layout(self.paths)) as span:
            record = FlushRecord(self.session, self.paths, self.config, self.redactor, self._writes)
            try:
                await asyncio.wait_for(
                    self._flush(record, retry_failed, wait_backoff),
                    timeout=self.config.flush_timeout_s,
                )
            except TimeoutError:
                record.report.timed_out = True
                logger.warning("memory flush timed out after %ss", self.config.flush_timeout_s)
                await record_timeout(record)
                await phase_two.after_timeout(record, self._provider())
            _trace.flush_done(span, record.report)
        return record.report

    def _provider(self) -> ModelProvider:
        """The provider for string model names: the configured one, else the process's shared
        default provider (its client is reused by every flush and run, not closed here)."""
        if self.config.model_provider is not None:
            return self.config.model_provider
        from sandmem.models._provider import default_provider

        return default_provider()

    async def _flush(self, record: FlushRecord, retry_failed: bool, wait_backoff: bool) -> None:
        """The flush, step by step, under the layout's lock."""
        provider = self._provider()
        async with _files.lock(self.session, self.paths.lock):
            await self.prepare()
            settled = await _settled.check(self.session, self.paths, self.config, retry_failed)
            await self._tidy(record, settled)
            if settled.quiet and not record.report.problems:
                record.report.phase_two = "skipped"
                return
            await settled.withdraw()  # this flush may change what it certified
            state, loaded = await self._load_state(record)
            due, found = await _scan.reconcile(record, state, retry_failed, wait_backoff)
            slots = phase_one.Slots(self.config)
            self.last_gate = slots.request
            await phase_one.run(record, provider, sorted(due), state, found, slots)
            wrote = state.to_json() != loaded
            if wrote:  # a flush with nothing to do writes nothing
                await record.save_state(state)
            await record.log_problems()
            if record.report.pending and self.after_phase_one is not None:
                await self.after_phase_one()
            async with tracing.aspan(_trace.PHASE_TWO) as span:
                await phase_two.run(record, provider, state)
                _trace.phase_two_done(span, record.report)
            await settled.certify(state, wrote, record.report)

    async def _tidy(self, record: FlushRecord, settled: _settled.Settled) -> None:
        """What a killed process left: write temps swept, an interrupted commit finished or
        discarded (``journal.recover``), and an edit made outside any run versioned."""
        # the files are as a flush that swept them left them: no new temp can be in the
        # raw memories (listed) or the summaries (their directory's mtime is unchanged)
        quiet = settled.quiet and not settled.temps
        skip = (self.paths.raw_dir, self.paths.summaries_dir) if quiet else ()
        removed = await sweep_write_temps(self.session, self.paths, skip=skip)
        if removed:
            logger.warning("removed %d temp file(s) left by a killed write", len(removed))
        for note in await journal.recover(self.session, self.paths):
            record.note(note)
        if not settled.quiet:  # (settled: no memory file changed since a flush versioned them)
            await journal.notice(  # an edit made outside any run: a version of its own
                self.session,
                self.paths,
                Attribution("hand_edit"),
                redactor=self.redactor,
                retention=phase_two.retention_of(self.config),
            )

    async def _load_state(self, record: FlushRecord) -> tuple[GenerationState, Any]:
        """The state file, its problems reported; and its JSON as read (``None`` when it had
        problems: it is written back whatever this flush does)."""
        state, problems = await gen_state.load(self.session, self.paths)
        record.problems(problems)
        return state, None if problems else state.to_json()
