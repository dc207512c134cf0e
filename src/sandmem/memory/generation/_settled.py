"""The settled check: whether a flush has nothing to do, from directory listings alone.

A flush that did nothing certifies the files it read (``.settled.json``: a digest of their
names, sizes and mtimes, ``state.save_settled``); the next flush lists the same directories
and, when nothing changed, skips the reconcile, phase one and phase two (``Settled.quiet``).
A flush that may change what was certified withdraws the certificate first.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from sandmem._errors import SandboxError
from sandmem.memory import _files
from sandmem.memory import state as gen_state
from sandmem.memory.config import MemoryGenerateConfig
from sandmem.memory.generation._record import FlushReport
from sandmem.memory.layout import (
    INDEX_DB,
    INDEX_LOCK,
    LOCK,
    MAX_DEPTH,
    SETTLED_JSON,
    MemoryPaths,
    list_files,
    listing_digest,
)
from sandmem.memory.state import GenerationState
from sandmem.sandboxes._session import SandboxSession
from sandmem.sandboxes._types import EntryKind

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


def did_nothing(report: FlushReport) -> bool:
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
class Settled:
    """What the check found: the view of the files now (``None``: too new to trust), whether
    the raw memories hold a write's temp, the stored certificate, and whether they agree."""

    session: SandboxSession
    paths: MemoryPaths
    view: dict[str, Any] | None
    temps: bool
    stored: dict[str, Any] | None
    quiet: bool

    async def withdraw(self) -> None:
        """This flush may change what was certified: the certificate goes first."""
        if self.stored is not None:
            await gen_state.save_settled(self.session, self.paths, None)

    async def certify(self, state: GenerationState, wrote: bool, report: FlushReport) -> None:
        """After a flush that wrote and did nothing, certify the files it leaves."""
        if self.view is not None and not wrote and did_nothing(report):
            failed = sum(e.status == "failed" for e in state.rollouts.values())
            await gen_state.save_settled(self.session, self.paths, {**self.view, "failed": failed})


async def check(
    session: SandboxSession, paths: MemoryPaths, config: MemoryGenerateConfig, retry_failed: bool
) -> Settled:
    """The settled check of one flush (under the layout lock)."""
    view, temps = await settled_view(session, paths, config)
    stored = await gen_state.load_settled(session, paths)
    quiet = view is not None and stored is not None
    quiet = quiet and _nothing_to_do(stored or {}, view or {}, retry_failed)
    return Settled(session, paths, view, temps, stored, quiet)


async def settled_view(
    session: SandboxSession, paths: MemoryPaths, config: MemoryGenerateConfig
) -> tuple[dict[str, Any] | None, bool]:
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
    memories = await _stat_dir(session, paths.memories_dir)
    sessions = await _stat_dir(session, paths.sessions_dir)
    try:
        raw = sorted(await _files.listdir(session, paths.raw_dir))
    except SandboxError:
        raw = []  # not there (yet)
    temps = "\0." in "\0" + "\0".join(raw)  # a hidden name: a write's temp
    skills = await list_files(session, paths.skills_dir, MAX_DEPTH)
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
    cap = config.max_raw_memories_for_consolidation
    return {"version": 2, "files": digest, "cap": cap}, temps


async def _stat_dir(
    session: SandboxSession, directory: str
) -> list[tuple[str, EntryKind, int, int | None]]:
    try:
        return await _files.stat_dir(session, directory)
    except SandboxError:
        return []  # not there (yet): no rollouts
