"""The memory API's ``generate`` (with its ``*_sync`` twin), and the helpers ``forget``, the
ingest functions and the MCP server share with it:
the generate config of the API's options, the session's generation manager, and the report
of a flush.

Errors: ``MemoryNotFoundError`` (no memory layout, an unknown conversation),
``MemoryLockedError`` (another process holds the layout's lock), ``UserError`` (an invalid id
or option).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from sandmem._errors import SandboxError, UserError
from sandmem.memory import state as gen_state
from sandmem.memory._results import GenerationReport, GenerationUsage, TokenUsage
from sandmem.memory.api._target import MemoryTarget, lock_error, open_target, run_sync
from sandmem.memory.config import EXTRACTIVE, MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.views import _status
from sandmem.models._base import Model
from sandmem.sandboxes._session import SandboxSession

if TYPE_CHECKING:  # generation is imported by the calls that generate, not by the looking ones
    from sandmem.memory.generation.manager import FlushReport, MemoryGenerationManager

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


def config_from_options(
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


def generation_report(report: FlushReport) -> GenerationReport:
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


def generation_manager(
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
    total = sum(c.status in wanted for c in await _status.conversations(session, paths))
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
    cfg = config_from_options(config, engine, model)
    async with open_target(target, layout) as (session, paths, owned):
        manager = generation_manager(session, paths, cfg, owned or not flush_on_stop)
        try:
            if progress is None:
                flushed = await manager.flush(retry_failed=retry_failed, wait_backoff=wait_backoff)
            else:
                flushed = await _flush_with_progress(manager, retry_failed, wait_backoff, progress)
        except SandboxError as exc:
            raise lock_error(exc) from exc
    return generation_report(flushed)


# ---------------------------------------------------------------- sync twins


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
    return run_sync(
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
