"""Checks of a consolidation result: pure functions over ``MEMORY.md`` and the selection diff.

A conversation is *cited* in ``MEMORY.md`` only by a ``Sources:`` entry: a line that starts
with ``Sources:`` (``**Sources:**`` and ``Sources (rollout ids):`` too, indented or not) whose
rest names it, or, when that rest is empty, the bullet lines right below it. An entry names a
conversation by its rollout summary file (``rollout_summaries/<file>``, the exact file its
raw memory points to; ``rollout_summaries/<rollout-id>_`` when that is unknown) or by its
rollout id as a whole word. A path or id quoted anywhere else (a learning, prose, a code
block) is not a citation, so a conversation cannot make another one look consolidated, or
keep a forgotten one "still cited", by quoting its summary path.

After a consolidation every ``added`` conversation must be cited, and no ``removed`` one may
still be cited. ``forget`` re-consolidates and is checked by the same rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sandmem.memory.layout import SUMMARIES_DIR
from sandmem.memory.selection import RawMemoryRef

_ID_CHARS = r"A-Za-z0-9_\-"
#: ``Sources:``, ``**Sources:**``, ``Sources (rollout ids):``, ``Source:``; group 1 is the rest
_SOURCES_LINE = re.compile(
    r"^[ \t]*(?:\*\*|__)?Sources?(?:[ \t]*\([^()\n]{0,40}\))?(?:\*\*|__)?[ \t]*:(?:\*\*|__)?"
    r"[ \t]*(.*)$"
)
_BULLET = re.compile(r"^[ \t]*(?:[-*+]|[0-9]{1,3}[.)])[ \t]+(.*)$")
_FILE_END = r"(?![A-Za-z0-9_.\-])"


def source_entries(memory_md: str) -> list[str]:
    """The text of every ``Sources:`` entry of ``memory_md`` (see the module docstring)."""
    entries: list[str] = []
    in_list = False
    for line in memory_md.splitlines():
        if in_list:
            bullet = _BULLET.match(line)
            if bullet is not None:
                entries.append(bullet.group(1))
                continue
            in_list = False
        match = _SOURCES_LINE.match(line)
        if match is None:
            continue
        rest = match.group(1).strip()
        if rest:
            entries.append(rest)
        else:
            in_list = True
    return entries


def _names(entry: str, ref: RawMemoryRef) -> bool:
    name = ref.rollout_summary_file.strip().rsplit("/", 1)[-1]
    if name:
        summary = re.escape(f"{SUMMARIES_DIR}/{name}") + _FILE_END
    else:
        summary = re.escape(f"{SUMMARIES_DIR}/{ref.rollout_id}_")
    if re.search(summary, entry) is not None:
        return True
    word = rf"(?<![{_ID_CHARS}./]){re.escape(ref.rollout_id)}(?!\.?[{_ID_CHARS}/])"
    return re.search(word, entry) is not None


def cited(entries: list[str], ref: RawMemoryRef) -> bool:
    """Whether one of ``entries`` (from ``source_entries``) names ``ref``."""
    return any(_names(entry, ref) for entry in entries)


def cites(memory_md: str, ref: RawMemoryRef) -> bool:
    """Whether ``memory_md`` cites ``ref`` on a ``Sources:`` entry."""
    return cited(source_entries(memory_md), ref)


@dataclass(frozen=True)
class Verification:
    """What a consolidation left out: ``missing`` added conversations not cited, and
    ``still_cited`` removed ones that a ``Sources:`` entry still names."""

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
    entries = source_entries(memory_md)
    return Verification(
        missing=[r for r in added if not cited(entries, r)],
        still_cited=[r for r in removed if cited(entries, r)],
    )


def follow_up_message(result: Verification, memories_dir: str) -> str:
    """The one extra turn the consolidation agent gets, naming exactly what is missing."""
    lines = [
        f"{memories_dir}/MEMORY.md is not finished. Every added conversation must be cited "
        "(its rollout summary file on a `Sources:` line), and no removed one may still be "
        "cited."
    ]
    for ref in result.missing:
        where = ref.rollout_summary_file or f"{SUMMARIES_DIR}/{ref.rollout_id}_*.md"
        lines.append(
            f"- fold in {ref.rollout_id}: read {memories_dir}/{where} and its section of "
            f"{memories_dir}/raw_memories.md, add its learnings, and cite {where} on a "
            "`Sources:` line"
        )
    for ref in result.still_cited:
        lines.append(
            f"- drop {ref.rollout_id}: it was forgotten; remove it from the `Sources:` lines "
            "and drop the learnings only it supported"
        )
    lines.append("Fix MEMORY.md (and memory_summary.md if needed) now, then answer in one line.")
    return "\n".join(lines)
