"""Checks of a consolidation result: pure functions over ``MEMORY.md`` and the selection diff.

A conversation is *cited* in ``MEMORY.md`` only by a ``Sources:`` entry of a task group: a
line that starts with ``Sources:`` (``**Sources:**`` and ``Sources (rollout ids):`` too,
indented or not) whose rest names it, or, when that rest is empty, the bullet lines right
below it; the line must lie under a task group's heading (``## `` or deeper; text before the
first one, or under a ``# `` title, is no task group) and outside code blocks and HTML
comments. An entry names a conversation by its rollout summary file
(``rollout_summaries/<file>``, the exact file its raw memory points to;
``rollout_summaries/<rollout-id>_`` when that is unknown); only an entry labelled as a list
of ids (``Sources (rollout ids): a, b``) names conversations by their rollout ids, as whole
words. A path or id quoted anywhere else (a learning, prose, a code block, a quoted
transcript) is not a citation, so a conversation cannot make another one look consolidated,
or keep a forgotten one "still cited", by quoting its summary path; nor does a rollout id
that is a common word ("one", "default") get cited by prose on a ``Sources:`` line.

After a consolidation every ``added`` conversation must be cited, and no ``removed`` one may
still be cited. ``forget`` re-consolidates and is checked by the same rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sandmem.memory.layout import SUMMARIES_DIR
from sandmem.memory.selection import RawMemoryRef

_ID_CHARS = r"A-Za-z0-9_\-"
#: ``Sources:``, ``**Sources:**``, ``Sources (rollout ids):``, ``Source:``; group 1 is the
#: label in parentheses, group 2 the rest
_SOURCES_LINE = re.compile(
    r"^[ \t]*(?:\*\*|__)?Sources?(?:[ \t]*\(([^()\n]{0,40})\))?(?:\*\*|__)?[ \t]*:(?:\*\*|__)?"
    r"[ \t]*(.*)$"
)
_BULLET = re.compile(r"^[ \t]*(?:[-*+]|[0-9]{1,3}[.)])[ \t]+(.*)$")
_FILE_END = r"(?![A-Za-z0-9_.\-])"
#: a Markdown heading: group 1 its level
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]|$)")
#: the opening (or closing) line of a fenced code block: group 1 the fence
_CODE_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class SourceEntry:
    """One ``Sources:`` entry: its text, and whether it is a list of rollout ids."""

    text: str
    ids: bool = False


def _cited_lines(memory_md: str) -> list[str]:
    """The lines of ``memory_md`` that may cite: inside a task group, outside code blocks
    and HTML comments (the others become empty lines, so list structure is kept)."""
    lines: list[str] = []
    fence, in_comment, in_group = "", False, False
    for line in memory_md.splitlines():
        kept = ""
        if fence:
            opening = _CODE_FENCE.match(line)
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                if not line.strip().strip(fence[0]):
                    fence = ""
        elif in_comment:
            in_comment = "-->" not in line
        elif (opening := _CODE_FENCE.match(line)) is not None:
            fence = opening.group(1)
        elif line.lstrip().startswith("<!--"):
            in_comment = "-->" not in line
        elif (heading := _HEADING.match(line)) is not None:
            in_group = len(heading.group(1)) >= 2
        elif in_group:
            kept = line
        lines.append(kept)
    return lines


def source_entries(memory_md: str) -> list[SourceEntry]:
    """Every ``Sources:`` entry of ``memory_md`` (see the module docstring)."""
    entries: list[SourceEntry] = []
    in_list, ids = False, False
    for line in _cited_lines(memory_md):
        if in_list:
            bullet = _BULLET.match(line)
            if bullet is not None:
                entries.append(SourceEntry(bullet.group(1), ids))
                continue
            in_list = False
        match = _SOURCES_LINE.match(line)
        if match is None:
            continue
        ids = "id" in (match.group(1) or "").lower()
        rest = match.group(2).strip()
        if rest:
            entries.append(SourceEntry(rest, ids))
        else:
            in_list = True
    return entries


def _names(entry: SourceEntry, ref: RawMemoryRef) -> bool:
    name = ref.rollout_summary_file.strip().rsplit("/", 1)[-1]
    if name:
        summary = re.escape(f"{SUMMARIES_DIR}/{name}") + _FILE_END
    else:
        summary = re.escape(f"{SUMMARIES_DIR}/{ref.rollout_id}_")
    if re.search(summary, entry.text) is not None:
        return True
    if not entry.ids:
        return False
    word = rf"(?<![{_ID_CHARS}./]){re.escape(ref.rollout_id)}(?!\.?[{_ID_CHARS}/])"
    return re.search(word, entry.text) is not None


#: every ``rollout_summaries/<name>`` of an entry (overlapping ones too), the name ending
#: where ``_FILE_END`` says a file name ends
_CITED_FILE = re.compile(rf"(?={re.escape(SUMMARIES_DIR)}/([A-Za-z0-9_.\-]*))")
_FILE_NAME = re.compile(r"[A-Za-z0-9_.\-]*")
#: every whole word of id characters, as ``_names`` delimits a rollout id
_CITED_WORD = re.compile(rf"(?<![{_ID_CHARS}./])([{_ID_CHARS}]+)(?!\.?[{_ID_CHARS}/])")
_WORD = re.compile(rf"[{_ID_CHARS}]+")


class Citations:
    """What the ``Sources:`` entries of one ``MEMORY.md`` name, collected in one pass, so
    checking each conversation of a large consolidation is a set lookup (``_names`` per
    conversation and entry was a million regex searches at 1,000 conversations). Answers
    exactly as ``cited`` does; a name or id of other characters is checked that way."""

    def __init__(self, entries: list[SourceEntry]) -> None:
        self.entries = entries
        # entries are lines: nothing matched spans two
        self.text = "\n".join(entry.text for entry in entries)
        id_lists = "\n".join(entry.text for entry in entries if entry.ids)
        self.files = {m.group(1) for m in _CITED_FILE.finditer(self.text)}
        self.words = {m.group(1) for m in _CITED_WORD.finditer(id_lists)}

    def names(self, ref: RawMemoryRef) -> bool:
        """Whether one of the entries names ``ref``."""
        name = ref.rollout_summary_file.strip().rsplit("/", 1)[-1]
        rid = ref.rollout_id
        if not _FILE_NAME.fullmatch(name) or not _WORD.fullmatch(rid):
            return cited(self.entries, ref)
        if name:
            if name in self.files:
                return True
        elif f"{SUMMARIES_DIR}/{rid}_" in self.text:
            return True
        return rid in self.words


def cited(entries: list[SourceEntry], ref: RawMemoryRef) -> bool:
    """Whether one of ``entries`` (from ``source_entries``) names ``ref``."""
    return any(_names(entry, ref) for entry in entries)


def cites(memory_md: str, ref: RawMemoryRef) -> bool:
    """Whether ``memory_md`` cites ``ref`` on a ``Sources:`` entry."""
    return Citations(source_entries(memory_md)).names(ref)


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
    citations = Citations(source_entries(memory_md))
    return Verification(
        missing=[r for r in added if not citations.names(r)],
        still_cited=[r for r in removed if citations.names(r)],
    )


def follow_up_message(result: Verification, memories_dir: str) -> str:
    """The one extra turn the consolidation agent gets, naming exactly what is missing."""
    lines = [
        f"{memories_dir}/MEMORY.md is not finished. Every added conversation must be cited "
        "(its rollout summary file on a `Sources:` line of a task group: under its `## ` "
        "heading, not in a code block), and no removed one may still be cited."
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
