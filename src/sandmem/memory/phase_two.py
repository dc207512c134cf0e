"""Phase two: consolidate the selected raw memories into MEMORY.md, memory_summary.md, skills.

Consolidation is a transaction. Before it starts, the files it may change are copied into a
journal (``.phase_two_backup/``); on any failure — an error, the turn limit, an empty or
over-budget result, a cancellation — they are restored byte for byte and
``phase_two_selection.json`` is left unchanged. A journal found at the start of a later flush
means a process died mid-consolidation: it is restored first.
"""

from __future__ import annotations

import base64
import difflib
import json
import logging
from dataclasses import dataclass

from sandmem._agent import Agent
from sandmem._errors import (
    MaxTurnsExceeded,
    MemoryGenerationError,
    SandmemError,
)
from sandmem._prompts import load_prompt, render_prompt
from sandmem._usage import Usage
from sandmem.memory._scoped_tools import ScopedFiles, scoped_tools
from sandmem.memory._types import ConsolidationInputs, SelectedMemory
from sandmem.memory.config import EXTRACTIVE, MemoryGenerateConfig
from sandmem.memory.phase_one import extra_guidance_block, resolve_model
from sandmem.memory.selection import (
    RawMemoryRef,
    SelectionDiff,
    diff_selection,
    previous_refs,
    select,
    selection_document,
)
from sandmem.memory.storage import (
    MemoryPaths,
    load_json,
    parse_header,
    read_text,
    write_json,
)
from sandmem.models._base import ModelProvider
from sandmem.redaction import Redactor
from sandmem.sandboxes._session import SandboxSession

logger = logging.getLogger("sandmem.memory")

_JOURNAL_INDEX = "index.json"
#: how many raw memory files ``load_raw_memories`` reads at once
_READ_BATCH = 512


# ---------------------------------------------------------------- selection


async def load_raw_memories(session: SandboxSession, paths: MemoryPaths) -> dict[str, str]:
    """Every raw memory file's text by rollout id (in file-name order).

    A workspace may hold thousands: files are read with ``read_many`` in bounded batches (one
    worker-thread hop per batch on the local backends); a file removed between the listing
    and its read is skipped.
    """
    if not await session.exists(paths.raw_dir):
        return {}
    names = [
        n
        for n in await session.listdir(paths.raw_dir)
        if n.endswith(".md") and not n.startswith(".")
    ]
    found: dict[str, str] = {}
    for start in range(0, len(names), _READ_BATCH):
        batch = names[start : start + _READ_BATCH]
        texts = await session.read_many([f"{paths.raw_dir}/{n}" for n in batch])
        for name, data in zip(batch, texts.values(), strict=True):
            if data is not None:
                found[name[:-3]] = data.decode("utf-8", "replace")
    return found


@dataclass(frozen=True)
class Plan:
    selected: list[RawMemoryRef]
    diff: SelectionDiff
    bodies: dict[str, str]


async def plan(session: SandboxSession, paths: MemoryPaths, cap: int) -> Plan:
    raw = await load_raw_memories(session, paths)
    parsed = {rid: parse_header(text) for rid, text in raw.items()}
    refs = [RawMemoryRef.from_fields(fields, rid) for rid, (fields, _) in parsed.items()]
    selected = select(refs, cap) if refs else []
    previous = previous_refs(await load_json(session, paths.selection_json))
    bodies = {rid: body.strip() for rid, (_, body) in parsed.items()}
    return Plan(selected, diff_selection(selected, previous), bodies)


def raw_memories_document(selected: list[RawMemoryRef], bodies: dict[str, str]) -> str:
    """``raw_memories.md``: the selected raw memories, newest first."""
    blocks = [
        f"## Rollout {r.rollout_id}\n\nupdated_at: {r.updated_at}\n"
        f"rollout_summary_file: {r.rollout_summary_file}\nterminal_state: {r.terminal_state}\n\n"
        f"{bodies.get(r.rollout_id, '').strip()}\n"
        for r in selected
    ]
    return "# Raw memories (newest first)\n\n" + "\n".join(blocks)


# ---------------------------------------------------------------- journal


async def _tracked_files(session: SandboxSession, paths: MemoryPaths) -> list[str]:
    files = ScopedFiles(session, paths.memories_dir)
    candidates = (paths.memory_md, paths.summary_md, paths.consolidated_memory_md)
    tracked = [p for p in candidates if await session.exists(p)]
    if await session.exists(paths.skills_dir):
        tracked.extend(await files.walk(paths.skills_dir))
    return tracked


