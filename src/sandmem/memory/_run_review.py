"""Review mode for a run (``MemoryReadConfig(live_update="propose")``): whatever tool of the run
changes memory — ``apply_patch`` (kept in an overlay, never written), a shell command
(``printf >> MEMORY.md``, ``sed -i``, ``rm``, ``mv`` into ``skills/``, a link), a function tool
of the developer's writing through the session — the live files stay as approved and the
change becomes the run's proposal. The check is made on what the run left, so it holds
whatever tool made the change.

    run start:  approved = the live set (MEMORY.md, memory_summary.md, skills/**) and the
                newest version's number; the digest of every file generation derives
                (rollout_summaries/**, raw_memories/**, raw_memories.md)
    run end (under the layout lock):
        the live set      ─┬─ a file that differs from approved → proposed, approved put back
                           ├─ a file approved had that is gone  → proposed deletion, put back
                           ├─ a link, FIFO, socket in the set   → removed (never memory)
                           └─ the overlay of apply_patch        → proposed as well
        derived files     ─┬─ changed, new, gone, a link...     → removed; the conversation's
                           │                                      raw memory too, so the next
                           │                                      flush extracts it again from
                           │                                      its transcript
                           └─ unchanged                         → left alone
        one proposal (redacted) through ``journal.propose``; the live set is as approved

Derived files are not proposed: generation writes them from transcripts (a proposal could not
be approved into them without a version of its own), and a run reads them as they were made,
so a run's change to one is undone, never kept. Their digests, not their bytes, are held for
the run: the files are made again by extraction, which costs no more than the next flush
would spend on the conversation anyway.

A version made by another writer during the run (an approval, a consolidation) is approved
state too: when the newest version moved on, it is what the live set is put back to. A
derived file another writer (a flush in another process) wrote during the run is undone like
the run's own: its conversation is extracted again at the next flush.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field

from sandmem.memory import _files, history, journal, proposals
from sandmem.memory.history import Attribution
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.rollouts import ROLLOUT_ID_PATTERN
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
    #: the SHA-256 of each file generation derives (``rollout_summaries/**``,
    #: ``raw_memories/**``, ``raw_memories.md``), by workspace path
    derived: dict[str, str] = field(default_factory=dict)
    #: ``raw_memories.md`` as it was (phase two's input document: put back, not rebuilt)
    raw_document: bytes | None = None


async def approved(session: SandboxSession, paths: MemoryPaths) -> Approved:
    """The approved state at a run's start."""
    head = await history.Store(session, paths).head()
    found = await _files.read_many(session, await journal.live_files(session, paths))
    files = {_name(paths, p): d for p, d in found.items() if d is not None}
    derived, _others = await _derived(session, paths)
    document = None
    if paths.raw_memories_md in derived:
        document = (await _files.read_isolated(session, [paths.raw_memories_md]))[0].get(
            paths.raw_memories_md
        )
    return Approved(files, head.seq if head is not None else None, derived, document)


async def _derived(session: SandboxSession, paths: MemoryPaths) -> tuple[dict[str, str], list[str]]:
    """The digest of every regular file generation derives, and every other entry there (a
    link, a FIFO, a socket: never one of generation's). Hidden names count: a run's shell
    may make them."""
    depth = _files.MAX_DEPTH * 4
    found: dict[str, EntryKind] = {}
    for top in (paths.summaries_dir, paths.raw_dir):
        listed = await _files.entries(session, top, depth=depth, hidden=True)
        found.update({p: e[0] for p, e in listed.items()})
    top_level = await _files.entries(session, paths.memories_dir, depth=0, hidden=True)
    if paths.raw_memories_md in top_level:
        found[paths.raw_memories_md] = top_level[paths.raw_memories_md][0]
    regular = [p for p, kind in found.items() if kind == EntryKind.FILE]
    data, _problems = await _files.read_isolated(session, regular)
    digests = {p: hashlib.sha256(d).hexdigest() for p, d in data.items() if d is not None}
    return digests, sorted(p for p in found if p not in digests)


def _name(paths: MemoryPaths, path: str) -> str:
    return path[len(paths.memories_dir) + 1 :]


