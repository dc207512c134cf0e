"""Phase two: consolidate the selected raw memories into MEMORY.md, memory_summary.md, skills.

Consolidation is a transaction (``memory.journal``): the engine works on a stage copy of the
live files; the result is checked (not empty, within budget, redacted) and verified
(``memory.verify``: every added conversation cited, no removed one). A result that misses
conversations gets one follow-up turn naming them; if some are still missing, the outcome is
``incomplete``: what was written is kept, and the missing conversations stay pending in
``phase_two_selection.json`` for the next flush. On any failure the stage is discarded and the
live files and ``phase_two_selection.json`` are unchanged.

Every model request is counted in the caller's ``Usage``, whatever the outcome. ``run`` is a
flush's phase two: it plans, consolidates when the selection changed, and records the outcome;
``after_timeout`` is the extractive fallback of a flush that ran out of time (a consolidation
cut short, or memory that would stay blank).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from sandmem._errors import (
    MaxTurnsExceeded,
    MemoryGenerationError,
    SandboxError,
)
from sandmem._items import user_message
from sandmem._settings import ModelSettings, with_max_tokens
from sandmem._usage import Usage
from sandmem.agent._agent import Agent
from sandmem.agent._tool_use import FunctionToolResult, ToolsToFinalOutputResult
from sandmem.memory import _files, journal, layout
from sandmem.memory import state as gen_state
from sandmem.memory._records import Problem
from sandmem.memory._text import safe_text
from sandmem.memory._types import ConsolidationInputs, SelectedMemory
from sandmem.memory.config import EXTRACTIVE, PHASE_TWO_MAX_TOKENS, MemoryGenerateConfig
from sandmem.memory.generation import _degrade, _trace
from sandmem.memory.generation._brief import BRIEF_FILES_MAX_BYTES as BRIEF_FILES_MAX_BYTES
from sandmem.memory.generation._brief import bookkeeping, consolidation_instructions
from sandmem.memory.generation._brief import edits_block as edits_block
from sandmem.memory.generation._brief import inputs_block as inputs_block
from sandmem.memory.generation._fallback import fall_back
from sandmem.memory.generation._metering import MeteredModel
from sandmem.memory.generation._record import FlushRecord, usage_fields
from sandmem.memory.generation._scoped_tools import ScopedFiles, scoped_tools
from sandmem.memory.generation.phase_one import resolve_model
from sandmem.memory.history import Attribution, Retention
from sandmem.memory.layout import (
    NOT_REGULAR,
    MemoryPaths,
    parse_header,
    read_isolated,
    read_text,
)
from sandmem.memory.rollouts import utc_now
from sandmem.memory.selection import (
    RawMemoryRef,
    SelectionDiff,
    diff_selection,
    select,
    selection_document,
)
from sandmem.memory.verify import Verification, follow_up_message, verify
from sandmem.models._base import ModelProvider
from sandmem.redaction import Redactor
from sandmem.sandboxes._session import FileStat, SandboxSession
from sandmem.sandboxes._types import EntryKind

logger = logging.getLogger("sandmem.memory")

#: how many raw memory files ``load_raw_memories`` reads at once
_READ_BATCH = 512


# ---------------------------------------------------------------- selection


def raw_memory_problem(rollout_id: str, data: bytes) -> tuple[str | None, str]:
    """``(reason, text)``: why a raw memory file cannot be used (``None`` when it can)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text", ""
    if "\x00" in text:
        return "binary data", ""
    fields = parse_header(text)[0]
    if fields.get("rollout_id") != rollout_id or not fields.get("updated_at"):
        return "no raw-memory header naming this rollout", ""
    return None, text


