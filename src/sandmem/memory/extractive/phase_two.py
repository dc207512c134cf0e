"""Extractive phase two: the selected raw memories (and the current ``MEMORY.md``) in →
``MEMORY.md`` and ``memory_summary.md`` out. Pure and deterministic.

``MEMORY.md``: a title, the notes kept from manual edits, then task groups newest first, each
``## heading`` / ``Keywords:`` / ``Learnings:`` / (``Notes kept from manual edits:``) /
``Sources:``. Over ``memory_md_max_bytes`` it is cut in this order: single-source details
(``File``/``Result``/``Directory``/other notes) of the oldest groups, then whole groups oldest
first (their manual notes move to the notes section), then the least-supported learnings of
the last group, and finally whole lines from the end. ``memory_summary.md`` is cut within
``summary_max_bytes`` by dropping the index's oldest groups first, then the least-supported
tips, then the oldest preferences. No line is ever cut in the middle.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sandmem.memory._types import ConsolidationInputs, ConsolidationOutput, SelectedMemory
from sandmem.memory.extractive._edits import (
    NOTES_HEADING,
    NOTES_MARKER,
    ManualNotes,
    deletion_key,
    manual_notes,
    render_deleted,
)
from sandmem.memory.extractive._groups import KINDS, Group, group_members, members_of, normalize
from sandmem.memory.extractive._summary import render_summary
from sandmem.memory.extractive._text import cut_lines, nbytes
from sandmem.memory.layout import SUMMARIES_DIR
from sandmem.memory.selection import RawMemoryRef
from sandmem.memory.verify import Citations, source_entries
from sandmem.redaction import redact

#: single-source bullets of these kinds go first when MEMORY.md is over its budget, oldest
#: groups first (the rollout summaries, which MEMORY.md points to, still hold them)
_DETAIL_KINDS = frozenset(
    {"file", "note", "result", "directory", "outcome", "request", "fact", "changed"}
)
_INTRO = (
    "Task groups distilled from {n} conversation(s), newest first, by sandmem's offline "
    "extractive engine. Search it with the task's keywords; open a rollout summary only when "
    "a group points there. Lines you add are kept at the next consolidation."
)


@dataclass
class Learning:
    kind: str
    text: str
    rollouts: list[str]  # newest first
    age: int  # of the newest rollout that supports it

    @property
    def line(self) -> str:
        label = "rollout" if len(self.rollouts) == 1 else "rollouts"
        return f"- {self.text} ({label} {', '.join(self.rollouts)})"

    @property
    def rank(self) -> int:
        return KINDS.index(self.kind) if self.kind in KINDS else len(KINDS)


@dataclass
class Block:
    """A task group as written to ``MEMORY.md``."""

    group: Group
    learnings: list[Learning]
    notes: list[str] = field(default_factory=list)

    @property
    def heading(self) -> str:
        return self.group.heading

    def lines(self) -> list[str]:
        out = [f"## {self.heading}", f"Keywords: {', '.join(self.group.keywords)}", "Learnings:"]
        out += [learning.line for learning in self.learnings]
        if self.notes:
            out += [NOTES_MARKER, *self.notes]
        out.append("Sources:")
        out += [_source(m.memory.ref) for m in self.group.members]
        return out

    def size(self) -> int:
        return sum(nbytes(line) + 1 for line in self.lines()) + 1


def _source(ref: RawMemoryRef) -> str:
    name = ref.rollout_summary_file.strip().rsplit("/", 1)[-1]
    where = f"{SUMMARIES_DIR}/{name}" if name else "(no rollout summary)"
    return f"- {where} (rollout {ref.rollout_id}, updated {ref.updated_at}, {ref.terminal_state})"


def consolidate(inputs: ConsolidationInputs) -> ConsolidationOutput:
    """Phase two without a model (see the module docstring for the formats and bounds)."""
    selected = [_redacted(m) for m in inputs.selected]
    groups = group_members(members_of(selected))
    notes = manual_notes(redact(inputs.current_memory_md), redact(inputs.consolidated_memory_md))
    blocks = [b for b in (_block(g, notes.deleted) for g in groups) if b.learnings]
    _dedupe(blocks)
    generated = {normalize(ln.line) for b in blocks for ln in b.learnings}
    notes.drop_generated(generated)
    notes.place({b.heading for b in blocks})
    for block in blocks:
        block.notes = notes.grouped.get(block.heading, [])
    keys = {deletion_key(ln.text) for g in groups for ln in _learnings(g, set())}
    deleted = {entry for entry in notes.deleted if entry in keys}
    refs = [m.ref for m in inputs.selected]
    limit = inputs.memory_md_max_bytes
    memory_md = _cite_the_rest(_fit_memory(blocks, notes, deleted, len(selected), limit), refs)
    if nbytes(memory_md) > limit:
        # the closing citations must survive the budget: keep room for them in compact form
        room = limit - nbytes(_compact_citations(refs))
        fitted = _fit_memory(blocks, notes, deleted, len(selected), max(room, 0))
        memory_md = _cite_the_rest(fitted, refs, compact=True)
    summary = render_summary(blocks, len(selected), inputs.summary_max_bytes)
    return ConsolidationOutput(
        memory_md=cut_lines(redact(memory_md), inputs.memory_md_max_bytes),
        memory_summary_md=cut_lines(redact(summary), inputs.summary_max_bytes),
    )


def _dedupe(blocks: list[Block]) -> None:
    """A learning appears once in the file: in the newest group that has it, citing every
    rollout that supports it."""
    seen: dict[str, Learning] = {}
    for block in blocks:
        kept = []
        for learning in block.learnings:
            first = seen.get(normalize(learning.text))
            if first is None:
                seen[normalize(learning.text)] = learning
                kept.append(learning)
            else:
                first.rollouts += [r for r in learning.rollouts if r not in first.rollouts]
        block.learnings = kept


def _compact_citations(refs: list[RawMemoryRef]) -> str:
    ids = ", ".join(r.rollout_id for r in refs)
    return f"\n\n## Other conversations\nSources (rollout ids): {ids}\n"


def _cite_the_rest(memory_md: str, refs: list[RawMemoryRef], *, compact: bool = False) -> str:
    """Every selected conversation is cited (the verification rule): those whose group was
    dropped for having no learnings or for the budget are listed as sources at the end (by
    rollout id only when the full source lines would not fit the budget)."""
    citations = Citations(source_entries(memory_md))
    missing = [r for r in refs if not citations.names(r)]
    if not missing:
        return memory_md
    if compact:
        return memory_md.rstrip("\n") + _compact_citations(missing)
    lines = ["## Other conversations", "Sources:", *(_source(r) for r in missing)]
    return memory_md.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"


def _redacted(memory: SelectedMemory) -> SelectedMemory:
    return replace(
        memory, raw_memory=redact(memory.raw_memory), rollout_summary=redact(memory.rollout_summary)
    )


def _block(group: Group, deleted: set[str]) -> Block:
    return Block(group, _learnings(group, deleted))


def _learnings(group: Group, deleted: set[str]) -> list[Learning]:
    """The group's bullets merged across its rollouts (same text = one learning citing all),
    each rollout's first task joined with its outcome, deleted ones left out."""
    merged: dict[str, Learning] = {}
    order: dict[str, int] = {}
    for m in group.members:
        bullets = list(m.bullets)
        task = next((b for b in bullets if b.kind == "task"), None)
        outcome = next((b for b in bullets if b.kind == "outcome"), None)
        if task is not None and outcome is not None:
            bullets.remove(outcome)
            index = bullets.index(task)
            outcome_text = outcome.text.split(":", 1)[-1].strip()
            bullets[index] = replace(task, text=f"{task.text} → {outcome_text}")
        for bullet in bullets:
            key = bullet.key
            if not key or deletion_key(bullet.text) in deleted:
                continue
            if key in merged:
                if m.rollout_id not in merged[key].rollouts:
                    merged[key].rollouts.append(m.rollout_id)
            else:
                merged[key] = Learning(bullet.kind, bullet.text, [m.rollout_id], m.age)
                order[key] = len(order)
    return sorted(merged.values(), key=lambda ln: (ln.rank, ln.age, order[normalize(ln.text)]))


