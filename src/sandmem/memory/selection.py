"""Phase-two selection and forgetting: pure functions over raw-memory metadata."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from sandmem.memory.rollouts import ROLLOUT_ID_PATTERN

SELECTION_VERSION = 1


@dataclass(frozen=True)
class RawMemoryRef:
    """The metadata of one raw memory (from its header)."""

    rollout_id: str
    updated_at: str
    rollout_path: str
    rollout_summary_file: str
    terminal_state: str

    @classmethod
    def from_fields(cls, fields: dict[str, str], rollout_id: str) -> RawMemoryRef:
        return cls(
            rollout_id=fields.get("rollout_id") or rollout_id,
            updated_at=fields.get("updated_at") or "unknown",
            rollout_path=fields.get("rollout_path", ""),
            rollout_summary_file=fields.get("rollout_summary_file", ""),
            terminal_state=fields.get("terminal_state", "unknown"),
        )

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def parse_time(value: str | None) -> datetime | None:
    """A timestamp of the state and header files (ISO 8601, ``Z`` or an offset; naive means
    UTC); ``None`` for nothing, ``unknown`` or anything unparsable."""
    if not value or value == "unknown":
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def newest_first(refs: list[RawMemoryRef]) -> list[RawMemoryRef]:
    """Newest ``updated_at`` first; missing, ``unknown`` or unparsable timestamps last; ties
    broken by rollout id so the order is deterministic."""
    dated = [(ts, r) for r in refs if (ts := parse_time(r.updated_at)) is not None]
    undated = [r for r in refs if parse_time(r.updated_at) is None]
    dated.sort(key=lambda pair: (-pair[0].timestamp(), pair[1].rollout_id))
    undated.sort(key=lambda r: r.rollout_id)
    return [r for _, r in dated] + undated


def select(refs: list[RawMemoryRef], cap: int) -> list[RawMemoryRef]:
    """The raw memories phase two consolidates: the newest ``cap``."""
    if cap <= 0:
        raise ValueError("cap must be positive")
    return newest_first(refs)[:cap]


@dataclass(frozen=True)
class SelectionDiff:
    """How this selection differs from the last successful consolidation's."""

    added: list[RawMemoryRef]
    retained: list[RawMemoryRef]
    removed: list[RawMemoryRef]

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


def previous_refs(selection_file: Any) -> list[RawMemoryRef]:
    """The ``selected`` list of a parsed ``phase_two_selection.json`` (tolerant of junk)."""
    return _refs(selection_file)[0]


def _refs(selection_file: Any) -> tuple[list[RawMemoryRef], list[str]]:
    if not isinstance(selection_file, dict) or not isinstance(
        selection_file.get("selected", []), list
    ):
        return [], ["not a selection object"]
    refs, problems = [], []
    for index, entry in enumerate(selection_file.get("selected") or []):
        rid = entry.get("rollout_id") if isinstance(entry, dict) else None
        if isinstance(rid, str) and ROLLOUT_ID_PATTERN.fullmatch(rid):
            fields = {k: str(v) for k, v in entry.items() if isinstance(v, str | int | float)}
            refs.append(RawMemoryRef.from_fields(fields, rid))
        else:
            problems.append(f"entry {index} is not a selected rollout")
    return refs, problems


@dataclass(frozen=True)
class SavedSelection:
    """``phase_two_selection.json`` as read: the refs, when it was written, what was wrong."""

    refs: list[RawMemoryRef]
    updated_at: str | None
    problems: dict[str, str]


def parse_selection_file(data: bytes | None, path: str) -> SavedSelection:
    """The previous selection from the bytes of ``phase_two_selection.json`` and what was
    wrong with it (``path`` → reason). The file is derived data: when it is unreadable or of
    the wrong shape, the previous selection counts as empty, so every selected conversation
    is consolidated again and the file is rewritten."""
    if data is None or not data.strip():
        return SavedSelection([], None, {})
    from sandmem.memory._json import loads_bounded

    try:
        parsed = loads_bounded(data)
    except ValueError as exc:
        return SavedSelection(
            [], None, {path: f"unreadable ({exc}); rebuilt at the next consolidation"}
        )
    updated = parsed.get("updated_at") if isinstance(parsed, dict) else None
    updated_at = str(updated) if isinstance(updated, str) and updated else None
    refs, problems = _refs(parsed)
    if problems:
        reason = "; ".join(problems) + "; rebuilt at the next consolidation"
        return SavedSelection(refs, updated_at, {path: reason})
    return SavedSelection(refs, updated_at, {})


def diff_selection(selected: list[RawMemoryRef], previous: list[RawMemoryRef]) -> SelectionDiff:
    """``retained``: selected last time with the same ``updated_at``; ``added``: new or
    re-extracted since; ``removed``: selected last time and not now (forgotten)."""
    before = {r.rollout_id: r.updated_at for r in previous}
    now_ids = {r.rollout_id for r in selected}
    retained = [r for r in selected if before.get(r.rollout_id) == r.updated_at]
    added = [r for r in selected if before.get(r.rollout_id) != r.updated_at]
    removed = [r for r in previous if r.rollout_id not in now_ids]
    return SelectionDiff(added=added, retained=retained, removed=removed)


def selection_document(selected: list[RawMemoryRef], updated_at: str | None) -> dict[str, Any]:
    """The content of ``phase_two_selection.json`` (``updated_at`` left out when unknown)."""
    document: dict[str, Any] = {"version": SELECTION_VERSION}
    if updated_at is not None:
        document["updated_at"] = updated_at
    document["selected"] = [r.to_json() for r in selected]
    return document