async def scan_raw_memories(
    session: SandboxSession, paths: MemoryPaths
) -> tuple[dict[str, str], dict[str, str]]:
    """Every usable raw memory's text by rollout id, and the files left out (path → reason).

    A workspace may hold thousands: files are read with ``read_many`` in bounded batches; a
    file removed between the listing and its read is skipped.
    """
    if not await _files.is_dir(session, paths.raw_dir):
        return {}, {}
    names = [
        n
        for n in await _files.listdir(session, paths.raw_dir)
        if n.endswith(".md") and not n.startswith(".")
    ]
    found: dict[str, str] = {}
    problems: dict[str, str] = {}
    for start in range(0, len(names), _READ_BATCH):
        batch = [f"{paths.raw_dir}/{n}" for n in names[start : start + _READ_BATCH]]
        texts, bad = await read_isolated(session, batch)
        problems.update(bad)
        for path, data in texts.items():
            if data is None:  # listed but not read: a symlink or a special file
                if path not in problems:
                    problems[path] = NOT_REGULAR
                continue
            rid = path.rsplit("/", 1)[1][:-3]
            reason, text = raw_memory_problem(rid, data)
            if reason is None:
                found[rid] = text
            else:
                problems[path] = reason
    return found, problems


async def load_raw_memories(session: SandboxSession, paths: MemoryPaths) -> dict[str, str]:
    """Every usable raw memory's text by rollout id (see ``scan_raw_memories``)."""
    return (await scan_raw_memories(session, paths))[0]


@dataclass(frozen=True)
class Plan:
    selected: list[RawMemoryRef]
    diff: SelectionDiff
    bodies: dict[str, str]
    #: files left out of the plan: path → reason
    problems: dict[str, str] = field(default_factory=dict)
    #: the previous selection's refs (to carry still-cited removed ones forward)
    previous: list[RawMemoryRef] = field(default_factory=list)


async def plan(session: SandboxSession, paths: MemoryPaths, cap: int) -> Plan:
    raw, problems = await scan_raw_memories(session, paths)
    parsed = {rid: parse_header(text) for rid, text in raw.items()}
    refs = [RawMemoryRef.from_fields(fields, rid) for rid, (fields, _) in parsed.items()]
    selected = select(refs, cap) if refs else []
    saved = await gen_state.load_selection(session, paths)
    problems.update(saved.problems)
    previous = saved.refs
    bodies = {rid: body.strip() for rid, (_, body) in parsed.items()}
    return Plan(selected, diff_selection(selected, previous), bodies, problems, previous)


async def inputs_digest(session: SandboxSession, paths: MemoryPaths, cap: int) -> str | None:
    """A digest of everything ``plan`` reads — every raw memory file's name, size and mtime,
    the selection file's, and ``cap`` — from ``stat`` alone (nothing is read). ``None`` when
    some file's stat cannot be trusted (no mtime, not a regular file): then ``plan`` runs."""
    found: dict[str, FileStat | None] = {}
    if await _files.is_dir(session, paths.raw_dir):
        try:  # one listing with sizes and mtimes, not one stat per raw memory
            entries = await _files.stat_dir(session, paths.raw_dir)
        except SandboxError:
            return None
        for name, kind, size, mtime in entries:
            if not name.endswith(".md") or name.startswith("."):
                continue
            if kind != EntryKind.FILE:
                return None
            found[f"{paths.raw_dir}/{name}"] = FileStat(size, mtime)
    try:
        found.update(await _files.stat_many(session, [paths.selection_json]))
    except SandboxError:
        return None
    parts = [f"cap={cap}"]
    for path, st in found.items():
        if st is None and path != paths.selection_json:
            return None
        if st is not None and st.mtime_ns is None:
            return None
        parts.append(f"{path}:{st.size}:{st.mtime_ns}" if st is not None else f"{path}:-")
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def raw_memories_document(selected: list[RawMemoryRef], bodies: dict[str, str]) -> str:
    """``raw_memories.md``: the selected raw memories, newest first."""
    blocks = [
        f"## Rollout {r.rollout_id}\n\nupdated_at: {r.updated_at}\n"
        f"rollout_summary_file: {r.rollout_summary_file}\nterminal_state: {r.terminal_state}\n\n"
        f"{bodies.get(r.rollout_id, '').strip()}\n"
        for r in selected
    ]
    return "# Raw memories (newest first)\n\n" + "\n".join(blocks)


# ---------------------------------------------------------------- engines


