"""Edits survive consolidation: the lines a person or an agent added to ``MEMORY.md`` since the
last consolidation, the notes kept from earlier edits, and the generated lines they deleted.

A line counts as *added* when it is in the current ``MEMORY.md`` and not in the one the last
consolidation wrote (a line diff); it is kept with the ``## `` group it was written under. Lines
already kept as notes (under ``## Notes kept from manual edits`` or a group's ``Notes kept from
manual edits:`` block) stay kept until someone deletes them. A generated bullet that was deleted
stays deleted (compared without its citation).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from sandmem.memory.extractive._groups import normalize

NOTES_HEADING = "Notes kept from manual edits"
#: an HTML comment at the end of MEMORY.md lists generated bullets deleted by hand, so they
#: stay deleted at later consolidations (delete a line of it to let the bullet come back)
DELETED_OPEN = "<!-- generated lines deleted by hand (kept out of this file):"
DELETED_CLOSE = "-->"
NOTES_MARKER = f"{NOTES_HEADING}:"
#: lines of a group that end an in-group notes block
_GROUP_PARTS = ("Keywords:", "Learnings:", "Sources:")
_TITLE = "# Memory"


@dataclass
class ManualNotes:
    """``grouped``: heading → lines to keep in that group; ``loose``: lines for the notes
    section; ``deleted``: normalised generated bullets that were deleted."""

    grouped: dict[str, list[str]] = field(default_factory=dict)
    loose: list[str] = field(default_factory=list)
    deleted: set[str] = field(default_factory=set)

    def place(self, headings: set[str]) -> None:
        """Move notes of groups that no longer exist to the loose notes."""
        for heading in sorted(set(self.grouped) - headings):
            lines = self.grouped.pop(heading)
            self.loose.extend(_unique([f"### {heading}", *lines], self.loose))

    def drop_generated(self, generated: set[str]) -> None:
        """Forget notes that only repeat a generated line."""
        for heading, lines in list(self.grouped.items()):
            kept = [ln for ln in lines if normalize(ln) not in generated]
            if kept:
                self.grouped[heading] = kept
            else:
                del self.grouped[heading]
        self.loose = [ln for ln in self.loose if normalize(ln) not in generated]


@dataclass(frozen=True)
class _Line:
    text: str
    heading: str | None  # the "## " heading above it; None before the first
    in_notes: bool  # under the notes heading or in a group's notes block
    structural: bool  # a heading or a group part line written by the engine


def deletion_key(text: str) -> str:
    """A bullet as listed in the deleted-lines comment: normalised, and without ``--`` (which
    would end an HTML comment)."""
    key = normalize(text)
    while "--" in key:
        key = key.replace("--", "- -")
    return key


def deleted_block(text: str) -> set[str]:
    """The entries of the deleted-lines comment of a ``MEMORY.md``."""
    entries: set[str] = set()
    inside = False
    for line in text.splitlines():
        if line.strip() == DELETED_OPEN:
            inside = True
        elif inside and line.strip() == DELETED_CLOSE:
            inside = False
        elif inside and line.strip():
            entries.add(line.strip())
    return entries


def render_deleted(entries: set[str]) -> str:
    if not entries:
        return ""
    body = "".join(f"{entry}\n" for entry in sorted(entries))
    return f"{DELETED_OPEN}\n{body}{DELETED_CLOSE}\n"


def _annotate(text: str) -> list[_Line]:
    out: list[_Line] = []
    heading: str | None = None
    in_block = False
    in_comment = False
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if stripped == DELETED_OPEN or in_comment:
            in_comment = stripped != DELETED_CLOSE
            out.append(_Line(line, heading, False, True))
            continue
        if line.startswith("## "):
            heading, in_block = line[3:].strip(), False
            out.append(_Line(line, heading, heading == NOTES_HEADING, True))
            continue
        if stripped == NOTES_MARKER:
            in_block = True
            out.append(_Line(line, heading, True, True))
            continue
        if stripped.startswith(_GROUP_PARTS):
            in_block = False
        in_notes = heading == NOTES_HEADING or in_block
        structural = stripped in ("Learnings:", "Sources:", _TITLE) or stripped.startswith(
            "Keywords:"
        )
        out.append(_Line(line, heading, in_notes, structural and not in_notes))
    return out


def manual_notes(current: str, consolidated: str) -> ManualNotes:
    notes = ManualNotes(deleted=deleted_block(current))
    now = _annotate(current)
    before = _annotate(consolidated)
    matcher = difflib.SequenceMatcher(
        None, [ln.text for ln in before], [ln.text for ln in now], autojunk=False
    )
    added: set[int] = set()
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("insert", "replace"):
            added.update(range(j1, j2))
        if tag in ("delete", "replace"):
            notes.deleted.update(
                deletion_key(ln.text)
                for ln in before[i1:i2]
                if ln.text.lstrip().startswith("- ") and not ln.in_notes
            )
    for index, line in enumerate(now):
        if not line.text.strip() or line.structural:
            continue
        if line.in_notes or index in added:
            _keep(notes, line)
    return notes


def _keep(notes: ManualNotes, line: _Line) -> None:
    heading = line.heading
    if heading is None or heading == NOTES_HEADING:
        text = f"##{line.text}" if line.text.startswith("# ") else line.text  # stay a sub-heading
        if text not in notes.loose:
            notes.loose.append(text)
        return
    lines = notes.grouped.setdefault(heading, [])
    if line.text not in lines:
        lines.append(line.text)


def _unique(lines: list[str], existing: list[str]) -> list[str]:
    return [ln for ln in lines if ln not in existing or ln.startswith("### ")]
