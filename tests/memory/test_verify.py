"""memory.verify: is every added conversation cited, and no removed one? (pure)"""

from __future__ import annotations

from sandmem.memory.selection import RawMemoryRef
from sandmem.memory.verify import follow_up_message, verify


def ref(rid: str, slug: str = "task") -> RawMemoryRef:
    return RawMemoryRef(
        rid, "t", f"sessions/{rid}.jsonl", f"rollout_summaries/{rid}_{slug}.md", "completed"
    )


def test_added_cited_by_summary_file_or_id() -> None:
    memory = (
        "## Invoices\nSources: rollout_summaries/inv-7_fix-total.md\n"
        "## Deploy\n- learned in conversation deploy-2.\n"
    )
    result = verify(memory, [ref("inv-7", "fix-total"), ref("deploy-2"), ref("ghost")], [])
    assert [r.rollout_id for r in result.missing] == ["ghost"]
    assert not result.ok and "not folded in: ghost" in result.describe()


def test_an_id_inside_a_longer_word_is_not_a_citation() -> None:
    assert [r.rollout_id for r in verify("see run-12 and xrun-1", [ref("run-1")], []).missing] == [
        "run-1"
    ]
    assert verify("fixed in run-1.", [ref("run-1")], []).ok


def test_removed_must_not_point_to_its_summary() -> None:
    memory = "a short word: a\nSources: rollout_summaries/old_x.md\n"
    result = verify(memory, [], [ref("a"), ref("old", "y")])
    # prose that contains a short id is no pointer; a summary reference of the rollout is
    assert [r.rollout_id for r in result.still_cited] == ["old"]


def test_follow_up_names_exactly_what_is_missing() -> None:
    result = verify("Sources: rollout_summaries/gone_x.md", [ref("new-1")], [ref("gone")])
    text = follow_up_message(result, "memories")
    assert "fold in new-1" in text and "memories/rollout_summaries/new-1_task.md" in text
    assert "drop gone" in text
    assert verify("", [], []).ok