async def _strip_copied_brief(
    session: SandboxSession, paths: MemoryPaths, inputs: ConsolidationInputs
) -> None:
    """Remove the brief's bookkeeping lines (and the fallback's note) the model copied into
    the staged files. After an extractive fallback, a model that left the summary as the
    fallback wrote it did not consolidate: ``EngineError`` (the fallback stays)."""
    lines = _degrade.brief_lines(bookkeeping(inputs) + "\n" + _degrade.FALLBACK_NOTE)
    if inputs.current_summary_md.startswith(_degrade.FALLBACK_NOTE):
        staged = await read_text(session, journal.staged(paths, paths.summary_md)) or ""
        before = _degrade.strip_brief(inputs.current_summary_md, lines)[0]
        if _degrade.strip_brief(staged, lines)[0].strip() == before.strip():
            raise EngineError(
                "the model left memory_summary.md as the extractive fallback wrote it; the "
                "fallback stays until a consolidation by the model succeeds"
            )
    for path in (paths.memory_md, paths.summary_md):
        target = journal.staged(paths, path)
        text = await read_text(session, target)
        if not text:
            continue
        clean, removed = _degrade.strip_brief(text, lines)
        if removed:
            logger.warning(
                "consolidation copied %d line(s) of its brief into %s; removed", removed, path
            )
            await _files.write(session, target, clean)


#: ``fallback``: the model's consolidation failed or was incomplete, and the extractive
#: engine's was committed instead (``_degrade``)
Outcome = Literal["done", "incomplete", "proposed", "fallback"]


class EngineError(MemoryGenerationError):
    """The consolidation engine failed, or its result was refused (empty, over budget): the
    live files are unchanged. Only this failure falls back to the extractive engine; a commit
    refused because memory changed meanwhile does not."""


@dataclass(frozen=True)
class ConsolidationResult:
    """A committed consolidation: ``done``, or ``incomplete`` with what it left out; or, in
    review mode, ``proposed`` (nothing committed: the result waits in the inbox)."""

    outcome: Outcome
    verification: Verification


def _finished_when_written(
    session: SandboxSession, paths: MemoryPaths, inputs: ConsolidationInputs
) -> Callable[[Any, list[FunctionToolResult]], Awaitable[ToolsToFinalOutputResult]]:
    """The consolidation's ``tool_use_behavior``: after a turn of tool calls the run ends (no
    final-answer turn) once both files were rewritten on the stage, are not empty, fit their
    budgets and pass ``verify``; otherwise the agent gets its next turn."""
    start = (inputs.current_memory_md, inputs.current_summary_md)

    async def decide(ctx: Any, results: list[FunctionToolResult]) -> ToolsToFinalOutputResult:
        staged = [journal.staged(paths, p) for p in (paths.memory_md, paths.summary_md)]
        found = await _files.read_many(session, staged)
        texts = [(found[p] or b"").decode("utf-8", "replace") for p in staged]
        budgets = (inputs.memory_md_max_bytes, inputs.summary_max_bytes)
        done = (
            all(text.strip() and text != old for text, old in zip(texts, start, strict=True))
            and all(
                len(t.encode("utf-8", "surrogatepass")) <= b
                for t, b in zip(texts, budgets, strict=True)
            )
            and verify(texts[0], inputs.added, inputs.removed).ok
        )
        return ToolsToFinalOutputResult(bool(done), "consolidated" if done else None)

    return decide


def _agent(
    session: SandboxSession,
    paths: MemoryPaths,
    inputs: ConsolidationInputs,
    config: MemoryGenerateConfig,
    provider: ModelProvider,
    usage: Usage,
) -> Agent:
    # the tools see the live names; journal.StagedFiles maps the live set onto the stage
    files = cast(SandboxSession, journal.StagedFiles(session, paths))
    return Agent(
        name="memory-consolidation",
        instructions=consolidation_instructions(inputs),
        model=MeteredModel(resolve_model(config.phase_two_model, provider), usage),
        model_settings=with_max_tokens(
            config.phase_two_model_settings or ModelSettings(), PHASE_TWO_MAX_TOKENS
        ),
        tools=scoped_tools(
            files,
            inputs.memories_dir,
            skill_file_max_bytes=config.skill_file_max_bytes,
            skills_max_bytes=config.skills_max_bytes,
        ),
        tool_use_behavior=_finished_when_written(session, paths, inputs),
    )


async def _staged_memory(session: SandboxSession, paths: MemoryPaths) -> str:
    return await read_text(session, journal.staged(paths, paths.memory_md)) or ""


