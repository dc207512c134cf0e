"""Forgetting one conversation (``forget``, ``forget_sync``): what it removes
(``forget_plan``), removing it and consolidating again (``forget_rollout``), and taking the
note that keeps it forgotten away (``undo=True``).

It writes (the files, the state entry, the tombstone, a version) and consolidates again
through the layout's generation manager, so it lives on the API floor, above the views that
only read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandmem._errors import SandboxError
from sandmem.memory import _files, tombstones
from sandmem.memory import state as gen_state
from sandmem.memory._results import ForgetResult
from sandmem.memory.api._changing import (
    Engine,
    config_from_options,
    generation_manager,
    generation_report,
)
from sandmem.memory.api._target import MemoryTarget, lock_error, open_target, run_sync
from sandmem.memory.config import MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.rollouts import utc_now
from sandmem.memory.views._index import purge_index
from sandmem.memory.views._status import (
    checked_rollout_id,
    rollout_summary_files,
    unknown_conversation,
)
from sandmem.models._base import Model
from sandmem.sandboxes._session import SandboxSession

if TYPE_CHECKING:  # forgetting imports generation when it runs
    from sandmem.memory.generation.manager import FlushReport


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
    from sandmem.memory.generation.phase_two import load_raw_memories
    from sandmem.memory.history import Attribution

    rid = checked_rollout_id(rollout_id)
    manager = get_manager(session, paths, config)
    await manager.prepare()
    # one version, attributed to this forget: the re-consolidation's, or the cleared files'
    attribution = Attribution("forget", rollouts_removed=(rid,))
    with journal.attributed(attribution):
        async with _files.lock(session, paths.lock):
            async with _files.lock(session, f"{paths.sessions_dir}/.lock"):
                plan = await _forget_files(session, paths, rid)
            consolidated = bool((await gen_state.load_selection(session, paths)).refs)
            if consolidated and not await load_raw_memories(session, paths):
                await _clear_consolidated(session, paths)
                await journal.notice(session, paths, attribution)
        return plan, await manager.flush()


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
    cfg = config_from_options(config, engine, model)
    async with open_target(target, layout) as (session, paths, owned):
        if dry_run:
            plan = await forget_plan(session, paths, rollout_id)
            flushed = None
        else:
            await forget_plan(session, paths, rollout_id)  # refuse unknown ids first
            generation_manager(session, paths, cfg, detach=owned)
            try:
                plan, flushed = await forget_rollout(session, paths, rollout_id, cfg)
            except SandboxError as exc:
                raise lock_error(exc) from exc
            await purge_index(session, paths)  # the index keeps no page of its words
    return ForgetResult(
        rollout_id=plan.rollout_id,
        dry_run=dry_run,
        removed=plan.files,
        state_entry=plan.state_entry,
        clears_memory=plan.clears_memory,
        report=generation_report(flushed) if flushed is not None else None,
    )


async def _unforget(
    target: MemoryTarget, rollout_id: str, layout: MemoryLayoutConfig | None
) -> ForgetResult:
    rid = checked_rollout_id(rollout_id)
    async with open_target(target, layout) as (session, paths, _owned):
        try:
            async with _files.lock(session, f"{paths.sessions_dir}/.lock"):
                undone = await tombstones.remove(session, paths, rid)
        except SandboxError as exc:
            raise lock_error(exc) from exc
    return ForgetResult(
        rollout_id=rid,
        dry_run=False,
        removed=[],
        state_entry=False,
        clears_memory=False,
        report=None,
        undone=undone,
    )


# ---------------------------------------------------------------- sync twin


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
    return run_sync(
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