async def _left(session: SandboxSession, paths: MemoryPaths) -> dict[str, EntryKind]:
    """Every entry of the reviewed set now (not directories), by name: files, links, FIFOs."""
    top = await _files.entries(session, paths.memories_dir, depth=0)
    skills = await _files.entries(session, paths.skills_dir, depth=_files.MAX_DEPTH * 4)
    found = {p: e[0] for p, e in top.items() if p in (paths.memory_md, paths.summary_md)}
    found.update({p: e[0] for p, e in skills.items()})
    return {_name(paths, p): kind for p, kind in found.items()}


def _not_approval(version: history.Version) -> str | None:
    """Why a version made during a review-mode run is no approved state (``None``: it is).
    A ``hand_edit`` version is a change found on the live files that no sandmem writer made:
    during the run, that may be the run's own shell (another process's flush noticed it)."""
    if not version.proven():
        return "carries no valid proof (a record sandmem did not write)"
    if version.attribution.kind == "hand_edit":
        return "versions a change made to the live files outside sandmem, maybe by the run"
    return None


def _number(name: str) -> int:
    """The version number a record's name gives (``00000012-<epoch>-<tag>.json``)."""
    head = name.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


async def _base(session: SandboxSession, paths: MemoryPaths, start: Approved) -> dict[str, bytes]:
    """The approved state now: as the run found it, or the newest version another writer
    made since — of the versions made during the run, only the unbroken run of signed ones
    (``Version.proven``) after the start: a record the run's shell wrote is no approval."""
    store = history.Store(session, paths)
    since = start.head or 0
    names = [n for n in await store.version_names() if _number(n) > since]
    newer = [v for v in await store.read_versions(names) if v.seq > since]
    approved_head: history.Version | None = None
    for version in newer:
        why = _not_approval(version)
        if why is not None:
            logger.warning(
                "review mode: version %d, made during the run, %s: it and the versions after "
                "it are not taken for approved memory (their changes are in the run's proposal)",
                version.seq,
                why,
            )
            break
        approved_head = version
    if approved_head is None:
        return dict(start.files)
    # another writer made a version during the run: that is the approved state now
    files = await history.version_files(session, paths, approved_head)
    return {
        name: data
        for name, data in files.items()
        if journal.is_staged_path(paths, f"{paths.memories_dir}/{name}")
    }