async def _run_agent(
    session: SandboxSession,
    paths: MemoryPaths,
    inputs: ConsolidationInputs,
    config: MemoryGenerateConfig,
    provider: ModelProvider,
    usage: Usage,
) -> Verification:
    """The consolidation run, then at most one follow-up turn naming what is missing. The
    follow-up is best-effort: when it fails (a model error, its turn limit), the result written
    so far stands and is checked as it is (``incomplete``, the missing conversations pending)."""
    from sandmem.run._runner import Runner

    agent = _agent(session, paths, inputs, config, provider, usage)
    result = await Runner.run(
        agent,
        f"Consolidate the memory in {inputs.memories_dir}/ now.",
        max_turns=config.phase_two_max_turns,
    )
    checked = verify(await _staged_memory(session, paths), inputs.added, inputs.removed)
    if checked.ok:
        return checked
    logger.info("consolidation incomplete (%s); one follow-up turn", checked.describe())
    follow_up = user_message(follow_up_message(checked, inputs.memories_dir))
    try:
        await Runner.run(
            agent, [*result.to_input_list(), follow_up], max_turns=config.phase_two_max_turns
        )
    except Exception as exc:
        logger.warning(
            "the consolidation's follow-up turn failed (%s: %s); keeping what was written",
            type(exc).__name__,
            exc,
        )
    return verify(await _staged_memory(session, paths), inputs.added, inputs.removed)


async def _run_extractive(
    session: SandboxSession, paths: MemoryPaths, inputs: ConsolidationInputs, *, marked: bool
) -> Verification:
    """The extractive engine's consolidation, on the stage (``marked``: its summary says it
    stands in for a model that failed)."""
    from sandmem.memory.extractive import consolidate

    output = consolidate(inputs)
    if marked:
        output = replace(output, memory_summary_md=_degrade.mark_summary(output.memory_summary_md))
    for rel, text in sorted(output.skills.items()):
        target = ScopedFiles(session, paths.memories_dir).check(
            f"{paths.skills_dir}/{rel}", write=True
        )
        await _files.write(session, journal.staged(paths, target), safe_text(text))
    await _files.write(
        session, journal.staged(paths, paths.summary_md), safe_text(output.memory_summary_md)
    )
    await _files.write(session, journal.staged(paths, paths.memory_md), safe_text(output.memory_md))
    return verify(output.memory_md, inputs.added, inputs.removed)


async def _check_result(
    session: SandboxSession, paths: MemoryPaths, config: MemoryGenerateConfig, redactor: Redactor
) -> None:
    """Refuse an empty or over-budget result; redact what the engine wrote (on the stage)."""
    for path, budget in (
        (paths.memory_md, config.memory_md_max_bytes),
        (paths.summary_md, config.summary_max_bytes),
    ):
        text = await read_text(session, journal.staged(paths, path)) or ""
        if not text.strip():
            raise MemoryGenerationError(f"consolidation left {path} empty", retryable=True)
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > budget:
            raise MemoryGenerationError(
                f"consolidation left {path} at {size} bytes, over its budget of {budget}",
                retryable=True,
            )
    staged = await journal.staged_files(session, paths)
    skills = [journal.staged(paths, p) for p in staged if p.startswith(paths.skills_dir + "/")]
    sizes = await _files.stat_many(session, skills)
    for path, st in sizes.items():
        if st is not None and st.size > config.skill_file_max_bytes:
            raise MemoryGenerationError(
                f"consolidation left {path} at {st.size} bytes, over the budget of "
                f"{config.skill_file_max_bytes} per skill file",
                retryable=True,
            )
    total = sum(st.size for st in sizes.values() if st is not None)
    if total > config.skills_max_bytes:
        raise MemoryGenerationError(
            f"consolidation left {paths.skills_dir}/ at {total} bytes, over its budget of "
            f"{config.skills_max_bytes}",
            retryable=True,
        )
    for path in await journal.staged_files(session, paths):
        target = journal.staged(paths, path)
        text = await read_text(session, target) or ""
        clean = safe_text(redactor.redact(text))
        if clean != text:
            await _files.write(session, target, clean)


