"""What an ``apply_patch`` call did to which file, and the nature of each change, described
from the patch's removed and added lines."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sandmem._errors import SandmemError
from sandmem.memory.extractive._shell import describe_content
from sandmem.memory.extractive._text import clip, code
from sandmem.sandboxes._patch_format import AddFile, DeleteFile, UpdateFile, parse_patch

_HEADER = re.compile(r"^\*\*\* (Add File|Update File|Delete File|Move to): (.+?)\s*$", re.M)
_ACTIONS = {"Add File": "created", "Update File": "changed", "Delete File": "deleted"}
_LINE_LIMIT = 90
_CHANGES_PER_FILE = 3


@dataclass(frozen=True)
class PatchChange:
    """One file operation of a patch: ``action`` is created, changed, deleted or moved;
    ``detail`` describes the change (``changed `a` to `b```), ``new_path`` the move target."""

    action: str
    path: str
    detail: str = ""
    new_path: str = ""


def patch_changes(patch: str) -> list[PatchChange]:
    """The operations of ``patch`` with a description of each; a patch that does not parse
    still yields the files named in its headers (without details)."""
    try:
        ops = parse_patch(patch)
    except (SandmemError, ValueError):
        return _from_headers(patch)
    changes: list[PatchChange] = []
    for op in ops:
        if isinstance(op, AddFile):
            content = "\n".join(op.lines)
            changes.append(
                PatchChange("created", op.path, describe_content(op.path, content) or "")
            )
        elif isinstance(op, DeleteFile):
            changes.append(PatchChange("deleted", op.path))
        elif isinstance(op, UpdateFile):
            detail = describe_update(op)
            if op.move_to:
                changes.append(PatchChange("moved", op.path, detail, op.move_to))
            else:
                changes.append(PatchChange("changed", op.path, detail))
    return changes


def _from_headers(patch: str) -> list[PatchChange]:
    changes: list[PatchChange] = []
    for verb, path in _HEADER.findall(patch):
        if verb == "Move to" and changes:
            last = changes[-1]
            changes[-1] = PatchChange("moved", last.path, last.detail, path)
        elif verb in _ACTIONS:
            changes.append(PatchChange(_ACTIONS[verb], path))
    return changes


def describe_update(op: UpdateFile) -> str:
    """``changed `old` to `new```, ``added `line` (+2 lines)``, ``removed `line```… for the
    first few hunks of ``op``."""
    parts: list[str] = []
    for hunk in op.hunks:
        removed = [t.strip() for k, t in hunk.lines if k == "-" and t.strip()]
        added = [t.strip() for k, t in hunk.lines if k == "+" and t.strip()]
        parts.extend(_describe_hunk(removed, added))
    return _join(parts)


def describe_lines(pairs: list[tuple[str, str]]) -> str:
    """The same description for edits given as ``(old text, new text)`` pairs (an edit
    tool's replacements)."""
    parts: list[str] = []
    for old, new in pairs:
        removed = [t.strip() for t in old.splitlines() if t.strip()]
        added = [t.strip() for t in new.splitlines() if t.strip()]
        parts.extend(_describe_hunk(removed, added))
    return _join(parts)


def _join(parts: list[str]) -> str:
    if len(parts) > _CHANGES_PER_FILE:
        parts = [*parts[:_CHANGES_PER_FILE], f"{len(parts) - _CHANGES_PER_FILE} more changes"]
    return "; ".join(parts)


def _describe_hunk(removed: list[str], added: list[str]) -> list[str]:
    if removed and len(removed) == len(added) and len(removed) <= 2:
        return [
            f"changed {_span(old)} to {_span(new)}"
            for old, new in zip(removed, added, strict=True)
            if old != new
        ]
    if removed and added:
        return [
            f"replaced {_span(removed[0])}{_more(removed)} with {_span(added[0])}{_more(added)}"
        ]
    if added:
        return [f"added {_span(added[0])}{_more(added)}"]
    if removed:
        return [f"removed {_span(removed[0])}{_more(removed)}"]
    return []


def _span(line: str) -> str:
    return code(clip(line, _LINE_LIMIT))


def _more(lines: list[str]) -> str:
    return f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
