"""The consolidation's brief: the instructions phase two gives its agent, rendered from
``prompts/phase_two.md`` with the selection, the inputs (their text when they fit
``BRIEF_FILES_MAX_BYTES``, else where to read them) and the edits made to ``MEMORY.md`` since
the last consolidation; and ``bookkeeping``, the brief without the inputs' own text (what
``_degrade`` keeps out of memory).
"""

from __future__ import annotations

import difflib
from dataclasses import replace

from sandmem._prompts import code_block, load_prompt, render_prompt
from sandmem.memory._types import ConsolidationInputs
from sandmem.memory.generation.phase_one import extra_guidance_block
from sandmem.memory.selection import RawMemoryRef
from sandmem.memory.verify import follow_up_message, verify


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
        "person). Keep these edits: they are newer than the raw memories.\n"
        f"{code_block(diff, 'diff')}\n"
    )


#: the brief carries raw_memories.md, MEMORY.md and memory_summary.md themselves when together
#: they fit this many bytes (~50,000 tokens), so the agent needs no read turn; above it, the
#: brief lists them and the agent reads them with its tools
BRIEF_FILES_MAX_BYTES = 200_000


def inputs_block(inputs: ConsolidationInputs) -> str:
    """The brief's inputs: the files' text when they fit ``BRIEF_FILES_MAX_BYTES``, else
    where to read them."""
    root = inputs.memories_dir
    files = (
        (
            f"{root}/raw_memories.md",
            "the selected raw memories, newest first",
            inputs.raw_memories_md,
        ),
        (f"{root}/MEMORY.md", "the current registry, which you update", inputs.current_memory_md),
        (
            f"{root}/memory_summary.md",
            "the current summary, which you update",
            inputs.current_summary_md,
        ),
    )
    size = sum(len(text.encode("utf-8", "surrogatepass")) for _, _, text in files)
    evidence = (
        f"`{root}/rollout_summaries/` holds one recap per conversation, for more evidence when "
        "a raw memory is unclear (read one only if you need it)."
    )
    if size > BRIEF_FILES_MAX_BYTES:
        return (
            "Inputs (read them with your tools):\n"
            f"- `{root}/raw_memories.md`: the selected raw memories, newest first (notes from "
            "individual conversations). Read it first.\n"
            f"- The current `{root}/MEMORY.md` and `{root}/memory_summary.md`, which you "
            f"update.\n- {evidence}"
        )
    blocks = [
        f"`{path}` ({what}):\n{code_block(text, 'markdown') if text.strip() else '(empty)'}"
        for path, what, text in files
    ]
    return (
        "Inputs (their full text is below: you need not read them):\n\n"
        + "\n\n".join(blocks)
        + f"\n\n{evidence}"
    )


def consolidation_instructions(inputs: ConsolidationInputs) -> str:
    template = load_prompt("sandmem.memory", "phase_two")
    return render_prompt(
        template,
        inputs=inputs_block(inputs),
        memories_dir=inputs.memories_dir,
        added=_ref_lines(inputs.added, inputs.memories_dir),
        retained=_ref_lines(inputs.retained, inputs.memories_dir),
        removed=_ref_lines(inputs.removed, inputs.memories_dir),
        edits=edits_block(inputs),
        memory_budget=str(inputs.memory_md_max_bytes),
        summary_budget=str(inputs.summary_max_bytes),
        extra=extra_guidance_block(inputs.extra_prompt),
    )


def bookkeeping(inputs: ConsolidationInputs) -> str:
    """The consolidation's brief without the inputs' own text: its instructions, selection
    lines and input headers, and the follow-up turn (what must never become memory)."""
    bare = replace(
        inputs,
        current_memory_md="",
        consolidated_memory_md="",
        current_summary_md="",
        raw_memories_md="",
        extra_prompt=None,
    )
    missing = verify("", inputs.added, inputs.removed)
    return consolidation_instructions(bare) + "\n" + follow_up_message(missing, inputs.memories_dir)