async def gather_inputs(
    session: SandboxSession,
    paths: MemoryPaths,
    config: MemoryGenerateConfig,
    p: Plan,
    raw_memories_md: str = "",
) -> ConsolidationInputs:
    """What the engine works from. The rollout summaries are read only for the extractive
    engine (the consolidation agent opens one with its tools when it needs it)."""
    selected = []
    for ref in p.selected:
        summary = None
        name = ref.rollout_summary_file
        wanted = config.phase_two_model == EXTRACTIVE
        if wanted and name.startswith(f"{layout.SUMMARIES_DIR}/") and ".." not in name:
            found, _bad = await read_isolated(session, [f"{paths.memories_dir}/{name}"])
            data = next(iter(found.values()), None)
            summary = data.decode("utf-8", "replace") if data is not None else None
        body = parse_header(summary)[1].strip() if summary else ""
        selected.append(SelectedMemory(ref, p.bodies.get(ref.rollout_id, ""), body))
    current = await read_isolated(
        session, [paths.memory_md, paths.summary_md, paths.consolidated_memory_md]
    )
    texts = {k: (v or b"").decode("utf-8", "replace") for k, v in current[0].items()}
    return ConsolidationInputs(
        memories_dir=paths.memories_dir,
        selected=selected,
        added=p.diff.added,
        retained=p.diff.retained,
        removed=p.diff.removed,
        current_memory_md=texts.get(paths.memory_md, ""),
        consolidated_memory_md=texts.get(paths.consolidated_memory_md, ""),
        memory_md_max_bytes=config.memory_md_max_bytes,
        summary_max_bytes=config.summary_max_bytes,
        extra_prompt=config.extra_prompt,
        current_summary_md=texts.get(paths.summary_md, ""),
        raw_memories_md=raw_memories_md,
    )


def recorded_selection(p: Plan, checked: Verification) -> list[RawMemoryRef]:
    """The selection to record: what was folded in. Added conversations left out are not
    recorded (the next flush sees them as added again); removed ones still cited stay
    recorded (the next flush is told to drop them again)."""
    missing = {r.rollout_id for r in checked.missing}
    kept = [r for r in p.selected if r.rollout_id not in missing]
    return kept + list(checked.still_cited)


async def consolidate(
    session: SandboxSession,
    paths: MemoryPaths,
    config: MemoryGenerateConfig,
    redactor: Redactor,
    p: Plan,
    now: str,
    provider: ModelProvider,
    usage: Usage,
    *,
    fallback_of: str | None = None,
) -> ConsolidationResult:
    """Run phase two as a transaction; requests are added to ``usage`` as they are made.
    Raises ``MemoryGenerationError`` after discarding the stage.

    ``fallback_of`` (the model's error) runs the extractive engine in place of a model that
    failed: its summary is marked, its version says so, and the selection is left as it was
    before this flush, so the next flush gives the model the same conversations again."""
    if fallback_of is not None:
        config = config.model_copy(update={"phase_two_model": EXTRACTIVE})
    raw_document = safe_text(raw_memories_document(p.selected, p.bodies))
    await _files.write(session, paths.raw_memories_md, raw_document)
    inputs = await gather_inputs(session, paths, config, p, raw_document)
    base = await journal.begin(session, paths)
    try:
        if config.phase_two_model == EXTRACTIVE:
            checked = await _run_extractive(session, paths, inputs, marked=fallback_of is not None)
        else:
            await _run_agent(session, paths, inputs, config, provider, usage)
            await _strip_copied_brief(session, paths, inputs)
            checked = verify(await _staged_memory(session, paths), inputs.added, inputs.removed)
        await _check_result(session, paths, config, redactor)
    except BaseException as exc:
        await journal.discard(session, paths)
        if isinstance(exc, MaxTurnsExceeded):
            raise EngineError(
                f"consolidation hit its turn limit ({config.phase_two_max_turns}); previous "
                "memory kept"
            ) from exc
        if isinstance(exc, MemoryGenerationError):
            raise EngineError(str(exc), retryable=exc.retryable) from exc
        if isinstance(exc, Exception):
            raise EngineError(f"consolidation failed: {exc}") from exc
        raise
    document = selection_document(recorded_selection(p, checked), now)
    attribution = consolidation_attribution(config, p)
    if fallback_of is not None:
        document = selection_document(p.previous, now)
        attribution = replace(attribution, note=f"extractive fallback: {fallback_of}"[:500])
    if config.review:
        await journal.propose_stage(session, paths, base, document, attribution)
        logger.info("consolidation of %s proposed for review", paths.memories_dir)
        return ConsolidationResult("proposed", checked)
    await journal.commit(
        session,
        paths,
        base,
        document,
        attribution,
        redactor=redactor,
        retention=retention_of(config),
    )
    outcome: Outcome = "fallback" if fallback_of else "done" if checked.ok else "incomplete"
    logger.info(
        "consolidated %d raw memories in %s (%s)", len(p.selected), paths.memories_dir, outcome
    )
    return ConsolidationResult(outcome, checked)