async def begin(session: SandboxSession, paths: MemoryPaths) -> None:
    """Journal the files phase two may change; the index is written last (the commit mark)."""
    tracked = await _tracked_files(session, paths)
    index = {p: base64.b64encode(await session.read_bytes(p)).decode("ascii") for p in tracked}
    await session.mkdir(paths.backup_dir, parents=True)
    await write_json(session, f"{paths.backup_dir}/{_JOURNAL_INDEX}", {"files": index})


async def rollback(session: SandboxSession, paths: MemoryPaths) -> bool:
    """Restore the journaled files exactly (and delete files created since); ``False`` when
    there is no complete journal."""
    journal = await load_json(session, f"{paths.backup_dir}/{_JOURNAL_INDEX}")
    if not isinstance(journal, dict) or not isinstance(journal.get("files"), dict):
        if await session.exists(paths.backup_dir):
            await session.remove(paths.backup_dir, recursive=True)
        return False
    saved: dict[str, str] = journal["files"]
    for path in await _tracked_files(session, paths):
        if path not in saved:
            await session.remove(path)
    for path, data in saved.items():
        parent = path.rsplit("/", 1)[0]
        await session.mkdir(parent, parents=True)
        await session.write(path, base64.b64decode(data))
    await session.remove(paths.backup_dir, recursive=True)
    return True


async def commit(session: SandboxSession, paths: MemoryPaths) -> None:
    await session.remove(paths.backup_dir, recursive=True)


# ---------------------------------------------------------------- engines


def _ref_lines(refs: list[RawMemoryRef], memories_dir: str) -> str:
    if not refs:
        return "  (none)"
    return "\n".join(
        f"  - {r.rollout_id} (updated {r.updated_at}, {r.terminal_state}; summary "
        f"{memories_dir}/{r.rollout_summary_file})"
        for r in refs
    )


def edits_block(inputs: ConsolidationInputs) -> str:
    """Edits made to MEMORY.md since the last consolidation, as a diff to keep."""
    before, now = inputs.consolidated_memory_md, inputs.current_memory_md
    if not before or before == now:
        return ""
    diff = "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            now.splitlines(keepends=True),
            "MEMORY.md (last consolidation)",
            "MEMORY.md (now)",
        )
    )
    return (
        "MEMORY.md was edited since the last consolidation (by an agent's live update or by a "
        "person). Keep these edits: they are newer than the raw memories.\n```diff\n"
        f"{diff}```\n"
    )


def consolidation_instructions(inputs: ConsolidationInputs) -> str:
    template = load_prompt("sandmem.memory", "phase_two")
    return render_prompt(
        template,
        memories_dir=inputs.memories_dir,
        added=_ref_lines(inputs.added, inputs.memories_dir),
        retained=_ref_lines(inputs.retained, inputs.memories_dir),
        removed=_ref_lines(inputs.removed, inputs.memories_dir),
        edits=edits_block(inputs),
        memory_budget=str(inputs.memory_md_max_bytes),
        summary_budget=str(inputs.summary_max_bytes),
        extra=extra_guidance_block(inputs.extra_prompt),
    )


async def _run_agent(
    session: SandboxSession,
    inputs: ConsolidationInputs,
    config: MemoryGenerateConfig,
    provider: ModelProvider,
) -> Usage:
    from sandmem._run import Runner

    agent = Agent(
        name="memory-consolidation",
        instructions=consolidation_instructions(inputs),
        model=resolve_model(config.phase_two_model, provider),
        model_settings=config.phase_two_model_settings,
        tools=scoped_tools(
            session,
            inputs.memories_dir,
            skill_file_max_bytes=config.skill_file_max_bytes,
            skills_max_bytes=config.skills_max_bytes,
        ),
    )
    result = await Runner.run(
        agent,
        f"Consolidate the memory in {inputs.memories_dir}/ now.",
        max_turns=config.phase_two_max_turns,
    )
    return result.usage


async def _run_extractive(
    session: SandboxSession, paths: MemoryPaths, inputs: ConsolidationInputs
) -> None:
    from sandmem.memory.extractive import consolidate

    output = consolidate(inputs)
    for rel, text in sorted(output.skills.items()):
        target = ScopedFiles(session, paths.memories_dir).check(
            f"{paths.skills_dir}/{rel}", write=True
        )
        await session.mkdir(target.rsplit("/", 1)[0], parents=True)
        await session.write(target, text)
    await session.write(paths.summary_md, output.memory_summary_md)
    await session.write(paths.memory_md, output.memory_md)


