"""The memory API's looking functions: ``status``, ``list_conversations``, ``reindex``,
``list_files``, ``show``, ``search``, ``view_html`` (each with its ``*_sync`` twin).

Every function takes a *target* — a live ``SandboxSession`` or the path of a workspace
directory (used in place, like the CLI's ``--workspace``) — and an optional
``MemoryLayoutConfig`` (default: ``memories/`` and ``sessions/``). Each is async, with a
``*_sync`` twin for scripts (the twins refuse to run inside a running event loop). Results are
the pydantic models of ``sandmem.memory._results``; the ``sandmem memory`` commands print
their JSON. None of them changes a memory file (only the derived layout index).

Errors: ``MemoryNotFoundError`` (no memory layout, an unknown conversation),
``MemoryLockedError`` (another process holds the layout's lock), ``UserError`` (an invalid id
or option).
"""

from __future__ import annotations

from sandmem._errors import UserError
from sandmem.memory import _files
from sandmem.memory._results import (
    ConversationInfo,
    FileSize,
    IndexReport,
    MemoryFile,
    MemoryFileKind,
    MemoryStatus,
    SearchResults,
)
from sandmem.memory.api._target import MemoryTarget, open_target, run_sync
from sandmem.memory.config import MemoryLayoutConfig
from sandmem.memory.layout import read_text
from sandmem.memory.views import _status
from sandmem.memory.views._index import opened_index, rebuild_index
from sandmem.memory.views._viewer import PAGE_SIZE
from sandmem.sandboxes._session import SandboxSession


async def status(target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None) -> MemoryStatus:
    """The state of a layout's memory: every conversation (status, attempts, failure class,
    next retry, last error), the last consolidation, file sizes, and tokens spent per phase.
    Changes no memory file (only the derived layout index)."""
    async with open_target(target, layout) as (session, paths, _):
        return await _status.memory_status(session, paths)