def consolidation_attribution(config: MemoryGenerateConfig, p: Plan) -> Attribution:
    """What a consolidation's version says about it: engine, model, conversations."""
    model = config.phase_two_model
    name = (
        model
        if isinstance(model, str)
        else str(
            getattr(model, "model", None) or getattr(model, "name", None) or type(model).__name__
        )
    )
    return Attribution(
        "consolidation",
        engine="extractive" if model == EXTRACTIVE else "model",
        model=name,
        rollouts_added=tuple(r.rollout_id for r in p.diff.added),
        rollouts_removed=tuple(r.rollout_id for r in p.diff.removed),
    )


def retention_of(config: MemoryGenerateConfig) -> Retention:
    return Retention(config.history_keep_versions, config.history_keep_days)


def selection_summary(p: Plan) -> str:
    return json.dumps(
        {
            "added": [r.rollout_id for r in p.diff.added],
            "retained": [r.rollout_id for r in p.diff.retained],
            "removed": [r.rollout_id for r in p.diff.removed],
        }
    )


# ---------------------------------------------------------------- a flush's phase two


async def run(
    record: FlushRecord, provider: ModelProvider, state: gen_state.GenerationState
) -> None:
    """Consolidate when what the plan reads changed, and record the outcome (``_record``).
    Never raises: a failed consolidation is recorded, and the extractive engine takes over
    where ``_degrade.needs_fallback`` says so."""
    session, paths, config, report = record.session, record.paths, record.config, record.report
    started = time.monotonic()
    cap = config.max_raw_memories_for_consolidation
    digest = await inputs_digest(session, paths, cap)
    if digest is not None and digest == state.phase_two.inputs_digest:
        report.phase_two = "skipped"  # nothing plan reads changed since it found nothing
        return
    p = await plan(session, paths, cap)
    _trace.phase_two_plan(len(p.selected), p.diff)
    record.problems(Problem(path, reason) for path, reason in p.problems.items())
    if not p.diff.changed:
        report.phase_two = "skipped"
        if not p.problems and digest != state.phase_two.inputs_digest:
            state.phase_two = state.phase_two.model_copy(update={"inputs_digest": digest})
            await record.save_state(state)
        return
    now = utc_now()
    record.consolidating = True  # a flush timeout from here on cuts the consolidation short
    try:
        result = await consolidate(
            session, paths, config, record.redactor, p, now, provider, report.phase_two_usage
        )
    except Exception as exc:  # the stage is discarded already; recorded, never raised
        await _failed(record, provider, state, p, exc, now, started)
        return
    await _done(record, provider, state, p, result, now, started)


#: how long the extractive fallback after a flush timeout may take (it makes no request)
TIMEOUT_FALLBACK_S = 120.0


async def after_timeout(record: FlushRecord, provider: ModelProvider) -> None:
    """After a flush stopped at ``flush_timeout_s`` (``_record.record_timeout`` recorded it):
    the extractive fallback, as after a failed consolidation, when the model's consolidation
    was cut short (``record.consolidating``), or when phase one was and memory would be blank
    (raw memories exist, ``memory_summary.md`` is missing or empty: an earlier consolidation's
    memory is kept until the model consolidates again). It runs outside the flush timeout (it
    makes no request), bounded by ``TIMEOUT_FALLBACK_S``; never raises."""
    if not _degrade.needs_fallback(record.config, None):
        return
    try:
        async with asyncio.timeout(TIMEOUT_FALLBACK_S):
            await _fall_back_after_timeout(record, provider)
    except (TimeoutError, SandboxError, OSError) as exc:
        logger.warning("memory: no extractive fallback after the flush timeout: %s", exc)


