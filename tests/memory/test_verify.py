"""memory.verify: is every added conversation cited, and no removed one? (pure)

A citation is a ``Sources:`` entry of a task group; a summary path or an id quoted anywhere
else is not one (issue 25, class 7: citations could be borrowed by quoting another
conversation's path, from a code block, a comment, the text before any task group, or by a
rollout id that is a common word).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandmem.memory.selection import RawMemoryRef
from sandmem.memory.verify import (
    Citations,
    SourceEntry,
    cited,
    cites,
    follow_up_message,
    source_entries,
    verify,
)


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
    memory = "## G\nSources (rollout ids): run-12, xrun-1"
    assert [r.rollout_id for r in verify(memory, [ref("run-1")], []).missing] == ["run-1"]
    assert verify("## G\nSources (rollout ids): run-1.", [ref("run-1")], []).ok


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
    memory = memory if memory.startswith("## ") else "## A group\n" + memory
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
        "Source: rollout_summaries/victim_task.md",
        "Sources (rollout ids): a, victim",
        "Sources (ids): victim",
        "Sources (rollout ids):\n- a\n- victim",
        "### a sub-heading of the group\nSources: rollout_summaries/victim_task.md",
    ],
)
def test_every_sources_form_cites(memory: str) -> None:
    memory = "## A group\n" + memory
    assert cites(memory, ref("victim"))
    assert [r.rollout_id for r in verify(memory, [], [ref("victim")]).still_cited] == ["victim"]


def test_removed_must_not_be_cited() -> None:
    memory = "## G\na short word: a\nSources: rollout_summaries/old_y.md\n"
    result = verify(memory, [], [ref("a"), ref("old", "y")])
    assert [r.rollout_id for r in result.still_cited] == ["old"]


def test_source_entries_reads_inline_and_listed_forms() -> None:
    memory = "## G\nSources: x\n- not an entry\nSources:\n- y\n- z\n\n- w\n"
    assert [entry.text for entry in source_entries(memory)] == ["x", "y", "z"]


def test_follow_up_names_exactly_what_is_missing() -> None:
    memory = "## G\nSources: rollout_summaries/gone_task.md"
    result = verify(memory, [ref("new-1")], [ref("gone")])
    text = follow_up_message(result, "memories")
    assert "fold in new-1" in text and "memories/rollout_summaries/new-1_task.md" in text
    assert "drop gone" in text
    assert verify("", [], []).ok


OWN = "Sources: rollout_summaries/a_task.md\n"


@pytest.mark.parametrize(
    "memory",
    [
        # round 4: a quoted Sources line in a code block (a transcript, a tool output)
        "## A\n```\nSources: rollout_summaries/victim_task.md\n```\n" + OWN,
        "## A\n~~~text\nSources: rollout_summaries/victim_task.md\n~~~\n" + OWN,
        "## A\n  ````md\nSources: rollout_summaries/victim_task.md\n```\nstill code\n````\n" + OWN,
        # in an HTML comment, on one line or several
        "## A\n<!-- Sources: rollout_summaries/victim_task.md -->\n" + OWN,
        "## A\n<!--\nSources: rollout_summaries/victim_task.md\n-->\n" + OWN,
        # outside any task group: before the first one, or under a title
        "Sources: rollout_summaries/victim_task.md\n## A\n" + OWN,
        "# Memory\nSources: rollout_summaries/victim_task.md\n## A\n" + OWN,
        "## A\n" + OWN + "# Appendix\nSources: rollout_summaries/victim_task.md\n",
        # a rollout id that is a common word, on a Sources line that is not a list of ids
        "## A\nSources: victim of a flaky test, rollout_summaries/a_task.md\n",
        "## A\nSources:\n- rollout_summaries/a_task.md\n- victim\n",
    ],
)
def test_a_sources_line_outside_a_task_group_or_in_code_is_no_citation(memory: str) -> None:
    """Before the fix each of these cited the victim: a quoted transcript made another
    conversation look consolidated, and kept a forgotten one "still cited" forever."""
    victim, own = ref("victim"), ref("a")
    assert cites(memory, own), memory
    assert not cites(memory, victim), memory
    assert verify(memory, [own], [victim]).ok


def test_a_citation_after_a_code_block_or_comment_still_counts() -> None:
    memory = (
        "## A\n```\ncode\n```\n<!-- note -->\n"
        + OWN
        + "### B\n<!--\nx\n-->\nSources:\n- rollout_summaries/b_task.md\n"
    )
    assert cites(memory, ref("a")) and cites(memory, ref("b"))


_PIECES = st.sampled_from(
    ["rollout_summaries/", "ab", "a", "b-c", "_", ".", "/", " ", ",", ".md", "x.md", "ab_", "9"]
)


@settings(max_examples=400, deadline=None)
@given(
    texts=st.lists(
        st.tuples(st.lists(_PIECES, max_size=8).map("".join), st.booleans()), max_size=4
    ),
    rollout_id=st.sampled_from(["a", "ab", "b-c", "ab_", "a.b", "9"]),
    summary=st.sampled_from(["", "ab_x.md", "x.md", "rollout_summaries/ab", "a b.md", "ab"]),
)
def test_citations_collected_once_answer_as_the_entry_by_entry_check(
    texts: list[tuple[str, bool]], rollout_id: str, summary: str
) -> None:
    # the set lookups of a large consolidation's check agree with matching each entry
    entries = [SourceEntry(text, ids) for text, ids in texts]
    ref = RawMemoryRef(rollout_id, "t", f"sessions/{rollout_id}.jsonl", summary, "completed")
    assert Citations(entries).names(ref) == cited(entries, ref)
