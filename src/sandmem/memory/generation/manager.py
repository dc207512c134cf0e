"""The generation manager: one per (sandbox session, layout), owned by the session.

It appends run segments to rollout files, and when the session stops (a pre-stop hook) it
flushes: it finishes or discards an interrupted commit (``memory.journal``), reconciles
``generation_state.json`` with the files (``memory.state``), runs phase one for every due
rollout with bounded concurrency, then phase two once. A rollout is pending until its raw
memory records its last ``updated_at`` and segment count. A failure the environment caused
(the model server down or slow) only postpones a rollout; a failure the rollout caused counts
toward ``max_attempts`` for one version of the rollout. One bad file (an unreadable rollout or
raw memory, a corrupt state or selection file) is reported and left out; the rest proceeds.
Everything runs under the layout's cross-process lock.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sandmem import tracing
from sandmem._errors import SandboxError
from sandmem._usage import Usage
from sandmem.memory import _files, journal
from sandmem.memory import state as gen_state
from sandmem.memory._files import LOCK_TIMEOUT_S  # the layout lock's one default
from sandmem.memory._store_seam import MemoryStore
from sandmem.memory.config import MemoryGenerateConfig
from sandmem.memory.generation import _degrade, _trace, phase_one, phase_two
from sandmem.memory.generation._fallback import fall_back
from sandmem.memory.generation._gate import AdaptiveGate, FixedGate, Gate
from sandmem.memory.generation._redact_pass import MemoryRedactionPass
from sandmem.memory.history import Attribution
from sandmem.memory.layout import (
    INDEX_DB,
    INDEX_LOCK,
    LOCK,
    MAX_DEPTH,
    SETTLED_JSON,
    MemoryPaths,
    RolloutFingerprint,
    bound_rollout,
    ensure_layout,
    fingerprint,
    is_up_to_date,
    list_files,
    listing_digest,
    make_way,
    read_isolated,
    sweep_write_temps,
)
from sandmem.memory.rollouts import segment_line, utc_now
from sandmem.memory.state import FailureKind, GenerationState, PhaseTwoStatus, append_log
from sandmem.models._base import ModelProvider
from sandmem.redaction import Redactor
from sandmem.sandboxes._session import FileStat, SandboxSession
from sandmem.sandboxes._types import EntryKind

logger = logging.getLogger("sandmem.memory")

#: rollout files read at once when looking for pending rollouts
_PENDING_BATCH = 32
#: files stat-ed at once when looking for pending rollouts
_STAT_BATCH = 1024
#: during phase one the state file is rewritten at most this often (and once at the end)
STATE_WRITE_INTERVAL_S = 1.0


#: rollout bytes the pending scan keeps for phase one (beyond that, phase one reads again)
_PREFETCH_BYTES = 64 * 1024 * 1024


@dataclass
class _Scan:
    """What the pending scan found: the listed rollout ids, their (file, raw memory) stats,
    those unchanged since the state was written, and for the others their fingerprint and
    raw memory text (and, within budget, their bytes)."""

    ids: list[str]
    stats: dict[str, tuple[tuple[int, int] | None, tuple[int, int] | None]] = field(
        default_factory=dict
    )
    unchanged: set[str] = field(default_factory=set)
    missing: set[str] = field(default_factory=set)
    fingerprints: dict[str, tuple[RolloutFingerprint, str | None]] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)


class _Slots:
    """Phase one's two limits: ``request`` runs the model requests, pinned at
    ``phase_one_concurrency`` or, by default, adapted to the server under
    ``phase_one_max_concurrency`` (``_gate``); ``prepare`` bounds the rollouts read and
    rendered at once (twice the most requests), so rendering overlaps the requests without
    holding every rollout."""

    def __init__(self, config: MemoryGenerateConfig) -> None:
        pinned = config.phase_one_concurrency
        self.request: Gate = (
            FixedGate(pinned)
            if pinned is not None
            else AdaptiveGate(config.phase_one_max_concurrency)
        )
        self.prepare = asyncio.Semaphore(2 * (pinned or config.phase_one_max_concurrency))


def _stat_pair(found: FileStat | None) -> tuple[int, int] | None:
    """A stat worth trusting as ``(size, mtime_ns)``; ``None`` when missing or without mtime."""
    if found is None or found.mtime_ns is None:
        return None
    return found.size, found.mtime_ns


async def _stat_isolated(session: SandboxSession, paths: list[str]) -> dict[str, FileStat | None]:
    """``stat_many`` in batches; a batch that fails (one bad path) counts as unknown, so its
    files are read and checked the slow way."""
    found: dict[str, FileStat | None] = {}
    for start in range(0, len(paths), _STAT_BATCH):
        batch = paths[start : start + _STAT_BATCH]
        try:
            found.update(await _files.stat_many(session, batch))
        except SandboxError:
            found.update(dict.fromkeys(batch))
    return found


async def _listed_stats(
    session: SandboxSession, directories: list[str]
) -> tuple[dict[str, FileStat | None], set[str]]:
    """The regular files of ``directories`` with their size and mtime, from one listing
    each (``stat_dir``: a layout of 10,000 conversations is two listings, not 20,000
    ``stat`` calls), and the directories listed. Other entries (symlinks, special files) are
    ``None``: read and checked the slow way. A directory that cannot be listed adds nothing
    (its files are ``stat``-ed one by one)."""
    found: dict[str, FileStat | None] = {}
    listed: set[str] = set()
    for directory in directories:
        try:
            entries = await _files.stat_dir(session, directory)
        except SandboxError:
            continue
        listed.add(directory)
        for name, kind, size, mtime in entries:
            path = f"{directory}/{name}"
            found[path] = FileStat(size, mtime) if kind == EntryKind.FILE else None
    return found, listed


#: the parts of a listing entry the settled check compares
_NAME_SIZE_MTIME = operator.itemgetter(0, 2, 3)


#: entries of the memory directory that change without changing what a flush would do: the
#: layout index (rewritten by reads; a side file of it too), its lock, the layout lock, the
#: settled record itself
def _not_settled(name: str) -> bool:
    return name.startswith(INDEX_DB) or name in (INDEX_LOCK, LOCK, SETTLED_JSON)


def _nothing_to_do(stored: dict[str, Any], now: dict[str, Any], retry_failed: bool) -> bool:
    """Whether the files a flush reads are exactly as a flush that had nothing to do left
    them (``retry_failed`` also needs no failed rollout to retry)."""
    same = all(stored.get(key) == value for key, value in now.items())
    return same and not (retry_failed and stored.get("failed", 1))


def _did_nothing(report: FlushReport) -> bool:
    """A flush that extracted, deferred, failed, found problems and consolidated nothing."""
    return (
        not report.pending
        and not report.deferred
        and not report.failed
        and not report.problems
        and not report.timed_out
        and report.phase_two == "skipped"
    )


@dataclass
class FlushReport:
    """What one flush did. ``failed`` maps rollout ids to their error (``failure_kinds`` to
    ``environment`` or ``rollout``); ``pending`` lists the rollouts this flush set out to
    extract; ``deferred`` the pending ones it left for later (their retry time after an
    environment failure has not come). ``phase_two`` is ``incomplete`` when the consolidation
    was committed but left out ``phase_two_missing``. ``problems`` maps each file left out
    (bad input) to the reason."""

    processed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    failure_kinds: dict[str, FailureKind] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    phase_two: PhaseTwoStatus = "not_run"
    phase_two_error: str | None = None
    phase_two_failure_kind: FailureKind | None = None
    phase_two_missing: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)
    phase_one_usage: Usage = field(default_factory=Usage)
    phase_two_usage: Usage = field(default_factory=Usage)
    timed_out: bool = False


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
        #: the stop-time redaction of this layout's memory files
        self.redaction = MemoryRedactionPass(session, paths.memories_dir, self.redactor)
        self._flush_lock = asyncio.Lock()
        self._state_lock = asyncio.Lock()
        self._state_written_at = 0.0
        #: requests of extractions cancelled by the flush timeout (logged by _record_timeout)
        self._unlogged = Usage()
        self._layout_ready = False
        #: the current flush's pending scan (rollout bytes kept for phase one)
        self._prefetched: _Scan | None = None
        #: the request gate of the last phase one (its ``limit`` and ``rejections``)
        self.last_gate: Gate | None = None
        #: the pre-stop hook ``get_manager`` registered (``memory.generation._stop``)
        self.stop_hook: Callable[[], Awaitable[None]] | None = None

    async def prepare(self) -> None:
        """Ensure the layout, every time: an agent may have planted a link in it since the
        last call (it is moved aside, never followed)."""
        await ensure_layout(self.session, self.paths)
        self._layout_ready = True

    async def record(self, segment: dict[str, Any], *, lock_timeout: float | None = None) -> None:
        """Append one run segment (redacted) to its rollout file: append only, under the
        sessions lock so concurrent writers never interleave (waiting for it at most
        ``lock_timeout`` seconds, default ``LOCK_TIMEOUT_S``)."""
        await self.prepare()
        # keys too: an ingested transcript's items may hold a secret where a key goes
        line = segment_line(self.redactor.redact_obj(segment, keys=True))
        lock = f"{self.paths.sessions_dir}/{LOCK}"
        rollout_file = self.paths.rollout_file(segment["rollout_id"])
        wait = LOCK_TIMEOUT_S if lock_timeout is None else lock_timeout
        async with _files.lock(self.session, lock, timeout=wait):
            await make_way(self.session, rollout_file)  # a planted FIFO, link, directory
            await _files.append(self.session, rollout_file, line)

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
        no attempt is used). ``retry_failed`` also retries rollouts that used up
        ``max_attempts``; ``wait_backoff=False`` retries environment failures before their
        retry time (an explicit ``sandmem memory generate`` does)."""
        report = FlushReport()
        async with self._flush_lock, tracing.aspan(_trace.FLUSH, _trace.layout(self.paths)) as span:
            self._unlogged = Usage()
            try:
                await asyncio.wait_for(
                    self._flush(report, retry_failed, wait_backoff),
                    timeout=self.config.flush_timeout_s,
                )
            except TimeoutError:
                report.timed_out = True
                logger.warning("memory flush timed out after %ss", self.config.flush_timeout_s)
                await self._record_timeout(report)
            _trace.flush_done(span, report)
        return report

    def _provider(self) -> ModelProvider:
        """The provider for string model names: the configured one, else the process's shared
        default provider (its client is reused by every flush and run, not closed here)."""
        if self.config.model_provider is not None:
            return self.config.model_provider
        from sandmem.models._provider import default_provider

        return default_provider()

    async def _flush(self, report: FlushReport, retry_failed: bool, wait_backoff: bool) -> None:
        await self._flush_locked(report, retry_failed, wait_backoff, self._provider())

    def _problem(self, report: FlushReport, path: str, reason: str) -> None:
        if path not in report.problems:
            logger.warning("memory: %s left out: %s", path, reason)
        report.problems[path] = reason

    async def _flush_locked(
        self,
        report: FlushReport,
        retry_failed: bool,
        wait_backoff: bool,
        provider: ModelProvider,
    ) -> None:
        async with _files.lock(self.session, self.paths.lock, timeout=LOCK_TIMEOUT_S):
            await self.prepare()
            settled, temps = await self._settled_view()
            stored = await gen_state.load_settled(self.session, self.paths)
            quiet = settled is not None and stored is not None
            quiet = quiet and _nothing_to_do(stored or {}, settled or {}, retry_failed)
            # the files are as a flush that swept them left them: no new temp can be in the
            # raw memories (listed) or the summaries (their directory's mtime is unchanged)
            skip = () if temps or not quiet else (self.paths.raw_dir, self.paths.summaries_dir)
            removed = await sweep_write_temps(self.session, self.paths, skip=skip)
            if removed:
                logger.warning("removed %d temp file(s) left by a killed write", len(removed))
            for note in await journal.recover(self.session, self.paths):
                path, _, reason = note.partition(": ")
                report.problems.setdefault(path, reason)
            if not quiet:  # (settled: no memory file changed since a flush versioned them)
                await journal.notice(  # an edit made outside any run: a version of its own
                    self.session,
                    self.paths,
                    Attribution("hand_edit"),
                    redactor=self.redactor,
                    retention=phase_two.retention_of(self.config),
                )
            if quiet and not report.problems:
                report.phase_two = "skipped"
                return
            if stored is not None:  # this flush may change what it certified
                await gen_state.save_settled(self.session, self.paths, None)
            state, problems = await gen_state.load(self.session, self.paths)
            loaded = None if problems else state.to_json()
            for problem in problems:
                path, _, reason = problem.partition(": ")
                self._problem(report, path, reason)
            due = await self._reconcile(state, report, retry_failed, wait_backoff)
            await self._phase_one(sorted(due), state, report, provider)
            wrote = state.to_json() != loaded
            if wrote:  # a flush with nothing to do writes nothing
                await self._save_state(state)
            if report.problems:
                await append_log(
                    self.session,
                    self.paths,
                    {"time": utc_now(), "phase": "check", "problems": report.problems},
                )
            if report.pending and self.after_phase_one is not None:
                await self.after_phase_one()
            async with tracing.aspan(_trace.PHASE_TWO) as span:
                await self._phase_two(state, report, provider)
                _trace.phase_two_done(span, report)
            if settled is not None and not wrote and _did_nothing(report):
                failed = sum(e.status == "failed" for e in state.rollouts.values())
                await gen_state.save_settled(
                    self.session, self.paths, {**settled, "failed": failed}
                )

    async def _settled_view(self) -> tuple[dict[str, Any] | None, bool]:
        """What decides that a flush has nothing to do, from directory listings: the memory
        directory's own entries (the state and selection files, ``MEMORY.md``, a commit
        record, the subdirectories' mtimes), the rollout files and the skills (names, sizes,
        mtimes), the raw memories' names, and phase two's cap; and whether the raw memories
        hold a hidden entry (a write's temp). ``None`` when a file is too new to trust
        (``RACY_NS``) or the backend gives no mtimes: the flush then checks everything.

        Raw memories are not ``stat``-ed (half the cost at 10,000 conversations): sandmem
        replaces them whole, which moves their directory's mtime (in the first listing); one
        edited in place by hand is found, and extracted again, by the next flush that checks
        everything."""
        memories = await self._stat_dir(self.paths.memories_dir)
        sessions = await self._stat_dir(self.paths.sessions_dir)
        try:
            raw = sorted(await _files.listdir(self.session, self.paths.raw_dir))
        except SandboxError:
            raw = []  # not there (yet)
        temps = "\0." in "\0" + "\0".join(raw)  # a hidden name: a write's temp
        skills = await list_files(self.session, self.paths.skills_dir, MAX_DEPTH)
        digest = listing_digest(
            [
                # what reads and this check rewrite are left out
                [_NAME_SIZE_MTIME(e) for e in memories if not _not_settled(e[0])],
                list(map(_NAME_SIZE_MTIME, sessions)),
                [(name, 0, 0) for name in raw],
                [(path, size, mtime) for path, (size, mtime) in skills.items()],
            ]
        )
        if digest is None:
            return None, temps
        cap = self.config.max_raw_memories_for_consolidation
        return {"version": 2, "files": digest, "cap": cap}, temps

    async def _stat_dir(self, directory: str) -> list[tuple[str, EntryKind, int, int | None]]:
        try:
            return await _files.stat_dir(self.session, directory)
        except SandboxError:
            return []  # not there (yet): no rollouts

    # ------------------------------------------------------------ phase one

    async def rollout_ids(self) -> list[str]:
        if not await _files.exists(self.session, self.paths.sessions_dir):
            return []
        names = await _files.listdir(self.session, self.paths.sessions_dir)
        return sorted(n[:-6] for n in names if n.endswith(".jsonl") and not n.startswith("."))

    async def _scan(self, state: GenerationState, report: FlushReport) -> _Scan:
        """Find what changed since the state was written, reading as little as possible.

        Every rollout file and raw memory is ``stat``-ed (no reading). A rollout whose file and
        raw memory both have the size and mtime its state entry recorded is trusted as it is.
        The others are read (in bounded batches) to get their fingerprint and raw memory; the
        rollout bytes are kept, up to ``_PREFETCH_BYTES`` in all, so phase one reads each
        pending rollout once. An unreadable rollout file is reported and left out; an
        unreadable raw memory counts as missing."""
        scan = _Scan(await self.rollout_ids())
        rollout_files = [self.paths.rollout_file(r) for r in scan.ids]
        raw_files = [self.paths.raw_memory_file(r) for r in scan.ids]
        stats, listed = await _listed_stats(
            self.session, [self.paths.sessions_dir, self.paths.raw_dir]
        )
        unlisted = [
            p
            for p in [*rollout_files, *raw_files]
            if p not in stats and p.rsplit("/", 1)[0] not in listed
        ]
        stats.update(await _stat_isolated(self.session, unlisted) if unlisted else {})
        changed: list[str] = []
        for rid, path, raw_path in zip(scan.ids, rollout_files, raw_files, strict=True):
            scan.stats[rid] = (_stat_pair(stats.get(path)), _stat_pair(stats.get(raw_path)))
            entry = state.rollouts.get(rid)
            file_stat, raw_stat = scan.stats[rid]
            if (
                entry is not None
                and file_stat is not None
                and entry.segments is not None
                and entry.updated_at is not None
                and entry.file_stat == file_stat
                and entry.raw_stat == raw_stat
            ):
                scan.unchanged.add(rid)
            else:
                changed.append(rid)
        held = 0
        for start in range(0, len(changed), _PENDING_BATCH):
            batch = changed[start : start + _PENDING_BATCH]
            files = [self.paths.rollout_file(r) for r in batch]
            rollouts, bad = await read_isolated(self.session, files)
            for path, reason in bad.items():
                self._problem(report, path, reason)
            batch_raw = [self.paths.raw_memory_file(r) for r in batch]
            raws, _bad_raw = await read_isolated(self.session, batch_raw)
            for rid, path, raw_path in zip(batch, files, batch_raw, strict=True):
                data = rollouts.get(path)
                if data is None:
                    if path not in bad:
                        self._problem(report, path, phase_two.NOT_REGULAR)
                    scan.missing.add(rid)
                    continue
                raw = raws.get(raw_path)
                text = raw.decode("utf-8", "replace") if raw is not None else None
                scan.fingerprints[rid] = (fingerprint(data), text)
                if held + len(data) <= _PREFETCH_BYTES:
                    scan.data[rid] = data
                    held += len(data)
        return scan

    async def _reconcile(
        self, state: GenerationState, report: FlushReport, retry_failed: bool, wait_backoff: bool
    ) -> set[str]:
        """Bring every rollout's state in line with its files; return the due ones."""
        now = datetime.now(UTC)
        due: set[str] = set()
        scan = await self._scan(state, report)
        self._prefetched = scan
        present = set(scan.fingerprints) | scan.unchanged
        for rid in [r for r in state.rollouts if r not in present]:
            if self.paths.rollout_file(rid) not in report.problems:
                del state.rollouts[rid]  # its rollout file is gone
        for rid in sorted(present):
            if rid in scan.unchanged:
                entry = state.rollouts[rid]
            else:
                fp, raw = scan.fingerprints[rid]
                up = is_up_to_date(raw, fp)
                entry = gen_state.reconcile(state.rollouts.get(rid), fp.segments, fp.updated_at, up)
                file_stat, raw_stat = scan.stats[rid]
                entry = entry.model_copy(update={"file_stat": file_stat, "raw_stat": raw_stat})
            if retry_failed and entry.status == "failed":
                entry = entry.model_copy(update={"status": "pending", "attempts": 0})
            state.rollouts[rid] = entry
            if gen_state.is_due(entry, now, retry_failed=retry_failed, wait_backoff=wait_backoff):
                due.add(rid)
            elif entry.status == "pending":
                report.deferred.append(rid)
        return due

    async def _read_rollout(self, rid: str) -> tuple[bytes, tuple[int, int] | None]:
        """The rollout's bytes (from the scan when it kept them) and the file's stat taken
        before they were read (so a later append shows as a change)."""
        scan = self._prefetched
        if scan is not None and rid in scan.data:
            return scan.data.pop(rid), scan.stats[rid][0]
        path = self.paths.rollout_file(rid)
        before = _stat_pair((await _files.stat_many(self.session, [path]))[path])
        return await _files.read_bytes(self.session, path), before

    async def _phase_one(
        self,
        due: list[str],
        state: GenerationState,
        report: FlushReport,
        provider: ModelProvider,
    ) -> None:
        """Extract the due rollouts. Rollouts waiting for their retry time after an
        environment failure are tried too once this flush shows the server answers (one of
        them is sent first as a probe when nothing else is due); while it does not, they wait,
        so an outage costs one request per flush rather than one per rollout."""
        semaphore = _Slots(self.config)
        self.last_gate = semaphore.request
        waiting = sorted(report.deferred, key=lambda r: (state.rollouts[r].next_retry_at or "", r))
        first = due or waiting[:1]
        rest = [r for r in waiting if r not in first]
        report.pending = list(first)
        await asyncio.gather(
            *(self._extract_one(r, state, report, semaphore, provider) for r in first)
        )
        answered = bool(report.processed or report.skipped) or any(
            kind == "rollout" for kind in report.failure_kinds.values()
        )
        if rest and answered:
            report.pending += rest
            await asyncio.gather(
                *(self._extract_one(r, state, report, semaphore, provider) for r in rest)
            )
        report.deferred = [r for r in report.deferred if r not in report.pending]
        self._prefetched = None

    async def _extract_one(
        self,
        rid: str,
        state: GenerationState,
        report: FlushReport,
        slots: _Slots,
        provider: ModelProvider,
    ) -> None:
        # reading and rendering (``slots.prepare``) run ahead of the model requests
        # (``slots.request``, phase_one_concurrency at once), so the next rollouts are ready
        # to send when a request slot frees up
        async with slots.prepare, tracing.aspan(_trace.PHASE_ONE, {_trace.ROLLOUT: rid}) as span:
            started = time.monotonic()
            error: str | None = None
            kind: FailureKind | None = None
            usage = Usage()
            try:
                data, file_stat = await self._read_rollout(rid)
                fp = fingerprint(data)
                data, omitted = bound_rollout(data)
                text = data.decode("utf-8", "replace")
                del data
                artifacts = await phase_one.extract(
                    rid, text, self.config, provider, omitted, usage, slots.request
                )
                del text
                if artifacts is None:
                    status: gen_state.RolloutStatus = "skipped"
                    report.skipped.append(rid)
                else:
                    await phase_one.write_artifacts(
                        self.session, self.paths, rid, fp, artifacts, self.redactor
                    )
                    status = "done"
                    report.processed.append(rid)
                raw_path = self.paths.raw_memory_file(rid)
                raw_stat = _stat_pair((await _files.stat_many(self.session, [raw_path]))[raw_path])
                state.rollouts[rid] = gen_state.record_success(
                    state.rollouts[rid], status, fp.segments, fp.updated_at, datetime.now(UTC)
                ).model_copy(update={"file_stat": file_stat, "raw_stat": raw_stat})
            except asyncio.CancelledError:
                report.phase_one_usage.add(usage)
                self._unlogged.add(usage)
                raise
            except Exception as exc:
                # a model server may echo request content in its error messages
                error = self.redactor.redact(f"{type(exc).__name__}: {exc}")
                kind = gen_state.classify(exc)
                entry = self._failed(state.rollouts[rid], kind, error)
                state.rollouts[rid] = entry
                status = entry.status
                report.failed[rid] = error
                report.failure_kinds[rid] = kind
            _trace.phase_one_done(span, status, usage, error)
            report.phase_one_usage.add(usage)
            await self._save(
                state,
                {
                    "phase": "one",
                    "rollouts": [rid],
                    "status": status,
                    "error": error,
                    "failure_kind": kind,
                    "duration_s": round(time.monotonic() - started, 3),
                    "requests": usage.requests,
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                },
                force=False,
            )

    def _failed(
        self, entry: gen_state.RolloutState, kind: FailureKind, error: str
    ) -> gen_state.RolloutState:
        return gen_state.record_failure(
            entry,
            kind,
            error,
            datetime.now(UTC),
            max_attempts=self.config.max_attempts,
            backoff_s=self.config.retry_backoff_s,
            backoff_max_s=self.config.retry_backoff_max_s,
            rng=random.Random(),
        )

    async def _record_timeout(self, report: FlushReport) -> None:
        """After ``flush_timeout_s``: the rollouts the flush did not finish are environment
        failures (pending, a retry time, no attempt used), and so is a consolidation it cut
        short; the requests they made are logged. Best effort: skipped when another process
        holds the lock."""
        finished = {*report.processed, *report.skipped, *report.failed}
        unfinished = [rid for rid in report.pending if rid not in finished]
        error = f"memory flush timed out after {self.config.flush_timeout_s}s"
        for rid in unfinished:
            report.failed[rid] = error
            report.failure_kinds[rid] = "environment"
        cut_short = report.phase_two == "not_run" and report.phase_two_usage.requests > 0
        if cut_short:
            report.phase_two, report.phase_two_error = "failed", error
            report.phase_two_failure_kind = "environment"
        base = {"time": utc_now(), "status": "pending", "error": error}
        records = []
        if unfinished:
            records.append(
                {**base, "phase": "one", "rollouts": unfinished, **_usage_fields(self._unlogged)}
            )
        if cut_short:
            records.append(
                {
                    **base,
                    "phase": "two",
                    "status": "failed",
                    **_usage_fields(report.phase_two_usage),
                }
            )
        try:
            async with _files.lock(self.session, self.paths.lock, timeout=1.0):
                state, _ = await gen_state.load(self.session, self.paths)
                for rid in unfinished:
                    if rid in state.rollouts:
                        state.rollouts[rid] = self._failed(
                            state.rollouts[rid], "environment", error
                        )
                if cut_short:
                    state.phase_two = gen_state.record_phase_two_failure(
                        state.phase_two, "environment", error, base["time"]
                    )
                await gen_state.save(self.session, self.paths, state)
                for record in records:
                    await append_log(
                        self.session, self.paths, {**record, "failure_kind": "environment"}
                    )
        except (SandboxError, OSError) as exc:
            logger.warning("could not record the flush timeout: %s", exc)

    async def _save_state(self, state: GenerationState) -> None:
        async with self._state_lock:
            await gen_state.save(self.session, self.paths, state)
            self._state_written_at = time.monotonic()

    async def _save(self, state: GenerationState, log: dict[str, Any], *, force: bool) -> None:
        """Append a log record, and write the state file when ``force`` or when the last write
        is older than ``STATE_WRITE_INTERVAL_S`` (a flush over many rollouts would otherwise
        rewrite a growing file after each one). The log and the raw memory headers are the
        record of what was done; the state file adds attempts, errors and retry times."""
        async with self._state_lock:
            await append_log(self.session, self.paths, {"time": utc_now(), **log})
            now = time.monotonic()
            if force or now - self._state_written_at >= STATE_WRITE_INTERVAL_S:
                await gen_state.save(self.session, self.paths, state)
                self._state_written_at = now

    # ------------------------------------------------------------ phase two

    async def _phase_two(
        self, state: GenerationState, report: FlushReport, provider: ModelProvider
    ) -> None:
        started = time.monotonic()
        cap = self.config.max_raw_memories_for_consolidation
        digest = await phase_two.inputs_digest(self.session, self.paths, cap)
        if digest is not None and digest == state.phase_two.inputs_digest:
            report.phase_two = "skipped"  # nothing plan reads changed since it found nothing
            return
        plan = await phase_two.plan(self.session, self.paths, cap)
        _trace.phase_two_plan(plan)
        for path, reason in plan.problems.items():
            self._problem(report, path, reason)
        if not plan.diff.changed:
            report.phase_two = "skipped"
            if not plan.problems and digest != state.phase_two.inputs_digest:
                state.phase_two = state.phase_two.model_copy(update={"inputs_digest": digest})
                await self._save_state(state)
            return
        ids = [r.rollout_id for r in plan.selected]
        now = utc_now()
        usage = report.phase_two_usage
        previous = state.phase_two
        try:
            result = await phase_two.consolidate(
                self.session, self.paths, self.config, self.redactor, plan, now, provider, usage
            )
        except Exception as exc:  # the stage is discarded already; recorded, never raised
            error = self.redactor.redact(str(exc))
            kind = gen_state.classify(exc)
            report.phase_two, report.phase_two_error = "failed", error
            report.phase_two_failure_kind = kind
            state.phase_two = gen_state.record_phase_two_failure(previous, kind, error, now)
            await self._save(
                state,
                {
                    "phase": "two",
                    "rollouts": ids,
                    "status": "failed",
                    "error": error,
                    "failure_kind": kind,
                    "duration_s": round(time.monotonic() - started, 3),
                    **_usage_fields(usage),
                },
                force=True,
            )
            if isinstance(exc, phase_two.EngineError) and _degrade.needs_fallback(
                self.config, None
            ):
                await fall_back(self, state, report, plan, error, provider, self._save_forced)
            return
        checked = result.verification
        missing = [r.rollout_id for r in checked.missing]
        still = [r.rollout_id for r in checked.still_cited]
        report.phase_two = result.outcome
        report.phase_two_missing = missing + still
        outcome_error = None if checked.ok else f"consolidation incomplete: {checked.describe()}"
        report.phase_two_error = outcome_error
        complete = result.outcome in ("done", "proposed") and not plan.problems
        state.phase_two = gen_state.PhaseTwoState(
            inputs_digest=await phase_two.inputs_digest(self.session, self.paths, cap)
            if complete
            else None,
            status=result.outcome,
            last_error=outcome_error,
            last_attempt_at=now,
            last_success_at=now,
            selection=phase_two.selection_summary(plan),
            missing_added=missing,
            still_cited=still,
        )
        await self._save(
            state,
            {
                "phase": "two",
                "rollouts": ids,
                "status": result.outcome,
                "error": outcome_error,
                "missing": report.phase_two_missing,
                "duration_s": round(time.monotonic() - started, 3),
                **_usage_fields(usage),
                "memory_bytes": await self.memory_bytes(),
            },
            force=True,
        )
        if result.outcome == "incomplete" and _degrade.needs_fallback(self.config, checked):
            assert outcome_error is not None
            await fall_back(self, state, report, plan, outcome_error, provider, self._save_forced)

    async def _save_forced(self, state: GenerationState, log: dict[str, Any]) -> None:
        await self._save(state, log, force=True)

    async def memory_bytes(self) -> int:
        """``MEMORY.md`` + ``memory_summary.md`` as consolidated (the viewer's size chart)."""
        found = await _files.stat_many(self.session, [self.paths.memory_md, self.paths.summary_md])
        return sum(stat.size for stat in found.values() if stat is not None)


def _usage_fields(usage: Usage) -> dict[str, int]:
    return {
        "requests": usage.requests,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
    }
