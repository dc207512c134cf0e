"""memory.verify: is every added conversation cited, and no removed one? (pure)

A citation is a ``Sources:`` entry; a summary path or an id quoted anywhere else is not one
(issue 25, class 7: citations could be borrowed by quoting another conversation's path).
"""

from __future__ import annotations

import pytest

from sandmem.memory.selection import RawMemoryRef
from sandmem.memory.verify import cites, follow_up_message, source_entries, verify


def ref(rid: str, slug: str = "task") -> RawMemoryRef:
    return RawMemoryRef(
        rid, "t", f"sessions/{rid}.jsonl", f"rollout_summaries/{rid}_{slug}.md", "completed"
    )


def test_added_cited_by_summary_file_or_id_on_a_sources_line() -> None:
    memory = (
        "## Invoices\nSources: rollout_summaries/inv-7_fix-total.md\n"
        "## Deploy\n- learned in conversation deploy-2.\nSources (rollout ids): deploy-3\n"
    )
    added = [ref("inv-7", "fix-total"), ref("deploy-2"), ref("deploy-3"), ref("ghost")]
    result = verify(memory, added, [])
    assert [r.rollout_id for r in result.missing] == ["deploy-2", "ghost"]
    assert not result.ok and "not folded in: deploy-2, ghost" in result.describe()


def test_an_id_inside_a_longer_word_is_not_a_citation() -> None:
    assert [
        r.rollout_id for r in verify("Sources: run-12, xrun-1", [ref("run-1")], []).missing
    ] == ["run-1"]
    assert verify("Sources: run-1.", [ref("run-1")], []).ok


@pytest.mark.parametrize(
    "memory",
    [
        # the attack: a conversation's learning quotes the victim's summary path
        "## A\n- as in rollout_summaries/victim_task.md the fix was x\n"
        "Sources: rollout_summaries/a_task.md\n",
        # in prose, a code span, a heading, a link, a non-Sources label
        "See `rollout_summaries/victim_task.md` and victim.\nSources: rollout_summaries/a_task.md",
        "## rollout_summaries/victim_task.md\nSources: rollout_summaries/a_task.md\n",
        "[x](rollout_summaries/victim_task.md)\nSources: rollout_summaries/a_task.md\n",
        "Resources: rollout_summaries/victim_task.md\nSources: rollout_summaries/a_task.md\n",
        "Learnings: victim\nSources: rollout_summaries/a_task.md\n",
        # a bullet list that does not hang under an empty Sources: line
        "Sources: rollout_summaries/a_task.md\n- rollout_summaries/victim_task.md\n",
        "Sources:\n- rollout_summaries/a_task.md\n\n- rollout_summaries/victim_task.md\n",
        # a bullet that itself says "Sources:" is a learning, not a Sources line
        "- Sources: rollout_summaries/victim_task.md\nSources: rollout_summaries/a_task.md\n",
        # another rollout whose id starts with the victim's id and an underscore
        "Sources: rollout_summaries/victim_task_other.md, rollout_summaries/a_task.md\n",
        "Sources: rollout_summaries/victim_task.md.bak rollout_summaries/a_task.md\n",
    ],
)
def test_a_quoted_path_or_id_outside_sources_is_no_citation(memory: str) -> None:
    victim, own = ref("victim"), ref("a")
    assert cites(memory, own)
    assert not cites(memory, victim)
    assert [r.rollout_id for r in verify(memory, [victim, own], []).missing] == ["victim"]
    # and a forgotten conversation quoted that way does not stay "still cited" forever
    assert verify(memory, [own], [victim]).ok


@pytest.mark.parametrize(
    "memory",
    [
        "Sources: rollout_summaries/victim_task.md",
        "**Sources:** rollout_summaries/victim_task.md",
        "  Sources: rollout_summaries/victim_task.md (rollout victim)",
        "Sources:\n- rollout_summaries/victim_task.md (rollout victim, updated t, completed)",
        "Sources:\n  * rollout_summaries/other_task.md\n  * rollout_summaries/victim_task.md",
        "Source: victim",
        "Sources (rollout ids): a, victim",
    ],
)
def test_every_sources_form_cites(memory: str) -> None:
    assert cites(memory, ref("victim"))
    assert [r.rollout_id for r in verify(memory, [], [ref("victim")]).still_cited] == ["victim"]


def test_removed_must_not_be_cited() -> None:
    memory = "a short word: a\nSources: rollout_summaries/old_y.md\n"
    result = verify(memory, [], [ref("a"), ref("old", "y")])
    assert [r.rollout_id for r in result.still_cited] == ["old"]


def test_source_entries_reads_inline_and_listed_forms() -> None:
    memory = "Sources: x\n- not an entry\nSources:\n- y\n- z\n\n- w\n"
    assert source_entries(memory) == ["x", "y", "z"]


def test_follow_up_names_exactly_what_is_missing() -> None:
    result = verify("Sources: rollout_summaries/gone_task.md", [ref("new-1")], [ref("gone")])
    text = follow_up_message(result, "memories")
    assert "fold in new-1" in text and "memories/rollout_summaries/new-1_task.md" in text
    assert "drop gone" in text
    assert verify("", [], []).ok
