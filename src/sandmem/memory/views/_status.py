"""What a layout's memory holds and what is still pending (read only).

These functions work through a ``SandboxSession`` on any backend; the public memory API
(``sandmem.memory.status``, ``list_conversations``, ``show``, ...) is built on them:

- ``layout_files``: every file of a layout with its size;
- ``conversations``: each recorded conversation and whether its memory is done, pending,
  failed or skipped (the manager's own rules, read-only);
- ``memory_status``: the data behind ``status()`` and ``sandmem memory status``;
- ``rollout_summary_files``, ``checked_rollout_id``, ``unknown_conversation``: finding one
  conversation's files (``show`` and ``forget``, which lives in the memory API, use them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandmem._errors import MemoryNotFoundError, UserError
from sandmem.memory import _files
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
from sandmem.memory.rollouts import validate_rollout_id
from sandmem.memory.selection import SavedSelection
from sandmem.memory.state import PhaseTwoState
from sandmem.memory.views._index import (
    Listing,
    LogSummary,
    opened_index,
    summary_name,
)
from sandmem.memory.views._index_search import search_info
from sandmem.sandboxes._session import SandboxSession

if TYPE_CHECKING:  # forgetting imports generation when it runs; looking never does
    pass


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
        search = search_info(index)
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
        search=search,
    )


# ---------------------------------------------------------------- one conversation


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