async def _fall_back_after_timeout(record: FlushRecord, provider: ModelProvider) -> None:
    session, paths, config = record.session, record.paths, record.config
    cut_short = record.consolidating
    async with _files.lock(session, paths.lock, timeout=_files.LOCK_TIMEOUT_S):
        for note in await journal.recover(session, paths):  # a stage the cancel left
            record.note(note)
        if not cut_short and (await _files.read_text(session, paths.summary_md) or "").strip():
            return  # phase one ran out of time; memory is not blank: it waits for the model
        p = await plan(session, paths, config.max_raw_memories_for_consolidation)
        if not p.selected or not (cut_short or p.diff.changed):
            return
        state, _ = await gen_state.load(session, paths)
        error = f"memory flush timed out after {config.flush_timeout_s}s" + (
            "" if cut_short else " before the consolidation"
        )
        logger.warning("memory: %s; consolidating with the extractive engine", error)
        ids = [r.rollout_id for r in p.selected]
        await fall_back(record, state, ids, error, _fallback_of(record, provider, p))


def _fallback_of(
    record: FlushRecord, provider: ModelProvider, p: Plan
) -> Callable[[str], Awaitable[list[str]]]:
    """The extractive consolidation of ``p`` after the model's error (``_fallback``)."""

    async def run_extractive(model_error: str) -> list[str]:
        result = await consolidate(
            record.session,
            record.paths,
            record.config,
            record.redactor,
            p,
            utc_now(),
            provider,
            record.report.phase_two_usage,
            fallback_of=model_error,
        )
        return [r.rollout_id for r in result.verification.missing]

    return run_extractive


async def _failed(
    record: FlushRecord,
    provider: ModelProvider,
    state: gen_state.GenerationState,
    p: Plan,
    exc: Exception,
    now: str,
    started: float,
) -> None:
    report, ids = record.report, [r.rollout_id for r in p.selected]
    error = record.redactor.redact(str(exc))
    kind = gen_state.classify(exc)
    report.phase_two, report.phase_two_error = "failed", error
    report.phase_two_failure_kind = kind
    state.phase_two = gen_state.record_phase_two_failure(state.phase_two, kind, error, now)
    log: dict[str, Any] = {
        "phase": "two",
        "rollouts": ids,
        "status": "failed",
        "error": error,
        "failure_kind": kind,
        "duration_s": round(time.monotonic() - started, 3),
        **usage_fields(report.phase_two_usage),
    }
    await record.save(state, log, force=True)
    if isinstance(exc, EngineError) and _degrade.needs_fallback(record.config, None):
        await fall_back(record, state, ids, error, _fallback_of(record, provider, p))


async def _done(
    record: FlushRecord,
    provider: ModelProvider,
    state: gen_state.GenerationState,
    p: Plan,
    result: ConsolidationResult,
    now: str,
    started: float,
) -> None:
    session, paths, report = record.session, record.paths, record.report
    ids = [r.rollout_id for r in p.selected]
    checked = result.verification
    missing = [r.rollout_id for r in checked.missing]
    still = [r.rollout_id for r in checked.still_cited]
    report.phase_two = result.outcome
    report.phase_two_missing = missing + still
    outcome_error = None if checked.ok else f"consolidation incomplete: {checked.describe()}"
    report.phase_two_error = outcome_error
    complete = result.outcome in ("done", "proposed") and not p.problems
    cap = record.config.max_raw_memories_for_consolidation
    state.phase_two = gen_state.PhaseTwoState(
        inputs_digest=await inputs_digest(session, paths, cap) if complete else None,
        status=result.outcome,
        last_error=outcome_error,
        last_attempt_at=now,
        last_success_at=now,
        selection=selection_summary(p),
        missing_added=missing,
        still_cited=still,
    )
    log: dict[str, Any] = {
        "phase": "two",
        "rollouts": ids,
        "status": result.outcome,
        "error": outcome_error,
        "missing": report.phase_two_missing,
        "duration_s": round(time.monotonic() - started, 3),
        **usage_fields(report.phase_two_usage),
        "memory_bytes": await record.memory_bytes(),
    }
    await record.save(state, log, force=True)
    if result.outcome == "incomplete" and _degrade.needs_fallback(record.config, checked):
        assert outcome_error is not None
        await fall_back(record, state, ids, outcome_error, _fallback_of(record, provider, p))