async def _check_result(
    session: SandboxSession, paths: MemoryPaths, config: MemoryGenerateConfig, redactor: Redactor
) -> None:
    """Refuse an empty or over-budget result; redact what the engine wrote."""
    for path, budget in (
        (paths.memory_md, config.memory_md_max_bytes),
        (paths.summary_md, config.summary_max_bytes),
    ):
        text = await read_text(session, path) or ""
        if not text.strip():
            raise MemoryGenerationError(f"consolidation left {path} empty", retryable=True)
        size = len(text.encode("utf-8"))
        if size > budget:
            raise MemoryGenerationError(
                f"consolidation left {path} at {size} bytes, over its budget of {budget}",
                retryable=True,
            )
    skills = [p for p in await _tracked_files(session, paths) if p.startswith(paths.skills_dir)]
    sizes = await session.stat_many(skills)
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
    for path in await _tracked_files(session, paths):
        text = await read_text(session, path) or ""
        clean = redactor.redact(text)
        if clean != text:
            await session.write(path, clean)


async def gather_inputs(
    session: SandboxSession, paths: MemoryPaths, config: MemoryGenerateConfig, p: Plan
) -> ConsolidationInputs:
    selected = []
    for ref in p.selected:
        summary = None
        name = ref.rollout_summary_file
        if name.startswith("rollout_summaries/") and ".." not in name:
            summary = await read_text(session, f"{paths.memories_dir}/{name}")
        body = parse_header(summary)[1].strip() if summary else ""
        selected.append(SelectedMemory(ref, p.bodies.get(ref.rollout_id, ""), body))
    return ConsolidationInputs(
        memories_dir=paths.memories_dir,
        selected=selected,
        added=p.diff.added,
        retained=p.diff.retained,
        removed=p.diff.removed,
        current_memory_md=await read_text(session, paths.memory_md) or "",
        consolidated_memory_md=await read_text(session, paths.consolidated_memory_md) or "",
        memory_md_max_bytes=config.memory_md_max_bytes,
        summary_max_bytes=config.summary_max_bytes,
        extra_prompt=config.extra_prompt,
    )


async def consolidate(
    session: SandboxSession,
    paths: MemoryPaths,
    config: MemoryGenerateConfig,
    redactor: Redactor,
    p: Plan,
    now: str,
    provider: ModelProvider,
) -> Usage:
    """Run phase two as a transaction; raises ``MemoryGenerationError`` after rolling back."""
    await session.write(paths.raw_memories_md, raw_memories_document(p.selected, p.bodies))
    inputs = await gather_inputs(session, paths, config, p)
    await begin(session, paths)
    usage = Usage()
    try:
        if config.phase_two_model == EXTRACTIVE:
            await _run_extractive(session, paths, inputs)
        else:
            usage = await _run_agent(session, inputs, config, provider)
        await _check_result(session, paths, config, redactor)
    except BaseException as exc:
        await rollback(session, paths)
        if isinstance(exc, MaxTurnsExceeded):
            raise MemoryGenerationError(
                f"consolidation hit its turn limit ({config.phase_two_max_turns}); previous "
                "memory kept"
            ) from exc
        if isinstance(exc, SandmemError) and not isinstance(exc, MemoryGenerationError):
            raise MemoryGenerationError(f"consolidation failed: {exc}") from exc
        raise
    # Order matters for crash safety: the journal covers the consolidated copy; once the
    # journal is gone the new files stand, and a crash before the selection is written only
    # means the next flush consolidates again.
    memory_md = await read_text(session, paths.memory_md) or ""
    await session.write(paths.consolidated_memory_md, memory_md)
    await commit(session, paths)
    await write_json(session, paths.selection_json, selection_document(p.selected, now))
    logger.info("consolidated %d raw memories in %s", len(p.selected), paths.memories_dir)
    return usage


def selection_summary(p: Plan) -> str:
    return json.dumps(
        {
            "added": [r.rollout_id for r in p.diff.added],
            "retained": [r.rollout_id for r in p.diff.retained],
            "removed": [r.rollout_id for r in p.diff.removed],
        }
    )
