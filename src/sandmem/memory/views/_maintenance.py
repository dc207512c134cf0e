"""Looking after a layout's memory: what it holds, what is still pending, and forgetting.

These functions work through a ``SandboxSession`` on any backend; the public memory API
(``sandmem.memory.status``, ``list_conversations``, ``forget``, ...) is built on them:

- ``layout_files``: every file of a layout with its size;
- ``conversations``: each recorded conversation and whether its memory is done, pending,
  failed or skipped (the manager's own rules, read-only);
- ``memory_status``: the data behind ``status()`` and ``sandmem memory status``;
- ``forget_plan`` / ``forget_rollout``: what forgetting one conversation removes; doing it,
  then re-consolidating.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandmem._errors import MemoryNotFoundError, UserError
from sandmem.memory import _files, tombstones
from sandmem.memory import state as gen_state
from sandmem.memory._results import (
    ConsolidationInfo,
    ConversationCounts,
    ConversationInfo,
    DirSize,
    FileSize,
    MemoryStatus,
    PhaseTokens,
    TokensPerPhase,
)
from sandmem.memory.config import MemoryGenerateConfig
from sandmem.memory.layout import (
    MAX_DEPTH,
    RAW_DIR,
    SKILLS_DIR,
    SUMMARIES_DIR,
    MemoryPaths,
    list_files,
    parse_header,
    read_text,
)
from sandmem.memory.rollouts import utc_now, validate_rollout_id
from sandmem.memory.selection import SavedSelection
from sandmem.memory.state import PhaseTwoState
from sandmem.memory.views._index import (
    Listing,
    LogSummary,
    opened_index,
    summary_name,
)
from sandmem.sandboxes._session import SandboxSession

if TYPE_CHECKING:  # forgetting imports generation when it runs; looking never does
    from sandmem.memory.generation.manager import FlushReport


@dataclass(frozen=True)
class FileEntry:
    """A workspace-relative file and its size in bytes."""

    path: str
    size: int


async def layout_files(session: SandboxSession, paths: MemoryPaths) -> list[FileEntry]:
    """Every visible file under ``memories_dir`` and ``sessions_dir`` (hidden files such as
    the lock, phase two's journal and the index are left out), sorted by path. Sizes come
    from directory listings; nothing is read."""
    found: list[FileEntry] = []
    for top in (paths.memories_dir, paths.sessions_dir):
        for path, (size, _mtime) in (await list_files(session, top, MAX_DEPTH)).items():
            found.append(FileEntry(path, size))
    return sorted(found, key=lambda entry: entry.path)


async def conversations(
    session: SandboxSession,
    paths: MemoryPaths,
    *,
    limit: int | None = None,
    offset: int = 0,
) -> list[ConversationInfo]:
    """Each recorded conversation and the state of its memory (see ``ConversationInfo``),
    most recently updated first; ``offset`` and ``limit`` take one page of them (only that
    page's rows are built). The files' facts and the state entries come from the layout
    index (``_index``), refreshed for what changed."""
    return (await conversation_page(session, paths, limit=limit, offset=offset))[0]


async def conversation_page(
    session: SandboxSession,
    paths: MemoryPaths,
    *,
    limit: int | None = None,
    offset: int = 0,
) -> tuple[list[ConversationInfo], int]:
    """``conversations`` and how many conversations there are in all."""
    if (limit is not None and limit < 0) or offset < 0:
        raise UserError(f"limit and offset must not be negative, got {limit} and {offset}")
    # one page: list the rollout files only, and check that page's raw memories one by one
    part = "conversations" if limit is None else "rollouts"
    async with opened_index(session, paths, part) as index:
        page = index.infos(await index.checked(index.conversations(limit, offset)))
        return page, index.count()


async def rollout_statuses(session: SandboxSession, paths: MemoryPaths) -> list[dict[str, Any]]:
    """``conversations`` as JSON-ready dicts, sorted by rollout id."""
    rows = await conversations(session, paths)
    return [row.model_dump() for row in sorted(rows, key=lambda row: row.rollout_id)]


def token_totals(records: list[dict[str, Any]]) -> TokensPerPhase:
    """Phase runs and tokens spent, per phase, summed from log records."""
    summary = LogSummary()
    for record in records:
        summary.add(record)
    return _tokens(summary)


def _tokens(log: LogSummary) -> TokensPerPhase:
    """Phase runs and tokens spent, per phase, from the log's summary."""
    return TokensPerPhase(
        phase_one=PhaseTokens(**log.totals["one"]), phase_two=PhaseTokens(**log.totals["two"])
    )


def _last_consolidation(
    phase_two: PhaseTwoState, log: LogSummary, selection: SavedSelection
) -> ConsolidationInfo | None:
    last = log.last_two
    known = phase_two.status is not None
    last_success = phase_two.last_success_at or selection.updated_at
    if last is None and not known and last_success is None:
        return None
    ran = last is not None
    last = last or {}
    duration = last.get("duration_s")
    return ConsolidationInfo(
        time=last.get("time") or phase_two.last_attempt_at or last_success,
        status=last.get("status") or phase_two.status,
        error=last.get("error") if ran else phase_two.last_error,
        failure_kind=last.get("failure_kind") if ran else phase_two.failure_kind,
        missing=[str(m) for m in last.get("missing") or []] if ran else [],
        rollouts=len(last.get("rollouts") or []),
        duration_s=float(duration) if isinstance(duration, int | float) else None,
        last_success_at=last_success,
        selected=len(selection.refs) if selection.updated_at or selection.refs else None,
    )


def _sizes(paths: MemoryPaths, listing: Listing) -> tuple[dict[str, FileSize], dict[str, DirSize]]:
    files = {}
    for path in (paths.memory_md, paths.summary_md, paths.raw_memories_md):
        stat = listing.memories.get(path)
        files[path.rsplit("/", 1)[1]] = FileSize(path=path, bytes=None if stat is None else stat[0])
    dirs = {}
    for name, top, found in (
        (RAW_DIR, paths.raw_dir, listing.raw),
        (SUMMARIES_DIR, paths.summaries_dir, listing.summaries),
        (SKILLS_DIR, paths.skills_dir, listing.skills),
        ("sessions", paths.sessions_dir, listing.sessions),
    ):
        size = sum(stat[0] for stat in found.values())
        dirs[name] = DirSize(path=top, files=len(found), bytes=size)
    return files, dirs


async def memory_status(session: SandboxSession, paths: MemoryPaths) -> MemoryStatus:
    """Everything ``status()`` reports: how many conversations are in each state, the
    pending and failed ones (attempts, last error), the last consolidation, file sizes, and
    tokens spent per phase (from ``generation_log.jsonl``). All of it comes from the layout
    index: with nothing changed, a layout of 10,000 conversations costs its directory
    listings and builds no row per conversation."""
    async with opened_index(session, paths, "conversations", "sizes") as index:
        counts, wanted = index.status_counts()
        rows = index.infos(index.conversations(ids=wanted)) if wanted else []
        listing = index.listing
        phase_two = index.phase_two()
        log = await index.log_summary()
    files, dirs = _sizes(paths, listing)
    return MemoryStatus(
        workspace=str(session.root),
        memories_dir=paths.memories_dir,
        sessions_dir=paths.sessions_dir,
        counts=ConversationCounts(total=sum(counts.values()), **counts),
        conversations=rows,
        last_consolidation=_last_consolidation(
            phase_two, log, await gen_state.load_selection(session, paths)
        ),
        files=files,
        dirs=dirs,
        tokens=_tokens(log),
    )


# ---------------------------------------------------------------- showing and forgetting


async def rollout_summary_files(
    session: SandboxSession, paths: MemoryPaths, rollout_id: str
) -> list[str]:
    """The rollout summary files of a conversation: the one its raw memory names, plus any
    other whose header says ``session_id: <rollout_id>`` (left over from an older slug)."""
    found: list[str] = []
    name = summary_name(await read_text(session, paths.raw_memory_file(rollout_id)))
    if name is not None and await _files.exists(session, f"{paths.memories_dir}/{name}"):
        found.append(f"{paths.memories_dir}/{name}")
    if await _files.exists(session, paths.summaries_dir):
        for entry in await _files.listdir(session, paths.summaries_dir):
            path = f"{paths.summaries_dir}/{entry}"
            if path in found or not entry.startswith(f"{rollout_id}_"):
                continue
            text = await read_text(session, path) or ""
            if parse_header(text)[0].get("session_id") == rollout_id:
                found.append(path)
    return found


def checked_rollout_id(rollout_id: str) -> str:
    """``validate_rollout_id`` with a ``UserError`` (a CLI-friendly message) on failure."""
    try:
        return validate_rollout_id(rollout_id)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def unknown_conversation(paths: MemoryPaths, rid: str) -> MemoryNotFoundError:
    return MemoryNotFoundError(
        f"no conversation {rid!r} in {paths.sessions_dir}/ or {paths.memories_dir}/; "
        "`sandmem memory list` (or `sandmem.memory.list_conversations()`) lists the known ones",
        path=paths.rollout_file(rid),
        rollout_id=rid,
    )


@dataclass(frozen=True)
class ForgetPlan:
    """What forgetting one conversation removes: its files, whether it has a state entry,
    and whether it is the last conversation in the consolidated memory."""

    rollout_id: str
    files: list[str]
    state_entry: bool
    clears_memory: bool


async def forget_plan(session: SandboxSession, paths: MemoryPaths, rollout_id: str) -> ForgetPlan:
    """What ``forget_rollout`` would remove, changing nothing. Raises ``UserError`` for an
    invalid id and ``MemoryNotFoundError`` for an unknown one."""
    rid = checked_rollout_id(rollout_id)
    files = await rollout_summary_files(session, paths, rid)
    found = await _files.stat_many(session, [paths.raw_memory_file(rid), paths.rollout_file(rid)])
    files += [path for path, st in found.items() if st is not None]
    in_state = rid in (await gen_state.load(session, paths))[0].rollouts
    if not files and not in_state:
        raise unknown_conversation(paths, rid)
    from sandmem.memory.generation.phase_two import load_raw_memories

    consolidated = bool((await gen_state.load_selection(session, paths)).refs)
    others = [r for r in await load_raw_memories(session, paths) if r != rid]
    return ForgetPlan(rid, files, in_state, consolidated and not others)


async def _forget_files(session: SandboxSession, paths: MemoryPaths, rid: str) -> ForgetPlan:
    plan = await forget_plan(session, paths, rid)
    for path in plan.files:
        await _files.remove(session, path)
    state = (await gen_state.load(session, paths))[0]
    if state.rollouts.pop(rid, None) is not None:
        await gen_state.save(session, paths, state)
    await tombstones.add(session, paths, rid)  # so an ingest does not bring it back
    return plan


async def _clear_consolidated(session: SandboxSession, paths: MemoryPaths) -> None:
    """No raw memory is left: the consolidated memory would only repeat forgotten facts, and
    consolidation refuses to leave ``MEMORY.md`` empty, so empty it here."""
    await _files.write(session, paths.memory_md, b"")
    await _files.write(session, paths.summary_md, b"")
    for path in (paths.raw_memories_md, paths.consolidated_memory_md):
        if await _files.exists(session, path):
            await _files.remove(session, path)
    await gen_state.save_selection(session, paths, [], utc_now())


async def forget_rollout(
    session: SandboxSession,
    paths: MemoryPaths,
    rollout_id: str,
    config: MemoryGenerateConfig,
) -> tuple[ForgetPlan, FlushReport]:
    """Forget one conversation: remove its rollout file, raw memory, rollout summaries and
    state entry, then re-consolidate with ``config`` (phase two is told the rollout was
    removed and drops what only it supported). When no raw memory is left, ``MEMORY.md`` and
    ``memory_summary.md`` are emptied instead (skills are kept).

    Raises ``UserError`` for an invalid id, ``MemoryNotFoundError`` for an unknown one, and
    ``SandboxError`` when a lock stays held. A failed re-consolidation does not raise: it is
    in the flush report (the next generation retries it).
    """
    from sandmem.memory import journal
    from sandmem.memory.generation._attach import get_manager
    from sandmem.memory.generation.manager import LOCK_TIMEOUT_S
    from sandmem.memory.generation.phase_two import load_raw_memories
    from sandmem.memory.history import Attribution

    rid = checked_rollout_id(rollout_id)
    manager = get_manager(session, paths, config)
    await manager.prepare()
    # one version, attributed to this forget: the re-consolidation's, or the cleared files'
    attribution = Attribution("forget", rollouts_removed=(rid,))
    with journal.attributed(attribution):
        async with _files.lock(session, paths.lock, timeout=LOCK_TIMEOUT_S):
            async with _files.lock(session, f"{paths.sessions_dir}/.lock", timeout=LOCK_TIMEOUT_S):
                plan = await _forget_files(session, paths, rid)
            consolidated = bool((await gen_state.load_selection(session, paths)).refs)
            if consolidated and not await load_raw_memories(session, paths):
                await _clear_consolidated(session, paths)
                await journal.notice(session, paths, attribution)
        return plan, await manager.flush()