# --------------------------------------------------------------------- MEMORY.md and its budget


def _render_memory(blocks: list[Block], notes: ManualNotes, deleted: set[str], n: int) -> str:
    parts = ["# Memory\n\n" + _INTRO.format(n=n) + "\n"]
    if not blocks and not notes.loose:
        parts.append("No memories yet.\n")
    if notes.loose:
        parts.append(f"## {NOTES_HEADING}\n" + "".join(f"{ln}\n" for ln in notes.loose))
    parts.extend("".join(f"{ln}\n" for ln in b.lines()) for b in blocks)
    block = render_deleted(deleted)
    if block:
        parts.append(block)
    return "\n".join(parts)


def _fit_memory(
    blocks: list[Block], notes: ManualNotes, deleted: set[str], n: int, max_bytes: int
) -> str:
    text = _render_memory(blocks, notes, deleted, n)
    excess = nbytes(text) - max_bytes
    if excess <= 0:
        return text
    # 1. single-source details of the oldest groups
    for block in reversed(blocks):
        for learning in sorted(block.learnings, key=lambda ln: (-ln.rank, -ln.age)):
            if excess <= 0:
                break
            if learning.kind in _DETAIL_KINDS and len(learning.rollouts) == 1:
                block.learnings.remove(learning)
                excess -= nbytes(learning.line) + 1
    # 2. whole groups, oldest first; their manual notes move to the notes section
    while excess > 0 and len(blocks) > 1:
        block = blocks.pop()
        moved = [f"### {block.heading}", *block.notes] if block.notes else []
        excess -= block.size() - sum(nbytes(ln) + 1 for ln in moved)
        if moved and not notes.loose:
            excess += nbytes(f"## {NOTES_HEADING}") + 2
        notes.loose.extend(moved)
    # 3. the least-supported learnings of the last group
    if excess > 0 and blocks:
        last = blocks[0]
        for learning in sorted(
            last.learnings, key=lambda ln: (len(ln.rollouts), -ln.rank, -ln.age)
        )[:-1]:
            if excess <= 0:
                break
            last.learnings.remove(learning)
            excess -= nbytes(learning.line) + 1
    return cut_lines(_render_memory(blocks, notes, deleted, n), max_bytes)
