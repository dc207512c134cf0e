"""The pending scan: which rollouts changed since the state was written, and which are due.

``reconcile`` brings every rollout's state entry in line with its files and returns the due
ones, reading as little as possible (``scan``): a rollout whose file and raw memory keep the
size and mtime its entry recorded is trusted without a read; the others are read in bounded
batches, and their bytes are kept (within ``_PREFETCH_BYTES``) so phase one reads each
pending rollout once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from sandmem._errors import SandboxError
from sandmem.memory import _files
from sandmem.memory import state as gen_state
from sandmem.memory._records import Problem
from sandmem.memory.generation._record import FlushRecord
from sandmem.memory.layout import (
    NOT_REGULAR,
    MemoryPaths,
    RolloutFingerprint,
    fingerprint,
    is_up_to_date,
    read_isolated,
)
from sandmem.memory.recording import rollout_ids
from sandmem.memory.state import GenerationState
from sandmem.sandboxes._session import FileStat, SandboxSession
from sandmem.sandboxes._types import EntryKind

#: rollout files read at once when looking for pending rollouts
_PENDING_BATCH = 32
#: files stat-ed at once when looking for pending rollouts
_STAT_BATCH = 1024
#: rollout bytes the pending scan keeps for phase one (beyond that, phase one reads again)
_PREFETCH_BYTES = 64 * 1024 * 1024

StatPair = tuple[int, int]


@dataclass
class Scan:
    """What the pending scan found: the listed rollout ids, their (file, raw memory) stats,
    those unchanged since the state was written, and for the others their fingerprint and
    raw memory text (and, within budget, their bytes)."""

    ids: list[str]
    stats: dict[str, tuple[StatPair | None, StatPair | None]] = field(default_factory=dict)
    unchanged: set[str] = field(default_factory=set)
    missing: set[str] = field(default_factory=set)
    fingerprints: dict[str, tuple[RolloutFingerprint, str | None]] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)


def stat_pair(found: FileStat | None) -> StatPair | None:
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


def _trusted(entry: gen_state.RolloutState | None, file_stat: StatPair | None, raw: object) -> bool:
    return (
        entry is not None
        and file_stat is not None
        and entry.segments is not None
        and entry.updated_at is not None
        and entry.file_stat == file_stat
        and entry.raw_stat == raw
    )


async def scan(
    session: SandboxSession, paths: MemoryPaths, state: GenerationState, record: FlushRecord
) -> Scan:
    """Find what changed since the state was written, reading as little as possible.

    Every rollout file and raw memory is ``stat``-ed (no reading). A rollout whose file and
    raw memory both have the size and mtime its state entry recorded is trusted as it is.
    The others are read (in bounded batches) to get their fingerprint and raw memory; the
    rollout bytes are kept, up to ``_PREFETCH_BYTES`` in all, so phase one reads each
    pending rollout once. An unreadable rollout file is reported and left out; an
    unreadable raw memory counts as missing."""
    found = Scan(await rollout_ids(session, paths))
    rollout_files = [paths.rollout_file(r) for r in found.ids]
    raw_files = [paths.raw_memory_file(r) for r in found.ids]
    stats, listed = await _listed_stats(session, [paths.sessions_dir, paths.raw_dir])
    unlisted = [
        p
        for p in [*rollout_files, *raw_files]
        if p not in stats and p.rsplit("/", 1)[0] not in listed
    ]
    stats.update(await _stat_isolated(session, unlisted) if unlisted else {})
    changed: list[str] = []
    for rid, path, raw_path in zip(found.ids, rollout_files, raw_files, strict=True):
        found.stats[rid] = (stat_pair(stats.get(path)), stat_pair(stats.get(raw_path)))
        file_stat, raw_stat = found.stats[rid]
        if _trusted(state.rollouts.get(rid), file_stat, raw_stat):
            found.unchanged.add(rid)
        else:
            changed.append(rid)
    await _read_changed(session, paths, changed, found, record)
    return found


async def _read_changed(
    session: SandboxSession,
    paths: MemoryPaths,
    changed: list[str],
    found: Scan,
    record: FlushRecord,
) -> None:
    held = 0
    for start in range(0, len(changed), _PENDING_BATCH):
        batch = changed[start : start + _PENDING_BATCH]
        files = [paths.rollout_file(r) for r in batch]
        rollouts, bad = await read_isolated(session, files)
        record.problems(Problem(path, reason) for path, reason in bad.items())
        batch_raw = [paths.raw_memory_file(r) for r in batch]
        raws, _bad_raw = await read_isolated(session, batch_raw)
        for rid, path, raw_path in zip(batch, files, batch_raw, strict=True):
            data = rollouts.get(path)
            if data is None:
                if path not in bad:
                    record.problem(Problem(path, NOT_REGULAR))
                found.missing.add(rid)
                continue
            raw = raws.get(raw_path)
            text = raw.decode("utf-8", "replace") if raw is not None else None
            found.fingerprints[rid] = (fingerprint(data), text)
            if held + len(data) <= _PREFETCH_BYTES:
                found.data[rid] = data
                held += len(data)


async def reconcile(
    record: FlushRecord, state: GenerationState, retry_failed: bool, wait_backoff: bool
) -> tuple[set[str], Scan]:
    """Bring every rollout's state in line with its files; return the due ones (and the scan,
    whose bytes phase one reads). A pending rollout that is not due is ``deferred``."""
    report, paths = record.report, record.paths
    now = datetime.now(UTC)
    due: set[str] = set()
    found = await scan(record.session, paths, state, record)
    present = set(found.fingerprints) | found.unchanged
    for rid in [r for r in state.rollouts if r not in present]:
        if paths.rollout_file(rid) not in report.problems:
            del state.rollouts[rid]  # its rollout file is gone
    for rid in sorted(present):
        if rid in found.unchanged:
            entry = state.rollouts[rid]
        else:
            fp, raw = found.fingerprints[rid]
            up = is_up_to_date(raw, fp)
            entry = gen_state.reconcile(state.rollouts.get(rid), fp.segments, fp.updated_at, up)
            file_stat, raw_stat = found.stats[rid]
            entry = entry.model_copy(update={"file_stat": file_stat, "raw_stat": raw_stat})
        if retry_failed and entry.status == "failed":
            entry = entry.model_copy(update={"status": "pending", "attempts": 0})
        state.rollouts[rid] = entry
        if gen_state.is_due(entry, now, retry_failed=retry_failed, wait_backoff=wait_backoff):
            due.add(rid)
        elif entry.status == "pending":
            report.deferred.append(rid)
    return due, found