async def _clear_wrong_kinds(session: SandboxSession, paths: MemoryPaths) -> None:
    """A folder of the layout replaced by a link or a file, or a directory or special file
    where ``MEMORY.md`` or the summary belongs: removed (the link itself, nothing followed),
    and the folder made again, so what follows reads and puts back real files."""
    folders = (paths.skills_dir, paths.summaries_dir, paths.raw_dir)
    files = (paths.memory_md, paths.summary_md, paths.raw_memories_md)
    for path in (*folders, *files):
        kind = await _files.kind(session, path)
        wanted = EntryKind.DIRECTORY if path in folders else EntryKind.FILE
        if kind is None or kind == wanted:
            continue
        logger.warning("review mode: removed %s, a %s the run left", path, kind.value)
        await _files.remove(session, path, recursive=kind == EntryKind.DIRECTORY)
        if path in folders:
            await _files.mkdir(session, path)


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
    approved files back (call under the layout lock); undo its changes to derived files.

    When ``apply_patch`` (the overlay) and another tool (a shell) both changed one file in
    different ways, the overlay's version is in the proposal and the other tool's is a
    second proposal of its own: approving one makes the other stale, nothing is lost."""
    await _clear_wrong_kinds(session, paths)
    try:
        return await _propose_live(session, paths, start, overlay, attribution, redactor)
    finally:  # whatever became of the proposal, the derived files are as the run found them
        await _undo_derived(session, paths, start)


async def _propose_live(
    session: SandboxSession,
    paths: MemoryPaths,
    start: Approved,
    overlay: dict[str, bytes | None],
    attribution: Attribution,
    redactor: Redactor | None,
) -> proposals.Proposal | None:
    base = await _base(session, paths, start)
    live = await _live_changes(session, paths, base)
    for name in live:
        path = f"{paths.memories_dir}/{name}"
        if name in base:
            await _files.write(session, path, base[name])
        else:
            await _files.remove(session, path, missing_ok=True)
    root = paths.memories_dir + "/"
    patched = {p[len(root) :]: d for p, d in overlay.items() if p.startswith(root)}
    changes = {**live, **patched}
    changes = {n: d for n, d in changes.items() if d != base.get(n)}
    apart = {
        n: d
        for n, d in live.items()
        if n in patched and d != patched[n] and not _holds(base.get(n), d, patched[n])
    }
    if not changes:
        return None
    logger.info("review mode: the run's changes to %s are a proposal", sorted(changes))
    made = await journal.propose(session, paths, changes, attribution, redactor=redactor)
    if apart:
        logger.warning(
            "review mode: apply_patch and another tool both changed %s; the other tool's "
            "version is a proposal of its own",
            ", ".join(sorted(apart)),
        )
        await journal.propose(session, paths, apart, attribution, redactor=redactor)
    return made


async def _live_changes(
    session: SandboxSession, paths: MemoryPaths, base: dict[str, bytes]
) -> dict[str, bytes | None]:
    """What the run changed in the live set (``None``: deleted), links and special files it
    left there removed."""
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
    return changes


def _holds(base: bytes | None, other: bytes | None, patched: bytes | None) -> bool:
    """Whether ``patched`` already holds ``other``'s change of ``base`` (the patch was made
    after it, on top of it): every line it added is there, and no line it removed is."""
    if other is None or patched is None:
        return other is patched
    before = set((base or b"").splitlines())
    lines = other.splitlines()
    after = set(patched.splitlines())
    added = set(lines) - before
    removed = before - set(lines)
    return added <= after and not (removed & after)


async def _undo_derived(session: SandboxSession, paths: MemoryPaths, start: Approved) -> list[str]:
    """Remove every derived file that is not as the run found it (changed, new, a link or
    special file) and the raw memory of each conversation such a file or a file that is gone
    belongs to, so the next flush extracts it again from its transcript. Returns the paths
    removed."""
    now, others = await _derived(session, paths)
    touched = sorted(
        {p for p, d in now.items() if start.derived.get(p) != d}
        | {p for p in start.derived if p not in now}
        | set(others)
    )
    if not touched:
        return []
    conversations = _conversations(paths, touched, {*start.derived, *now, *others})
    removed = sorted(
        {p for p in touched if p in now or p in others}
        | {paths.raw_memory_file(rid) for rid in conversations}
    )
    for path in removed:
        await _files.remove(session, path, missing_ok=True)
    document = start.raw_document
    if paths.raw_memories_md in touched and document is not None:
        if hashlib.sha256(document).hexdigest() == start.derived.get(paths.raw_memories_md):
            await _files.write(session, paths.raw_memories_md, document)
    logger.warning(
        "review mode: the run changed %d file(s) memory generation writes (%s); they are "
        "removed, and %s extracted again from %s at the next flush",
        len(touched),
        ", ".join(touched[:5]) + (", ..." if len(touched) > 5 else ""),
        ", ".join(sorted(conversations)[:5]) or "no conversation is",
        "its transcript" if len(conversations) == 1 else "their transcripts",
    )
    return removed


def _conversations(paths: MemoryPaths, touched: list[str], known: set[str]) -> set[str]:
    """The conversations the touched derived files belong to: ``raw_memories/<id>.md``, and
    ``rollout_summaries/<id>_<slug>.md`` for every known raw memory's id that prefixes it."""
    raw = f"{paths.raw_dir}/"
    ids = {
        p[len(raw) : -3]
        for p in known
        if p.startswith(raw) and p.endswith(".md") and "/" not in p[len(raw) :]
    }
    ids = {rid for rid in ids if ROLLOUT_ID_PATTERN.match(rid)}
    found: set[str] = set()
    summaries = f"{paths.summaries_dir}/"
    for path in touched:
        if path.startswith(raw):
            stem = path[len(raw) :].removesuffix(".md")
            found.update({stem} & ids)
        elif path.startswith(summaries):
            name = path[len(summaries) :]
            found.update(rid for rid in ids if name.startswith(f"{rid}_"))
    return found
