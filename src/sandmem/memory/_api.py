"""The public memory API: look at, search, generate and forget memory from Python.

Every function takes a *target* — a live ``SandboxSession`` or the path of a workspace
directory (used in place, like the CLI's ``--workspace``) — and an optional
``MemoryLayoutConfig`` (default: ``memories/`` and ``sessions/``). Each is async, with a
``*_sync`` twin for scripts (the twins refuse to run inside a running event loop). Results are
the pydantic models of ``sandmem.memory._results``; the ``sandmem memory`` commands print
their JSON.

Errors: ``MemoryNotFoundError`` (no memory layout, an unknown conversation),
``MemoryLockedError`` (another process holds the layout's lock), ``UserError`` (an invalid id
or option).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union

from sandmem._errors import MemoryLockedError, MemoryNotFoundError, SandboxError, UserError
from sandmem.memory import _files, tombstones
from sandmem.memory import state as gen_state
from sandmem.memory._results import (
    ConversationInfo,
    FileSize,
    ForgetResult,
    GenerationReport,
    GenerationUsage,
    IndexReport,
    MemoryFile,
    MemoryFileKind,
    MemoryStatus,
    SearchResults,
    TokenUsage,
)
from sandmem.memory.config import EXTRACTIVE, MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory.layout import MemoryPaths, ensure_layout, read_text
from sandmem.memory.views import _maintenance as maintenance
from sandmem.memory.views._index import opened_index, purge_index, rebuild_index
from sandmem.memory.views._viewer import PAGE_SIZE
from sandmem.models._base import Model
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.sandboxes._session import SandboxSession

if TYPE_CHECKING:  # generation is imported by the calls that generate, not by the looking ones
    from sandmem.memory.generation.manager import FlushReport, MemoryGenerationManager

T = TypeVar("T")

#: a live sandbox session, or the path of a workspace directory
MemoryTarget = Union[SandboxSession, str, "os.PathLike[str]"]

Engine = Literal["model", "extractive"]

#: how often ``generate``'s progress callback looks at ``generation_log.jsonl``
PROGRESS_POLL_S = 0.2


@dataclass(frozen=True)
class GenerationProgress:
    """Passed to ``generate``'s ``progress`` callback: ``extracted`` of ``total`` pending
    conversations are done; ``phase`` is ``"extracting"`` then ``"consolidating"``."""

    extracted: int
    total: int
    phase: Literal["extracting", "consolidating"]


# ---------------------------------------------------------------- targets


@contextlib.asynccontextmanager
async def _target_session(
    target: MemoryTarget, missing: str
) -> AsyncIterator[tuple[SandboxSession, bool]]:
    """The session of a target and whether it is ours (opened on a workspace path for this
    call); ``missing`` ends the error for a directory that does not exist."""
    if isinstance(target, SandboxSession):
        yield target, False
        return
    if not isinstance(target, str | os.PathLike):
        raise UserError(
            "the memory target must be a SandboxSession or a workspace directory path, got "
            f"{type(target).__name__}"
        )
    root = Path(target)
    if not await asyncio.to_thread(root.is_dir):
        raise MemoryNotFoundError(
            f"no workspace directory {str(root)!r}: {missing}", path=str(root)
        )
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
    async with session:
        yield session, True


@contextlib.asynccontextmanager
async def _opened(
    target: MemoryTarget, layout: MemoryLayoutConfig | None
) -> AsyncIterator[tuple[SandboxSession, MemoryPaths, bool]]:
    """The session, the layout's paths, and whether the session is ours (opened on a
    workspace path for this call). Refuses a workspace that holds no memory layout."""
    if layout is not None and not isinstance(layout, MemoryLayoutConfig):
        raise UserError(f"layout must be a MemoryLayoutConfig, got {type(layout).__name__}")
    paths = MemoryPaths.of(layout or MemoryLayoutConfig())
    missing = "pass an existing directory or a live SandboxSession"
    async with _target_session(target, missing) as (session, ours):
        await _require_layout(session, paths)
        yield session, paths, ours


async def _require_layout(session: SandboxSession, paths: MemoryPaths) -> None:
    await ensure_layout(session, paths, create=False)  # a planted link is moved aside first
    if await _files.exists(session, paths.memories_dir) or await _files.exists(
        session, paths.sessions_dir
    ):
        return
    raise MemoryNotFoundError(
        f"no memory in {session.root}: neither {paths.memories_dir}/ nor {paths.sessions_dir}/ "
        "exists; run an agent there first (`sandmem run`; in Python, an agent with Memory()), "
        "or name the layout it used (--memories-dir / --sessions-dir; in Python, layout=)",
        path=paths.memories_dir,
    )


def _locked(exc: SandboxError) -> MemoryLockedError | SandboxError:
    if exc.operation != "lock":
        return exc
    return MemoryLockedError(
        f"memory is locked: {exc.path} is held by another process or task (a generation or "
        "a forget in progress); try again when it has finished",
        operation="lock",
        path=exc.path,
    )


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        # the result is passed outside the task: on Python 3.11 ``asyncio.run`` ends by
        # formatting the repr of its SIGINT handler, which holds the main task and so the
        # repr of its result (1.2 s for a ``MemoryStatus`` of 10,000 conversations)
        box: list[T] = []

        async def main() -> None:
            box.append(await coro)

        asyncio.run(main())
        return box[0]
    coro.close()
    raise UserError(
        "a *_sync memory function was called inside a running event loop; await the async "
        "function instead (e.g. `await sandmem.memory.status(...)`)"
    )


# ---------------------------------------------------------------- looking


async def status(target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None) -> MemoryStatus:
    """The state of a layout's memory: every conversation (status, attempts, failure class,
    next retry, last error), the last consolidation, file sizes, and tokens spent per phase.
    Changes no memory file (only the derived layout index)."""
    async with _opened(target, layout) as (session, paths, _):
        return await maintenance.memory_status(session, paths)


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
    async with _opened(target, layout) as (session, paths, _):
        return await maintenance.conversations(session, paths, limit=limit, offset=offset)


async def reindex(target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None) -> IndexReport:
    """Rebuild the layout's index (``<memories_dir>/.index.sqlite``) from the files. Never
    needed for correctness (every read checks the index against the files and derives again
    what differs); it is the way to pay the full cost up front, or to start over."""
    async with _opened(target, layout) as (session, paths, _):
        return await rebuild_index(session, paths)


async def list_files(
    target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None
) -> list[FileSize]:
    """Every visible file of the layout (under ``memories_dir`` and ``sessions_dir``; hidden
    ones such as locks and phase two's journal are left out) with its size, sorted by path."""
    async with _opened(target, layout) as (session, paths, _):
        entries = await maintenance.layout_files(session, paths)
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
    async with _opened(target, layout) as (session, paths, _):
        if what == "summary":
            return await _file(session, what, paths.summary_md, None)
        if what == "memory":
            return await _file(session, what, paths.memory_md, None)
        assert rollout_id is not None
        rid = maintenance.checked_rollout_id(rollout_id)
        found = await maintenance.rollout_summary_files(session, paths, rid)
        raw_path = paths.raw_memory_file(rid)
        known = (
            bool(found)
            or await _files.exists(session, paths.rollout_file(rid))
            or await _files.exists(session, raw_path)
        )
        if not known:
            raise maintenance.unknown_conversation(paths, rid)
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
    async with _opened(target, layout) as (session, paths, _):
        async with opened_index(session, paths, *parts) as index:
            hits = await index.search_hits(query, limit, transcripts=transcripts)
    return SearchResults(query=query, hits=hits)


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
    async with _opened(target, layout) as (session, paths, _):
        label = title if title is not None else str(session.root)
        return await build_page(session, paths, workspace=label, page=page, page_size=page_size)


# ---------------------------------------------------------------- changing


def generate_config(
    config: MemoryGenerateConfig | None = None,
    engine: Engine | None = None,
    model: str | Model | None = None,
) -> MemoryGenerateConfig:
    """The generate config for the options of ``generate`` and ``forget``: ``config`` as
    given; ``engine="extractive"``: both phases without a model; ``model``: that model for
    both phases with the server's default settings; none of them: the defaults."""
    if config is not None:
        if engine is not None or model is not None:
            raise UserError("pass either config or engine/model, not both")
        return config
    if engine == EXTRACTIVE:
        if model is not None:
            raise UserError("use either engine='extractive' or a model, not both")
        return MemoryGenerateConfig.for_model(EXTRACTIVE)
    if engine not in (None, "model"):
        raise UserError(f"engine must be 'model' or 'extractive', not {engine!r}")
    return MemoryGenerateConfig.for_model(model)


def _report(report: FlushReport) -> GenerationReport:
    finished = {*report.processed, *report.skipped, *report.failed}
    return GenerationReport(
        processed=sorted(report.processed),
        skipped=sorted(report.skipped),
        failed=dict(sorted(report.failed.items())),
        failure_kinds=dict(sorted(report.failure_kinds.items())),
        not_reached=[rid for rid in report.pending if rid not in finished],
        deferred=sorted(report.deferred),
        phase_two=report.phase_two,
        phase_two_error=report.phase_two_error,
        phase_two_failure_kind=report.phase_two_failure_kind,
        phase_two_missing=list(report.phase_two_missing),
        problems=dict(sorted(report.problems.items())),
        timed_out=report.timed_out,
        usage=GenerationUsage(
            phase_one=TokenUsage.of(report.phase_one_usage),
            phase_two=TokenUsage.of(report.phase_two_usage),
        ),
        complete=not report.failed
        and not report.timed_out
        # review mode: a proposal in the inbox is what was asked for
        and report.phase_two in ("done", "skipped", "proposed"),
    )


def _manager(
    session: SandboxSession, paths: MemoryPaths, config: MemoryGenerateConfig, detach: bool
) -> MemoryGenerationManager:
    """The session's manager for the layout, its stop hook detached when ``detach``: on a
    session opened for this call (the call flushes explicitly, and a second flush at stop
    would retry what just failed), or when the caller asks (``flush_on_stop=False``)."""
    from sandmem.memory.generation._attach import get_manager

    try:
        manager = get_manager(session, paths, config)
    except UserError as exc:
        if "different MemoryGenerateConfig" not in str(exc):
            raise
        raise UserError(
            f"{exc}; pass the agents' own config (config=MemoryGenerateConfig(...)) to "
            "generate or forget on this session"
        ) from None
    if detach:
        manager.detach_stop_hook()
    return manager


async def _flush_with_progress(
    manager: MemoryGenerationManager,
    retry_failed: bool,
    wait_backoff: bool,
    progress: Callable[[GenerationProgress], None],
) -> FlushReport:
    session, paths = manager.session, manager.paths
    wanted = {"pending", "failed"} if retry_failed else {"pending"}
    total = sum(c.status in wanted for c in await maintenance.conversations(session, paths))
    since = len(await gen_state.read_log(session, paths))
    flushing = asyncio.ensure_future(
        manager.flush(retry_failed=retry_failed, wait_backoff=wait_backoff)
    )
    try:
        while True:
            done = {flushing}
            await asyncio.wait(done, timeout=PROGRESS_POLL_S)
            records = (await gen_state.read_log(session, paths))[since:]
            extracted = min(sum(r.get("phase") == "one" for r in records), total)
            phase: Literal["extracting", "consolidating"] = (
                "consolidating" if extracted >= total else "extracting"
            )
            progress(GenerationProgress(extracted, total, phase))
            if flushing.done():
                return flushing.result()
    finally:
        if not flushing.done():
            flushing.cancel()


async def generate(
    target: MemoryTarget,
    *,
    layout: MemoryLayoutConfig | None = None,
    config: MemoryGenerateConfig | None = None,
    engine: Engine | None = None,
    model: str | Model | None = None,
    retry_failed: bool = False,
    wait_backoff: bool = False,
    progress: Callable[[GenerationProgress], None] | None = None,
    flush_on_stop: bool = True,
) -> GenerationReport:
    """Generate memory now: phase one for every pending conversation, then consolidation
    when the selection changed. ``retry_failed`` also retries conversations that failed
    ``max_attempts`` times (their attempts restart). The engine is ``config``, or
    ``engine="extractive"`` (no model), or ``model`` for both phases, or the defaults; on a
    live session whose agents use this layout, pass their ``MemoryGenerateConfig``.
    ``progress`` is called about five times a second while it runs. On a live session the
    layout's manager still flushes when the session stops (for runs after this call);
    ``flush_on_stop=False`` turns that off, for a caller that generates explicitly after its
    last run, so a conversation that just failed is not retried again at the stop (agents
    configured with ``MemoryGenerateConfig(schedule="explicit")`` never generate at the
    stop, as ``sandmem run`` does).
    Conversations waiting to retry after an environment failure (a server problem) are
    retried at once; ``wait_backoff=True`` leaves them until their retry time, as a stop
    does (``sandmem run`` and ``chat`` generate that way, so a server that is down is not
    asked again after every run).

    A failed conversation or consolidation does not raise: it is in the report (``complete``
    is ``False``) and retried next time. Raises ``MemoryLockedError`` when another process
    holds the layout's lock.
    """
    cfg = generate_config(config, engine, model)
    async with _opened(target, layout) as (session, paths, owned):
        manager = _manager(session, paths, cfg, owned or not flush_on_stop)
        try:
            if progress is None:
                flushed = await manager.flush(retry_failed=retry_failed, wait_backoff=wait_backoff)
            else:
                flushed = await _flush_with_progress(manager, retry_failed, wait_backoff, progress)
        except SandboxError as exc:
            raise _locked(exc) from exc
    return _report(flushed)


async def forget(
    target: MemoryTarget,
    rollout_id: str,
    *,
    dry_run: bool = False,
    undo: bool = False,
    layout: MemoryLayoutConfig | None = None,
    config: MemoryGenerateConfig | None = None,
    engine: Engine | None = None,
    model: str | Model | None = None,
) -> ForgetResult:
    """Forget one conversation: delete its rollout file, raw memory, rollout summaries and
    generation state, then consolidate again so ``MEMORY.md`` and ``memory_summary.md`` drop
    what only it supported (with the engine chosen as for ``generate``). When it was the last
    conversation in memory, both files are emptied instead; skills are never touched.

    ``dry_run=True`` changes nothing and reports what would go. Raises
    ``MemoryNotFoundError`` for an unknown id (changing nothing), ``UserError`` for an
    invalid one, ``MemoryLockedError`` when another process holds the layout's lock. A failed
    re-consolidation does not raise: see ``result.report.complete``.

    A forgotten conversation stays forgotten: ``ingest`` (its hooks, ``ingest_watch``) skips
    it from then on. ``undo=True`` takes that note away (``result.undone``), so the next
    ingest records it anew; nothing deleted comes back.
    """
    if undo:
        return await _unforget(target, rollout_id, layout)
    cfg = generate_config(config, engine, model)
    async with _opened(target, layout) as (session, paths, owned):
        if dry_run:
            plan = await maintenance.forget_plan(session, paths, rollout_id)
            flushed = None
        else:
            await maintenance.forget_plan(session, paths, rollout_id)  # refuse unknown ids first
            _manager(session, paths, cfg, detach=owned)
            try:
                plan, flushed = await maintenance.forget_rollout(session, paths, rollout_id, cfg)
            except SandboxError as exc:
                raise _locked(exc) from exc
            await purge_index(session, paths)  # the index keeps no page of its words
    return ForgetResult(
        rollout_id=plan.rollout_id,
        dry_run=dry_run,
        removed=plan.files,
        state_entry=plan.state_entry,
        clears_memory=plan.clears_memory,
        report=_report(flushed) if flushed is not None else None,
    )


async def _unforget(
    target: MemoryTarget, rollout_id: str, layout: MemoryLayoutConfig | None
) -> ForgetResult:
    from sandmem.memory.generation.manager import LOCK_TIMEOUT_S

    rid = maintenance.checked_rollout_id(rollout_id)
    async with _opened(target, layout) as (session, paths, _owned):
        try:
            async with _files.lock(session, f"{paths.sessions_dir}/.lock", timeout=LOCK_TIMEOUT_S):
                undone = await tombstones.remove(session, paths, rid)
        except SandboxError as exc:
            raise _locked(exc) from exc
    return ForgetResult(
        rollout_id=rid,
        dry_run=False,
        removed=[],
        state_entry=False,
        clears_memory=False,
        report=None,
        undone=undone,
    )


# ---------------------------------------------------------------- sync twins


def status_sync(target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None) -> MemoryStatus:
    """``status``, blocking."""
    return _run_sync(status(target, layout=layout))


def list_conversations_sync(
    target: MemoryTarget,
    *,
    layout: MemoryLayoutConfig | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[ConversationInfo]:
    """``list_conversations``, blocking."""
    return _run_sync(list_conversations(target, layout=layout, limit=limit, offset=offset))


def reindex_sync(target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None) -> IndexReport:
    """``reindex``, blocking."""
    return _run_sync(reindex(target, layout=layout))


def list_files_sync(
    target: MemoryTarget, *, layout: MemoryLayoutConfig | None = None
) -> list[FileSize]:
    """``list_files``, blocking."""
    return _run_sync(list_files(target, layout=layout))


def show_sync(
    target: MemoryTarget,
    what: MemoryFileKind | None = None,
    rollout_id: str | None = None,
    *,
    layout: MemoryLayoutConfig | None = None,
) -> MemoryFile:
    """``show``, blocking."""
    return _run_sync(show(target, what, rollout_id, layout=layout))


def search_sync(
    target: MemoryTarget,
    query: str,
    limit: int = 10,
    *,
    layout: MemoryLayoutConfig | None = None,
    transcripts: bool = True,
) -> SearchResults:
    """``search``, blocking."""
    return _run_sync(search(target, query, limit, layout=layout, transcripts=transcripts))


def view_html_sync(
    target: MemoryTarget,
    *,
    layout: MemoryLayoutConfig | None = None,
    title: str | None = None,
    page: int = 1,
    page_size: int | None = PAGE_SIZE,
) -> str:
    """``view_html``, blocking."""
    return _run_sync(view_html(target, layout=layout, title=title, page=page, page_size=page_size))


def generate_sync(
    target: MemoryTarget,
    *,
    layout: MemoryLayoutConfig | None = None,
    config: MemoryGenerateConfig | None = None,
    engine: Engine | None = None,
    model: str | Model | None = None,
    retry_failed: bool = False,
    wait_backoff: bool = False,
    progress: Callable[[GenerationProgress], None] | None = None,
    flush_on_stop: bool = True,
) -> GenerationReport:
    """``generate``, blocking."""
    return _run_sync(
        generate(
            target,
            layout=layout,
            config=config,
            engine=engine,
            model=model,
            retry_failed=retry_failed,
            wait_backoff=wait_backoff,
            progress=progress,
            flush_on_stop=flush_on_stop,
        )
    )


def forget_sync(
    target: MemoryTarget,
    rollout_id: str,
    *,
    dry_run: bool = False,
    undo: bool = False,
    layout: MemoryLayoutConfig | None = None,
    config: MemoryGenerateConfig | None = None,
    engine: Engine | None = None,
    model: str | Model | None = None,
) -> ForgetResult:
    """``forget``, blocking."""
    return _run_sync(
        forget(
            target,
            rollout_id,
            dry_run=dry_run,
            undo=undo,
            layout=layout,
            config=config,
            engine=engine,
            model=model,
        )
    )
