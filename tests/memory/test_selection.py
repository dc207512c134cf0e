"""SPEC §3.5 phase-two selection and forgetting (pure functions)."""

from __future__ import annotations

import pytest

from sandmem.memory.selection import (
    RawMemoryRef,
    diff_selection,
    newest_first,
    previous_refs,
    select,
    selection_document,
)


def ref(rid: str, updated_at: str = "unknown") -> RawMemoryRef:
    return RawMemoryRef(
        rid, updated_at, f"sessions/{rid}.jsonl", f"rollout_summaries/{rid}_x.md", "completed"
    )


def test_newest_first_with_missing_timestamps_last() -> None:
    refs = [
        ref("old", "2026-01-01T00:00:00Z"),
        ref("none", ""),
        ref("new", "2026-03-01T00:00:00.000Z"),
        ref("unknown", "unknown"),
        ref("garbage", "yesterday"),
        ref("mid", "2026-02-01T00:00:00+00:00"),
    ]
    order = [r.rollout_id for r in newest_first(refs)]
    assert order == ["new", "mid", "old", "garbage", "none", "unknown"]


def test_select_caps() -> None:
    refs = [ref(f"r{i}", f"2026-01-0{i}T00:00:00Z") for i in range(1, 4)]
    assert [r.rollout_id for r in select(refs, 2)] == ["r3", "r2"]
    with pytest.raises(ValueError):
        select(refs, 0)


def test_added_retained_removed() -> None:
    previous = [ref("a", "2026-01-01T00:00:00Z"), ref("b", "2026-01-02T00:00:00Z"), ref("c", "t")]
    selected = [ref("a", "2026-01-01T00:00:00Z"), ref("b", "2026-01-05T00:00:00Z"), ref("d")]
    diff = diff_selection(selected, previous)
    assert [r.rollout_id for r in diff.retained] == ["a"]
    assert [r.rollout_id for r in diff.added] == ["b", "d"]
    assert [r.rollout_id for r in diff.removed] == ["c"]
    assert diff.changed


def test_unchanged_selection_is_not_changed() -> None:
    refs = [ref("a", "2026-01-01T00:00:00Z")]
    assert not diff_selection(refs, refs).changed
    assert not diff_selection([], []).changed


def test_forgetting_with_cap_two_over_three() -> None:
    refs = [ref(f"r{i}", f"2026-01-0{i}T00:00:00Z") for i in range(1, 4)]
    first = select(refs[:2], 2)
    second = select(refs, 2)
    diff = diff_selection(second, first)
    assert [r.rollout_id for r in diff.removed] == ["r1"]
    assert [r.rollout_id for r in diff.added] == ["r3"]


def test_selection_document_round_trip() -> None:
    refs = [ref("a", "2026-01-01T00:00:00Z")]
    document = selection_document(refs, "2026-02-01T00:00:00Z")
    assert document["version"] == 1
    assert document["selected"][0] == {
        "rollout_id": "a",
        "updated_at": "2026-01-01T00:00:00Z",
        "rollout_path": "sessions/a.jsonl",
        "rollout_summary_file": "rollout_summaries/a_x.md",
        "terminal_state": "completed",
    }
    assert previous_refs(document) == refs
    assert previous_refs(None) == [] and previous_refs({"selected": [1, {"x": 2}]}) == []