async def list_conversations(
    target: MemoryTarget,
    *,
    layout: MemoryLayoutConfig | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[ConversationInfo]:
    """Every recorded conversation, most recently updated first: its status, dates, task
    (first user message) and rollout summary file. ``offset`` and ``limit`` take one page
    (``limit=None``: all the rest)."""
    async with open_target(target, layout) as (session, paths, _):
        return await _status.conversations(session, paths, limit=limit, offset=offset)


async def reindex(target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None) -> IndexReport:
    """Rebuild the layout's index (``<memories_dir>/.index.sqlite``) from the files. Never
    needed for correctness (every read checks the index against the files and derives again
    what differs); it is the way to pay the full cost up front, or to start over."""
    async with open_target(target, layout) as (session, paths, _):
        return await rebuild_index(session, paths)


async def list_files(
    target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None
) -> list[FileSize]:
    """Every visible file of the layout (under ``memories_dir`` and ``sessions_dir``; hidden
    ones such as locks and phase two's journal are left out) with its size, sorted by path."""
    async with open_target(target, layout) as (session, paths, _):
        entries = await _status.layout_files(session, paths)
    return [FileSize(path=e.path, bytes=e.size) for e in entries]


async def _file(
    session: SandboxSession,
    kind: MemoryFileKind,
    path: str | None,
    rollout_id: str | None,
) -> MemoryFile:
    text = await read_text(session, path) if path is not None else None
    return MemoryFile(
        kind=kind,
        rollout_id=rollout_id,
        path=path,
        exists=text is not None,
        empty=text is not None and not text.strip(),
        text=text or "",
    )


async def show(
    target: MemoryTarget,
    what: MemoryFileKind | None = None,
    rollout_id: str | None = None,
    *,
    layout: MemoryLayoutConfig | None = None,
) -> MemoryFile:
    """One memory file: ``"summary"`` (``memory_summary.md``), ``"memory"``
    (``MEMORY.md``), or a conversation's ``"rollout_summary"``, ``"raw_memory"`` or
    ``"rollout"`` (its recorded run segments, ``<sessions_dir>/<rollout_id>.jsonl``); these
    need ``rollout_id``. ``what`` defaults to ``"rollout_summary"`` when a ``rollout_id`` is
    given, else to ``"summary"``.

    A missing file is not an error (``exists`` is ``False``), nor an empty one (``empty``);
    an unknown conversation raises ``MemoryNotFoundError``.
    """
    if what is None:
        what = "summary" if rollout_id is None else "rollout_summary"
    if what in ("summary", "memory"):
        if rollout_id is not None:
            raise UserError(f"show({what!r}) takes no rollout_id")
    elif what in ("rollout_summary", "raw_memory", "rollout"):
        if rollout_id is None:
            raise UserError(f"show({what!r}) needs the conversation's rollout_id")
    else:
        raise UserError(
            "show() shows 'summary', 'memory', 'rollout_summary', 'raw_memory' or 'rollout', "
            f"not {what!r}"
        )
    async with open_target(target, layout) as (session, paths, _):
        if what == "summary":
            return await _file(session, what, paths.summary_md, None)
        if what == "memory":
            return await _file(session, what, paths.memory_md, None)
        assert rollout_id is not None
        rid = _status.checked_rollout_id(rollout_id)
        found = await _status.rollout_summary_files(session, paths, rid)
        raw_path = paths.raw_memory_file(rid)
        known = (
            bool(found)
            or await _files.exists(session, paths.rollout_file(rid))
            or await _files.exists(session, raw_path)
        )
        if not known:
            raise _status.unknown_conversation(paths, rid)
        if what == "raw_memory":
            return await _file(session, what, raw_path, rid)
        if what == "rollout":
            return await _file(session, what, paths.rollout_file(rid), rid)
        return await _file(session, what, found[0] if found else None, rid)


async def search(
    target: MemoryTarget,
    query: str,
    limit: int = 10,
    *,
    layout: MemoryLayoutConfig | None = None,
    transcripts: bool = True,
) -> SearchResults:
    """Ranked search (BM25, stemmed) over distilled memory — the sections of ``MEMORY.md``,
    the rollout summaries and the skills — and, with ``transcripts`` (the default), over the
    recorded conversations (``<sessions_dir>/*.jsonl``, redacted passages); at most ``limit``
    hits, best first. Distilled memory comes first; a transcript passage goes before a
    distilled hit only when it covers more of the query (``hit.tier`` tells them apart; a
    transcript hit names its ``rollout_id``, ``segment`` and ``summary_file``). Any word of
    ``query`` may match; a query with no words or no match gives no hits."""
    if limit < 1:
        raise UserError(f"the search limit must be at least 1, got {limit}")
    parts = ("search", "transcripts") if transcripts else ("search",)
    async with open_target(target, layout) as (session, paths, _):
        async with opened_index(session, paths, *parts) as index:
            hits = await index.search_hits(query, limit, transcripts=transcripts)
    return SearchResults(query=query, hits=hits, ranking=index.ranking)


async def view_html(
    target: MemoryTarget,
    *,
    layout: MemoryLayoutConfig | None = None,
    title: str | None = None,
    page: int = 1,
    page_size: int | None = PAGE_SIZE,
) -> str:
    """One self-contained HTML page of the layout's memory (the page ``sandmem memory view``
    writes): the summary, ``MEMORY.md`` linked to the rollout summaries it cites, every
    conversation, the last consolidation's selection, the generation runs and the memory's
    size over time. It loads nothing from the network and escapes all text; a file that
    cannot be read is left out and named on the page. ``title`` labels the page (default:
    the workspace's path). A layout with more than ``page_size`` conversations (default
    100; ``None``: no limit) shows one page of them, newest first (``page``, 1-based), with
    only the rollout summaries and runs of that page and those ``MEMORY.md`` cites. Changes
    no memory file (only the derived layout index)."""
    from sandmem.memory.views._viewer_html import build_page

    if page < 1 or (page_size is not None and page_size < 1):
        raise UserError(f"page and page_size must be at least 1, got {page} and {page_size}")
    async with open_target(target, layout) as (session, paths, _):
        label = title if title is not None else str(session.root)
        return await build_page(session, paths, workspace=label, page=page, page_size=page_size)


# ---------------------------------------------------------------- sync twins


def status_sync(target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None) -> MemoryStatus:
    """``status``, blocking."""
    return run_sync(status(target, layout=layout))


def list_conversations_sync(
    target: MemoryTarget,
    *,
    layout: MemoryLayoutConfig | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[ConversationInfo]:
    """``list_conversations``, blocking."""
    return run_sync(list_conversations(target, layout=layout, limit=limit, offset=offset))


def reindex_sync(target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None) -> IndexReport:
    """``reindex``, blocking."""
    return run_sync(reindex(target, layout=layout))


def list_files_sync(
    target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None
) -> list[FileSize]:
    """``list_files``, blocking."""
    return run_sync(list_files(target, layout=layout))


def show_sync(
    target: MemoryTarget,
    what: MemoryFileKind | None = None,
    rollout_id: str | None = None,
    *,
    layout: MemoryLayoutConfig | None = None,
) -> MemoryFile:
    """``show``, blocking."""
    return run_sync(show(target, what, rollout_id, layout=layout))


def search_sync(
    target: MemoryTarget,
    query: str,
    limit: int = 10,
    *,
    layout: MemoryLayoutConfig | None = None,
    transcripts: bool = True,
) -> SearchResults:
    """``search``, blocking."""
    return run_sync(search(target, query, limit, layout=layout, transcripts=transcripts))


def view_html_sync(
    target: MemoryTarget,
    *,
    layout: MemoryLayoutConfig | None = None,
    title: str | None = None,
    page: int = 1,
    page_size: int | None = PAGE_SIZE,
) -> str:
    """``view_html``, blocking."""
    return run_sync(view_html(target, layout=layout, title=title, page=page, page_size=page_size))
