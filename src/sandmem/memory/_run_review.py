"""Review mode for a run (``MemoryReadConfig(live_update="propose")``): whatever tool of the run
changes the reviewed memory files — ``apply_patch`` (kept in an overlay, never written), or a
shell command (``printf >> MEMORY.md``, ``sed -i``, ``rm``, ``mv`` into ``skills/``, a link) —
the live files stay as approved and the change becomes the run's proposal.

    run start:  approved = the live set (MEMORY.md, memory_summary.md, skills/**) and the
                newest version's number
    run end (under the layout lock):
        what the run left  ─┬─ a file that differs from approved → proposed, approved put back
                            ├─ a file approved had that is gone  → proposed deletion, put back
                            ├─ a link, FIFO, socket in the set   → removed (never memory)
                            └─ the overlay of apply_patch        → proposed as well
        one proposal (redacted) through ``journal.propose``; the live set is as approved

A version made by another writer during the run (an approval, a consolidation) is approved
state too: when the newest version moved on, it is what the live set is put back to.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sandmem.memory import _files, history, journal, proposals
from sandmem.memory.history import Attribution
from sandmem.memory.layout import MemoryPaths
from sandmem.redaction import Redactor
from sandmem.sandboxes._session import SandboxSession
from sandmem.sandboxes._types import EntryKind

logger = logging.getLogger("sandmem.memory")

#: how long a run's end waits for the layout lock to file its proposal (a consolidation
#: holds it at most its flush timeout): the approved files are never left changed for a
#: later flush to version
REVIEW_LOCK_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Approved:
    """The reviewed files as a run found them (names relative to ``memories_dir``)."""

    files: dict[str, bytes]
    head: int | None


async def approved(session: SandboxSession, paths: MemoryPaths) -> Approved:
    """The approved state at a run's start."""
    head = await history.Store(session, paths).head()
    found = await _files.read_many(session, await journal.live_files(session, paths))
    files = {_name(paths, p): d for p, d in found.items() if d is not None}
    return Approved(files, head.seq if head is not None else None)


def _name(paths: MemoryPaths, path: str) -> str:
    return path[len(paths.memories_dir) + 1 :]


async def _left(session: SandboxSession, paths: MemoryPaths) -> dict[str, EntryKind]:
    """Every entry of the reviewed set now (not directories), by name: files, links, FIFOs."""
    top = await _files.entries(session, paths.memories_dir, depth=0)
    skills = await _files.entries(session, paths.skills_dir, depth=_files.MAX_DEPTH * 4)
    found = {p: e[0] for p, e in top.items() if p in (paths.memory_md, paths.summary_md)}
    found.update({p: e[0] for p, e in skills.items()})
    return {_name(paths, p): kind for p, kind in found.items()}


async def _base(session: SandboxSession, paths: MemoryPaths, start: Approved) -> dict[str, bytes]:
    head = await history.Store(session, paths).head()
    if head is None or head.seq == start.head:
        return dict(start.files)
    # another writer made a version during the run: that is the approved state now
    files = await history.version_files(session, paths, head)
    return {
        name: data
        for name, data in files.items()
        if journal.is_staged_path(paths, f"{paths.memories_dir}/{name}")
    }


async def propose_run(
    session: SandboxSession,
    paths: MemoryPaths,
    start: Approved,
    overlay: dict[str, bytes | None],
    attribution: Attribution,
    *,
    redactor: Redactor | None = None,
) -> proposals.Proposal | None:
    """Turn everything the run changed in the reviewed set into one proposal and put the
    approved files back (call under the layout lock)."""
    base = await _base(session, paths, start)
    changes: dict[str, bytes | None] = {}
    left = await _left(session, paths)
    current = await _files.read_many(
        session, [f"{paths.memories_dir}/{n}" for n, k in left.items() if k == EntryKind.FILE]
    )
    for name, kind in left.items():
        path = f"{paths.memories_dir}/{name}"
        if kind != EntryKind.FILE:
            logger.warning("review mode: removed %s, a %s the run left", path, kind.value)
            await _files.remove(session, path, missing_ok=True)
            if name not in base:
                continue
        data = current.get(path)
        if data != base.get(name):
            changes[name] = data
    changes.update({name: None for name in base if name not in left})
    for name in changes:
        path = f"{paths.memories_dir}/{name}"
        if name in base:
            await _files.write(session, path, base[name])
        else:
            await _files.remove(session, path, missing_ok=True)
    root = paths.memories_dir + "/"
    changes.update({p[len(root) :]: d for p, d in overlay.items() if p.startswith(root)})
    changes = {n: d for n, d in changes.items() if d != base.get(n)}
    if not changes:
        return None
    logger.info("review mode: the run's changes to %s are a proposal", sorted(changes))
    return await journal.propose(session, paths, changes, attribution, redactor=redactor)
