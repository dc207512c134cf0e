"""Checks of a consolidation result: pure functions over ``MEMORY.md`` and the selection diff.

A conversation is *cited* in ``MEMORY.md`` when the file names its rollout summary
(``rollout_summaries/<rollout-id>_...``, the ``Sources:`` pointer the phase-two brief asks for)
or its rollout id as a whole word. After a consolidation every ``added`` conversation must be
cited, and no ``removed`` one may still point to its rollout summary (prose that happens to
contain a short id is not a pointer, so only the summary reference counts for removal).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sandmem.memory.selection import RawMemoryRef

_ID_CHARS = r"A-Za-z0-9_\-"


def _summary_prefixes(ref: RawMemoryRef) -> list[str]:
    prefixes = [f"rollout_summaries/{ref.rollout_id}_"]
    name = ref.rollout_summary_file.strip().rsplit("/", 1)[-1]
    if name:
        prefixes.append(f"rollout_summaries/{name}")
    return prefixes


def points_to_summary(memory_md: str, ref: RawMemoryRef) -> bool:
    """``MEMORY.md`` names the conversation's rollout summary file."""
    return any(prefix in memory_md for prefix in _summary_prefixes(ref))


def names_rollout(memory_md: str, rollout_id: str) -> bool:
    """``MEMORY.md`` contains the rollout id as a whole word (a trailing full stop allowed)."""
    pattern = rf"(?<![{_ID_CHARS}.]){re.escape(rollout_id)}(?!\.?[{_ID_CHARS}])"
    return re.search(pattern, memory_md) is not None


def cites(memory_md: str, ref: RawMemoryRef) -> bool:
    return points_to_summary(memory_md, ref) or names_rollout(memory_md, ref.rollout_id)


@dataclass(frozen=True)
class Verification:
    """What a consolidation left out: ``missing`` added conversations not cited, and
    ``still_cited`` removed ones whose summary ``MEMORY.md`` still points to."""

    missing: list[RawMemoryRef] = field(default_factory=list)
    still_cited: list[RawMemoryRef] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.still_cited

    def describe(self) -> str:
        parts = []
        if self.missing:
            parts.append("not folded in: " + ", ".join(r.rollout_id for r in self.missing))
        if self.still_cited:
            parts.append("still cited: " + ", ".join(r.rollout_id for r in self.still_cited))
        return "; ".join(parts)


def verify(memory_md: str, added: list[RawMemoryRef], removed: list[RawMemoryRef]) -> Verification:
    """Check ``memory_md`` against the selection diff (see the module docstring)."""
    return Verification(
        missing=[r for r in added if not cites(memory_md, r)],
        still_cited=[r for r in removed if points_to_summary(memory_md, r)],
    )


def follow_up_message(result: Verification, memories_dir: str) -> str:
    """The one extra turn the consolidation agent gets, naming exactly what is missing."""
    lines = [
        f"{memories_dir}/MEMORY.md is not finished. Every added conversation must be cited "
        "(its rollout summary file on a `Sources:` line), and no removed one may still be "
        "cited."
    ]
    for ref in result.missing:
        where = ref.rollout_summary_file or f"rollout_summaries/{ref.rollout_id}_*.md"
        lines.append(
            f"- fold in {ref.rollout_id}: read {memories_dir}/{where} and its section of "
            f"{memories_dir}/raw_memories.md, add its learnings, and cite {where}"
        )
    for ref in result.still_cited:
        lines.append(
            f"- drop {ref.rollout_id}: it was forgotten; remove the pointers to "
            f"rollout_summaries/{ref.rollout_id}_* and learnings only it supported"
        )
    lines.append("Fix MEMORY.md (and memory_summary.md if needed) now, then answer in one line.")
    return "\n".join(lines)
